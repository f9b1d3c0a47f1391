"""A dispatch with the plain one-time fires described (``PlainFires``): on PostgreSQL the store
fires them in one statement (``rota.stores.sql.firing``), on SQLite in three over JSON arrays;
every other job of the batch is planned one by one on both. The outcomes are the same: the
occurrences and their values, which are queued, held or skipped and why, the jobs' next
fires, the batch record of what the caller sends, the statistics."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    MisfirePolicy,
    Occurrence,
)
from rota.core.models import (
    OccurrenceStatus as S,
)
from rota.core.planning import FirePlan, PlainFires, PlanSettings, plan_fires, with_type_defaults
from rota.core.records import DispatchResult
from rota.stores.sql import SqlStore
from rota.stores.sql.firing import FIRE_PLAIN, FIRE_PLAIN_SQLITE
from tests.contract.test_store import NOW, T0, make_job, occurrence
from tests.contract.test_store_batches import HOT, pg_plan, writes, written

SETTINGS = PlanSettings(default_max_retries=2)
DECLARED = {"send-email": {"grp-a", "grp-b"}, "report": {"grp-a"}}
DEFAULTS: dict[str, dict[str, Any]] = {"report": {"maxRetries": 5, "timeoutSeconds": 30}}


def facts(now: datetime, *, mark_skip: bool = False) -> PlainFires:
    return PlainFires(
        now=now,
        late_before=now - SETTINGS.misfire_threshold,
        default_max_retries=SETTINGS.default_max_retries,
        declared=tuple((t, g) for t, groups in DECLARED.items() for g in sorted(groups)),
        type_defaults=tuple(
            (t, d.get("maxRetries"), d.get("timeoutSeconds")) for t, d in DEFAULTS.items()
        ),
        mark_skip=mark_skip,
    )


def planner(now: datetime, *, mark_skip: bool = False) -> Any:
    """The dispatcher's planner for the same facts (``Dispatcher._plan``)."""

    def plan(job: Job, active: int, _horizon: datetime) -> FirePlan:
        job = with_type_defaults(job, DEFAULTS.get(job.job_type))
        groups = DECLARED.get(job.job_type, set())
        mark = mark_skip and job.concurrency_policy is ConcurrencyPolicy.SKIP
        return plan_fires(
            job,
            active,
            now,
            SETTINGS,
            has_worker=bool(groups) and (job.worker_id is None or job.worker_id in groups),
            dispatched_at=now if mark else None,
            horizon=_horizon,
        )

    return plan


async def dispatch(
    store: SqlStore, jobs: Sequence[Job], *, claim: bool = False, mark_skip: bool = False
) -> DispatchResult:
    ids = [j.id for j in jobs]
    claim_until = NOW + timedelta(seconds=30) if claim else None
    return await store.dispatch_due(
        ids,
        NOW,
        planner(NOW, mark_skip=mark_skip),
        claim_until=claim_until,
        plain=facts(NOW, mark_skip=mark_skip),
    )


def by_job(result: DispatchResult) -> dict[Any, tuple[str, Occurrence]]:
    found: dict[Any, tuple[str, Occurrence]] = {}
    for kind, occurrences in (
        ("queued", result.queued),
        ("held", result.held),
        ("skipped", result.skipped),
    ):
        for o in occurrences:
            found[o.job_id] = (kind, o)
    return found


