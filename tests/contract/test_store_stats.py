"""Store statistics (overview, throughput), tags and the dispatcher switch, on SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec.structs import replace
from sqlalchemy import text

from rota.core.ids import new_id
from rota.core.models import DispatcherState, Job, Occurrence, OccurrenceStatus
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.ports import Store
from rota.core.records import StoreOverview, TagCount, ThroughputPoint
from rota.stores.sql import SqlStore

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def job(**fields: object) -> Job:
    values: dict[str, object] = {"id": new_id(), "job_type": "report", "execute_at": T0}
    return Job(**(values | fields))  # type: ignore[arg-type]


def ended(owner: Job, status: S, at: datetime, duration: float | None = None) -> Occurrence:
    """An occurrence of ``owner`` that ended with ``status`` at ``at``."""
    occ = new_occurrence(owner, at - timedelta(seconds=1), at, PlanSettings())
    return replace(
        occ,
        id=new_id(),
        scheduled_for=at - timedelta(microseconds=at.microsecond % 1000 + 1),
        status=status,
        end_time=at,
        duration_ms=duration,
    )


async def test_overview_counts_by_status_jobs_and_the_window(store: Store) -> None:
    empty = await store.overview(T0)
    assert empty.jobs == 0
    assert empty.completed == empty.failed == empty.cancelled == 0
    assert empty.average_duration_ms is None
    assert set(empty.by_status) == set(S)
    assert sum(empty.by_status.values()) == 0

    a, b = job(), job(is_active=False)
    await store.create_jobs([a, b])
    occs = [
        ended(a, S.COMPLETED, T0 - 2 * HOUR, 999.0),  # before the window
        ended(a, S.COMPLETED, T0 + timedelta(minutes=1), 100.0),
        ended(a, S.COMPLETED, T0 + timedelta(minutes=2), 300.0),
        ended(a, S.COMPLETED, T0 + timedelta(minutes=3)),  # no duration
        ended(b, S.FAILED, T0 + timedelta(minutes=4)),
        ended(b, S.TIMED_OUT, T0 + timedelta(minutes=5)),
        ended(b, S.CANCELLED, T0 + timedelta(minutes=6)),
    ]
    queued = replace(new_occurrence(a, T0 + HOUR, T0, PlanSettings()), id=new_id())
    await store.insert_occurrences([*occs, queued])

    got = await store.overview(T0)
    assert isinstance(got, StoreOverview)
    assert (got.jobs, got.active_jobs) == (2, 1)
    assert (got.completed, got.failed, got.cancelled) == (3, 2, 1)
    assert got.average_duration_ms == 200.0
    assert got.by_status[S.COMPLETED] == 4
    assert got.by_status[S.QUEUED] == 1
    assert got.by_status[S.RUNNING] == 0


async def test_throughput_counts_per_bucket_with_empty_buckets(store: Store) -> None:
    owner = job()
    await store.create_jobs([owner])
    minute = timedelta(minutes=1)
    occs = [
        ended(owner, S.COMPLETED, T0 - timedelta(seconds=1)),  # before: left out
        ended(owner, S.COMPLETED, T0),  # the first instant belongs to bucket 0
        ended(owner, S.COMPLETED, T0 + timedelta(seconds=59, microseconds=999_000)),
        ended(owner, S.FAILED, T0 + timedelta(seconds=30)),
        ended(owner, S.TIMED_OUT, T0 + 2 * minute + timedelta(seconds=5)),
        ended(owner, S.CANCELLED, T0 + 2 * minute),  # neither completed nor failed
        ended(owner, S.COMPLETED, T0 + 3 * minute),  # the end is exclusive
    ]
    await store.insert_occurrences(occs)
    points = await store.throughput(T0, 60, 3)
    assert points == [
        ThroughputPoint(T0, 2, 1),
        ThroughputPoint(T0 + minute, 0, 0),
        ThroughputPoint(T0 + 2 * minute, 0, 1),
    ]
    assert await store.throughput(T0 + HOUR, 3600, 2) == [
        ThroughputPoint(T0 + HOUR, 0, 0),
        ThroughputPoint(T0 + 2 * HOUR, 0, 0),
    ]


async def test_throughput_uses_the_end_time_index(store: SqlStore) -> None:  # the SQL plan
    owner = job()
    await store.create_jobs([owner])
    many = [ended(owner, S.COMPLETED, T0 - timedelta(minutes=n), 10.0) for n in range(0, 20_000, 1)]
    for i in range(0, len(many), 5000):
        await store.insert_occurrences(many[i : i + 5000])
    stmt = store.throughput_statement(T0 - HOUR, 60, 60)
    plan = await explain(store, stmt, analyze="occurrences")
    # On PostgreSQL each time partition has its own copy of the index (``…_end_time_status_idx``).
    assert "end_time_status" in plan, plan
    points = await store.throughput(T0 - HOUR, 60, 60)
    assert sum(p.completed for p in points) == 60


async def test_due_jobs_read_the_schedule_index(store: SqlStore) -> None:  # the SQL plan
    many = [job(next_run_at=T0 + timedelta(seconds=n), bucket=n % 7) for n in range(5000)]
    many += [job(next_run_at=T0, is_active=False) for _ in range(500)]
    await store.create_jobs(many)
    for buckets in (None, [1, 2]):
        plan = await explain(store, store.due_statement(T0 + HOUR, buckets, 100), analyze="jobs")
        postgres = store.dialect == "postgresql"
        schedule = "ix_jobs_schedule" if postgres else "ix_jobs_is_active_next_run_at"
        assert schedule in plan, plan
    due = await store.due_jobs(T0 + timedelta(seconds=9), [1, 2], 100)
    assert [e.due_at for e in due] == [T0 + timedelta(seconds=s) for s in (1, 2, 8, 9)]


async def explain(store: SqlStore, stmt: Any, *, analyze: str) -> str:
    """The plan of ``stmt`` (after ANALYZE of the table ``analyze`` on PostgreSQL)."""
    async with store._read() as conn:
        if store.dialect == "postgresql":
            await conn.execute(text(f"ANALYZE {analyze}"))
            prefix = "EXPLAIN "
        else:
            prefix = "EXPLAIN QUERY PLAN "
        compiled = stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        params = compiled.construct_params()
        convert = compiled._bind_processors
        values = tuple(
            convert[key](params[key]) if key in convert else params[key]
            for key in compiled.positiontup or ()
        )
        rows = await conn.exec_driver_sql(prefix + str(compiled), values)
        return "\n".join(str(row) for row in rows)


async def test_tags_with_job_counts(store: Store) -> None:
    assert await store.tags() == []
    await store.create_jobs(
        [job(tags=("billing", "nightly")), job(tags=("nightly",)), job(tags=())]
    )
    assert await store.tags() == [TagCount("billing", 1), TagCount("nightly", 2)]


async def test_dispatcher_state_round_trips(store: Store) -> None:
    assert await store.dispatcher_state() == DispatcherState()
    stopped = DispatcherState(paused=True, reason="db maintenance", by="ops", changed_at=T0)
    await store.set_dispatcher_state(stopped)
    assert await store.dispatcher_state() == stopped
    resumed = DispatcherState(paused=False, by="ops", changed_at=T0 + HOUR)
    await store.set_dispatcher_state(resumed)
    assert await store.dispatcher_state() == resumed
