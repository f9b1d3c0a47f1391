"""A status batch of runs that completed (``rota.stores.sql.completions``), applied
set-based (PostgreSQL one statement, SQLite a read and one statement) instead of by the rules
of ``rota.core.transitions``, which take the reports that do not fit; the outcomes are the
rules': the end, the start a folded ``Running`` implies, the history, the statistics, the
reports ignored and why, the failure streaks and probes the successes end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from msgspec.structs import replace

from rota.core.models import Occurrence, StatusRecord
from rota.core.models import OccurrenceStatus as S
from rota.core.records import AppliedChange
from rota.stores.sql import SqlStore
from rota.stores.sql.completions import COMPLETE_RUNS, COMPLETE_RUNS_SQLITE, completions
from tests.contract.test_store import NOW, fired, make_job, minutely, status
from tests.contract.test_store_batches import HOT, pg_plan, writes, written
from tests.contract.test_store_plain_fires import dispatch

T1, T2, T3 = (NOW + timedelta(seconds=s) for s in (1, 2, 3))


async def test_a_batch_of_completions_ends_each_run_as_the_rules_do(
    store: SqlStore, store_kind: str
) -> None:
    folded, plain, running = [await fired(store, make_job()) for _ in range(3)]
    await store.apply_status([status(running, S.RUNNING, T1, instance_id="w-1")])
    records = [
        # a short run: its Running folded into the end, with the start it measured
        status(folded, S.COMPLETED, T3, instance_id="w-1", duration_ms=1500.0, started_at=T1),
        # no instance named (not a worker's run): one step, the start its time less its length
        status(plain, S.COMPLETED, T3, duration_ms=2000.0, result=[1, {"a": None}]),
        status(running, S.COMPLETED, T3, instance_id="w-1", duration_ms=900.0, result="ok"),
    ]
    assert completions(records)
    with writes(store) as statements:
        result = await store.apply_status(records)

    assert (result.ignored, result.heartbeats, result.disabled) == ([], 0, [])
    assert [(c.occurrence_id, c.from_status, c.to_status) for c in result.applied] == [
        (folded.id, S.QUEUED, S.COMPLETED),
        (plain.id, S.QUEUED, S.COMPLETED),
        (running.id, S.RUNNING, S.COMPLETED),
    ]
    assert result.applied[0] == AppliedChange(
        occurrence_id=folded.id,
        job_id=folded.job_id,
        from_status=S.QUEUED,
        to_status=S.COMPLETED,
        attempt=1,
        job_type=folded.job_type,
        worker_id=folded.worker_id,
        instance_id="w-1",
    )
    stored = {o.id: await store.get_occurrence(o.id) for o in (folded, plain, running)}
    steps = {
        i: [(c.from_status, c.to_status, c.timestamp) for c in o.status_changes]
        for i, o in stored.items()
    }
    assert steps[folded.id] == [
        (None, S.QUEUED, NOW),
        (S.QUEUED, S.RUNNING, T1),
        (S.RUNNING, S.COMPLETED, T3),
    ]
    assert steps[plain.id] == [(None, S.QUEUED, NOW), (S.QUEUED, S.COMPLETED, T3)]
    assert steps[running.id] == [
        (None, S.QUEUED, NOW),
        (S.QUEUED, S.RUNNING, T1),
        (S.RUNNING, S.COMPLETED, T3),
    ]
    assert [c.reason for c in stored[folded.id].status_changes] == [None, None, None]
    ends = {
        i: (o.status, o.start_time, o.end_time, o.duration_ms, o.result, o.instance_id, o.exception)
        for i, o in stored.items()
    }
    assert ends == {
        folded.id: (S.COMPLETED, T1, T3, 1500.0, None, "w-1", None),
        plain.id: (S.COMPLETED, T1, T3, 2000.0, [1, {"a": None}], None, None),
        running.id: (S.COMPLETED, T1, T3, 900.0, "ok", "w-1", None),
    }
    job = await store.get_job(folded.job_id)
    assert (job.total_executions, job.success_count, job.average_duration_ms) == (1, 1, 1500.0)
    overview = await store.overview(NOW)
    assert (overview.by_status[S.COMPLETED], overview.by_status[S.QUEUED]) == (3, 0)
    assert (overview.completed, overview.average_duration_ms) == (3, 1466.6666666666667)
    statement = COMPLETE_RUNS if store_kind == "postgres" else COMPLETE_RUNS_SQLITE
    (ran,) = [s for s in statements if statement.strip()[:60] in s]
    # SQLite: one call to the hot writer's thread, the statistics in the same transaction
    assert ran.startswith(HOT) == (store_kind == "sqlite")
    if store_kind == "sqlite":
        assert all(s.startswith(HOT) for s in statements), statements


async def test_reports_that_do_not_fit_are_judged_by_the_rules(store: SqlStore) -> None:
    """In a batch of completions: a report of an older attempt is late, one of an ended run
    a forbidden transition, one of no occurrence unknown; one of a newer attempt ends it."""
    late, ended, newer = [await fired(store, make_job()) for _ in range(3)]
    await store.apply_status(
        [
            status(late, S.FAILED, T1, attempt=1, duration_ms=5.0, retry_at=T1),
            status(ended, S.COMPLETED, T1, duration_ms=5.0),
        ]
    )
    gone = replace(late, id=late.job_id)  # an id no occurrence has
    records = [
        status(late, S.COMPLETED, T3, attempt=1, duration_ms=10.0),
        status(ended, S.COMPLETED, T3, duration_ms=10.0),
        status(gone, S.COMPLETED, T3, duration_ms=10.0),
        status(newer, S.COMPLETED, T3, attempt=2, instance_id="w-2", duration_ms=10.0),
    ]
    assert completions(records)
    result = await store.apply_status(records)

    assert sorted((i.record.occurrence_id, i.reason) for i in result.ignored) == sorted(
        [(late.id, "late"), (ended.id, "transition"), (gone.id, "unknown")]
    )
    assert [(c.occurrence_id, c.attempt) for c in result.applied] == [(newer.id, 2)]
    assert (await store.get_occurrence(late.id)).status is S.QUEUED  # its retry waits
    assert (await store.get_occurrence(ended.id)).end_time == T1
    assert (await store.get_occurrence(newer.id)).status is S.COMPLETED


async def test_completions_end_a_failure_streak_and_a_probe(store: SqlStore) -> None:
    streak = make_job(consecutive_failures=2, last_failure_at=NOW)
    probe = make_job(probing=True, consecutive_failures=3, disabled_reason="3 failures")
    calm = make_job()
    runs = [await fired(store, job) for job in (streak, probe, calm)]
    await store.apply_status([status(o, S.COMPLETED, T2, duration_ms=1.0) for o in runs])

    after = {j.id: await store.get_job(j.id) for j in (streak, probe, calm)}
    assert [after[j.id].consecutive_failures for j in (streak, probe, calm)] == [0, 0, 0]
    assert (after[probe.id].probing, after[probe.id].disabled_reason) == (False, None)
    assert after[streak.id].last_failure_at == NOW


async def test_a_recurring_jobs_completions_count_in_its_statistics(store: SqlStore) -> None:
    job = make_job(cron_expression="* * * * *")
    occ = await fired(store, job, minutely)
    await store.apply_status([status(occ, S.COMPLETED, T2, duration_ms=300.0)])
    stored = await store.get_job(job.id)
    assert (stored.total_executions, stored.success_count, stored.failure_count) == (1, 1, 0)
    assert stored.average_duration_ms == 300.0


def test_only_a_batch_of_plain_completions_takes_the_one_statement() -> None:
    occ_a, occ_b = make_job().id, make_job().id
    end = status(occ_a, S.COMPLETED, T1, duration_ms=1.0)
    assert completions([end, status(occ_b, S.COMPLETED, T1, duration_ms=2.0)])
    assert not completions([end, status(occ_a, S.COMPLETED, T2, duration_ms=1.0)])  # twice
    assert not completions([end, status(occ_b, S.RUNNING, T1)])
    assert not completions([status(occ_b, S.COMPLETED, T1)])  # no duration
    assert not completions([status(occ_b, S.FAILED, T1, duration_ms=1.0, retry_at=T2)])


async def _scenario(store: SqlStore) -> list[Occurrence]:
    folded, plain, running = [await fired(store, make_job()) for _ in range(3)]
    await store.apply_status([status(running, S.RUNNING, T1, instance_id="w-1")])
    return [folded, plain, running]


def _reports(folded: Occurrence, plain: Occurrence, running: Occurrence) -> list[StatusRecord]:
    at = T3 + timedelta(microseconds=654_321)  # times kept to the microsecond, both ways
    return [
        status(folded, S.COMPLETED, at, instance_id="w-1", duration_ms=1500.007),
        status(plain, S.COMPLETED, at, duration_ms=2000.0, result={"n": 1}),
        status(running, S.COMPLETED, at, instance_id="w-1", duration_ms=900.0, result="ok"),
    ]


async def test_the_set_based_path_stores_what_the_rules_store(store: SqlStore) -> None:
    """The same completions, once alone (set-based) and once beside a report that sends the
    whole batch through the rules: the same occurrences, histories and statistics."""
    by_set, by_rules = await _scenario(store), await _scenario(store)
    other = await fired(store, make_job())
    records = _reports(*by_set)
    assert completions(records)
    mixed = [*_reports(*by_rules), status(other, S.RUNNING, T2, instance_id="w-9")]
    assert not completions(mixed)
    first = await store.apply_status(records)
    second = await store.apply_status(mixed)

    assert [(c.from_status, c.to_status, c.attempt, c.instance_id) for c in first.applied] == [
        (c.from_status, c.to_status, c.attempt, c.instance_id) for c in second.applied[:3]
    ]
    for a, b in zip(by_set, by_rules, strict=True):
        x, y = await store.get_occurrence(a.id), await store.get_occurrence(b.id)
        assert (x.status, x.start_time, x.end_time, x.duration_ms, x.result, x.instance_id) == (
            y.status,
            y.start_time,
            y.end_time,
            y.duration_ms,
            y.result,
            y.instance_id,
        )
        assert [
            (c.from_status, c.to_status, c.timestamp, c.attempt, c.reason) for c in x.status_changes
        ] == [
            (c.from_status, c.to_status, c.timestamp, c.attempt, c.reason) for c in y.status_changes
        ]
        jx, jy = await store.get_job(a.job_id), await store.get_job(b.job_id)
        assert (jx.total_executions, jx.success_count, jx.average_duration_ms) == (
            jy.total_executions,
            jy.success_count,
            jy.average_duration_ms,
        )


async def test_postgresql_joins_the_reports_once(store: SqlStore, store_kind: str) -> None:
    """The reports are matched with their occurrences once, and what the update needs of them
    is carried along: joined again with the occurrences they found, a plan from estimates
    of a few rows each (an ``unnest``'s) rescans every report for every occurrence, a batch's
    size squared (found in a 100,000-job bench: 185 ms a batch of 1,500)."""
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's plans")
    jobs = [make_job() for _ in range(500)]
    await store.create_jobs(jobs)
    queued = (await dispatch(store, jobs)).queued
    records = [status(o, S.COMPLETED, T3, instance_id="w", duration_ms=1.0) for o in queued]
    with written(store, COMPLETE_RUNS) as runs:
        result = await store.apply_status(records)
    assert len(result.applied) == 500
    [params] = runs
    plan = await pg_plan(store, COMPLETE_RUNS, params)
    assert plan.count("CTE Scan on r") + plan.count("Function Scan on r") == 1, plan