async def test_a_batch_fires_its_plain_jobs_and_plans_the_others_as_the_planner_does(
    store: SqlStore, store_kind: str
) -> None:
    late = NOW - timedelta(minutes=5)
    plain = make_job()
    typed = make_job(job_type="report", worker_id="grp-a", priority=3)
    own = make_job(job_type="report", max_retries=0, timeout_seconds=4.5, job_data={"k": [1]})
    recurring = make_job(cron_expression="*/5 * * * *", next_run_at=T0)
    paused = make_job(paused_at=T0, pause_note="upgrade")
    skipped_late = make_job(next_run_at=late, misfire_policy=MisfirePolicy.SKIP)
    late_once = make_job(next_run_at=late)  # fire_once: it runs late
    undeclared = make_job(job_type="nobody-runs-this")
    other_group = make_job(worker_id="grp-z")
    jittered = make_job(jitter_seconds=10.0)
    busy = make_job(concurrency_policy=ConcurrencyPolicy.SKIP)
    spent = make_job(max_runs=1, run_count=1)
    jobs = [
        plain,
        typed,
        own,
        recurring,
        paused,
        skipped_late,
        late_once,
        undeclared,
        other_group,
        jittered,
        spent,
    ]
    await store.create_jobs([*jobs, busy])
    earlier = occurrence(busy, T0 - timedelta(minutes=1))  # Queued: the fire overlaps it
    await store.insert_occurrences([earlier])

    with writes(store) as statements:
        result = await dispatch(store, [*jobs, busy])

    kinds = {
        job_id: (kind, o.status, o.skip_reason) for job_id, (kind, o) in by_job(result).items()
    }
    assert kinds == {
        plain.id: ("queued", S.QUEUED, None),
        typed.id: ("queued", S.QUEUED, None),
        own.id: ("queued", S.QUEUED, None),
        recurring.id: ("queued", S.QUEUED, None),
        paused.id: ("skipped", S.SKIPPED, "paused"),
        skipped_late.id: ("skipped", S.SKIPPED, "misfire"),
        late_once.id: ("queued", S.QUEUED, None),
        undeclared.id: ("skipped", S.SKIPPED, "no_worker"),
        other_group.id: ("skipped", S.SKIPPED, "no_worker"),
        jittered.id: ("held", S.QUEUED, None),
        busy.id: ("skipped", S.SKIPPED, "overlap"),
    }
    assert earlier.job_id == busy.id
    sent = {o.job_id: await store.get_occurrence(o.id) for o in result.queued}
    values = {
        job_id: (
            o.scheduled_for,
            o.due_at,
            o.created_at,
            o.attempt,
            o.max_retries,
            int(o.priority),
            o.timeout_seconds,
            o.job_data,
            o.dispatched_at,
            [(c.from_status, c.to_status, c.timestamp, c.reason) for c in o.status_changes],
        )
        for job_id, o in sent.items()
    }
    created = [(None, S.QUEUED, NOW, None)]
    assert values[plain.id] == (T0, T0, NOW, 1, 2, 2, None, None, None, created)
    assert values[typed.id] == (T0, T0, NOW, 1, 5, 3, 30.0, None, None, created)
    assert values[own.id] == (T0, T0, NOW, 1, 0, 2, 4.5, {"k": [1]}, None, created)
    assert values[late_once.id][:2] == (late, late)
    # what the result hands the caller is what the store holds
    for o in result.queued:
        assert (o.max_retries, o.timeout_seconds, o.job_data) == (
            sent[o.job_id].max_retries,
            sent[o.job_id].timeout_seconds,
            sent[o.job_id].job_data,
        )
    nexts = {job_id: entry for job_id, entry in result.next_runs.items()}
    for job in (plain, typed, own, late_once, undeclared, spent):
        assert nexts[job.id] is None
        assert (await store.get_job(job.id)).next_run_at is None
    assert nexts[recurring.id] is not None
    assert spent.id not in by_job(result)
    stats = await store.get_job(plain.id)
    assert (stats.total_executions, stats.success_count) == (0, 0)
    overview = await store.overview(T0)
    assert overview.by_status[S.QUEUED] == 7  # 6 fired (one held) and the busy job's first
    assert overview.by_status[S.SKIPPED] == 5
    marker = "AS p(job_id, id)" if store_kind == "postgres" else "CROSS JOIN jobs j ON"
    assert marker in (FIRE_PLAIN if store_kind == "postgres" else FIRE_PLAIN_SQLITE)
    (ran,) = [s for s in statements if marker in s]
    assert ran.startswith(HOT) == (store_kind == "sqlite")  # SQLite: the hot writer's


async def test_what_the_caller_sends_is_inserted_dispatched_with_its_batch(
    store: SqlStore,
) -> None:
    plain, recurring = make_job(), make_job(cron_expression="*/5 * * * *")
    await store.create_jobs([plain, recurring])
    result = await dispatch(store, [plain, recurring], claim=True)

    assert result.batch is not None
    assert sorted(o.job_id for o in result.queued) == sorted([plain.id, recurring.id])
    assert {o.dispatched_at for o in result.queued} == {NOW}
    for o in result.queued:
        assert (await store.get_occurrence(o.id)).dispatched_at == NOW
    # the sweep leaves them to the caller until the batch's claim runs out
    assert await store.undispatched(NOW + timedelta(seconds=10), 10) == []
    assert len(await store.undispatched(NOW + timedelta(minutes=1), 10)) == 2
    await store.mark_dispatched([], NOW, batch=result.batch)
    # once its batch record is gone, they stay dispatched: nothing for a sweep
    assert await store.undispatched(NOW + timedelta(hours=1), 10) == []


async def test_a_skip_policy_fire_is_marked_when_the_embedded_mode_asks(store: SqlStore) -> None:
    skip, queue = make_job(), make_job(concurrency_policy=ConcurrencyPolicy.QUEUE)
    await store.create_jobs([skip, queue])
    result = await dispatch(store, [skip, queue], mark_skip=True)

    marked = {o.job_id: o.dispatched_at for o in result.queued}
    assert marked == {skip.id: NOW, queue.id: None}
    assert (await store.get_occurrence(result.queued[0].id)).dispatched_at == marked[
        result.queued[0].job_id
    ]


async def test_a_fire_recorded_before_is_not_fired_again(store: SqlStore) -> None:
    job = make_job()
    await store.create_jobs([job])
    await store.insert_occurrences([occurrence(job, T0, status=S.COMPLETED)])
    again = await dispatch(store, [job])
    assert (again.queued, again.held, again.skipped) == ([], [], [])
    assert again.next_runs == {job.id: None}
    assert (await store.get_job(job.id)).next_run_at is None


async def test_postgresql_fires_a_batch_by_its_job_ids_on_a_fresh_load(
    store: SqlStore, store_kind: str
) -> None:
    """The plain fire finds each job of the batch by its id, never from the schedule index:
    that index holds every due job and, until a vacuum, the dead entries of the jobs fired
    before, so a plan that starts from it reads them all for every batch (a 100,000-job
    backlog took 1.5 s a batch of 2,000). Planned on a table just bulk-loaded, not analyzed."""
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's statistics and plans")
    jobs = [make_job() for _ in range(20_000)]
    await store.create_jobs(jobs)  # COPY; not analyzed
    with written(store, FIRE_PLAIN) as runs:
        fired = await dispatch(store, jobs[:100])
    assert len(fired.queued) == 100
    [params] = runs
    plan = await pg_plan(store, FIRE_PLAIN, params)
    assert re.search(r"Index Cond: \(id = p(_\d+)?\.job_id\)", plan), plan  # by its id
    assert "ix_jobs_schedule" not in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
