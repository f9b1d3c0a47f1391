"""Interval and bounded schedules through the store's dispatch (issue 20): the real planner,
on every store kind — the fires an interval job plans, its ``end_at``, its ``max_runs`` (the
store keeps ``run_count``), and a jittered fire left for the sweep until it is due."""

from __future__ import annotations

from datetime import timedelta

from rota.core.models import ConcurrencyPolicy, MisfirePolicy
from rota.core.planning import PlanSettings, plan_fires
from rota.core.ports import Store
from rota.core.records import DueEntry

from .test_store import CLAIM, NOW, T0, S, make_job, one_time

SECOND = timedelta(seconds=1)


async def test_an_interval_job_fires_on_its_grid_and_moves_on(store: Store) -> None:
    # every 20 s from T0 - 1 min: T0 - 60, -40, -20, T0 are due at NOW (T0 + 1 s)
    start = T0 - 60 * SECOND
    job = make_job(
        execute_at=None,
        interval_seconds=20,
        start_at=start,
        next_run_at=start,
        misfire_policy=MisfirePolicy.CATCH_UP,
        concurrency_policy=ConcurrencyPolicy.ALLOW_ALL,
        bucket=2,
    )
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, one_time)
    assert [o.scheduled_for for o in result.queued] == [start + k * 20 * SECOND for k in range(4)]
    assert result.next_runs == {job.id: DueEntry(job.id, 2, T0 + 20 * SECOND)}
    stored = await store.get_job(job.id)
    assert (stored.next_run_at, stored.run_count) == (T0 + 20 * SECOND, 4)


async def test_max_runs_ends_the_job_and_skipped_fires_do_not_count(store: Store) -> None:
    start = T0 - 60 * SECOND
    job = make_job(
        execute_at=None,
        interval_seconds=20,
        start_at=start,
        next_run_at=start,
        max_runs=2,
        concurrency_policy=ConcurrencyPolicy.ALLOW_ALL,
    )
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, one_time)
    # T0 - 60 s is 61 s late (missed: Skipped, not counted); the next two run, then no more
    assert [o.scheduled_for for o in result.skipped] == [start]
    assert [o.scheduled_for for o in result.queued] == [T0 - 40 * SECOND, T0 - 20 * SECOND]
    assert result.next_runs == {job.id: None}
    stored = await store.get_job(job.id)
    assert (stored.next_run_at, stored.run_count) == (None, 2)


async def test_no_fire_after_end_at(store: Store) -> None:
    job = make_job(
        execute_at=None,
        cron_expression="* * * * * *",  # every second
        start_at=T0 - SECOND,
        end_at=T0,
        next_run_at=T0 - SECOND,
        misfire_policy=MisfirePolicy.CATCH_UP,
        concurrency_policy=ConcurrencyPolicy.ALLOW_ALL,
    )
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW + 5 * SECOND, one_time)
    assert [o.scheduled_for for o in result.queued] == [T0 - SECOND, T0]
    assert result.next_runs == {job.id: None}
    assert (await store.get_job(job.id)).next_run_at is None


async def test_a_jittered_fire_keeps_its_time_and_waits_for_the_sweep(store: Store) -> None:
    job = make_job(
        execute_at=None, interval_seconds=60, start_at=T0, next_run_at=T0, jitter_seconds=30.0
    )
    await store.create_jobs([job])
    settings = PlanSettings()
    result = await store.dispatch_due(
        [job.id], NOW, lambda j, a, n: plan_fires(j, a, n, settings, rng=lambda: 0.5)
    )
    assert result.queued == []
    (held,) = result.held
    assert (held.scheduled_for, held.jitter_seconds) == (T0, 15.0)
    stored = await store.get_occurrence(held.id)
    assert (stored.scheduled_for, stored.due_at, stored.jitter_seconds) == (
        T0,
        T0 + 15 * SECOND,
        15.0,
    )
    # not due before its delay
    early = await store.claim_undispatched(T0 + 14 * SECOND, 10, claim_until=CLAIM)
    assert early == []
    due = await store.claim_undispatched(T0 + 15 * SECOND, 10, claim_until=CLAIM)
    assert [o.id for o in due] == [held.id]
    assert await store.count_occurrences((S.QUEUED,)) == {S.QUEUED: 1}
