"""A Skip-policy job's late fires due at once (a failover's backlog, ``catch_up``'s missed
fires) all run, one after another: the store keeps them as a sequential plan's (held behind
the one before, sent by the sweep as each ends), and judges overlap only against the runs
that existed before the dispatch, never against a fire of the same one."""

from __future__ import annotations

from datetime import timedelta

from rota.core.models import Job, MisfirePolicy, Occurrence
from rota.core.planning import FirePlan, PlanSettings, plan_fires
from rota.core.ports import Store

from .test_store import NOW, S, make_job, occurrence, status

SECOND = timedelta(seconds=1)


def every_second(job: Job, active: int, now: object) -> FirePlan:
    """The real planner, every fire within the threshold (60 s)."""
    return plan_fires(job, active, NOW, PlanSettings())


def skip_job() -> Job:
    return make_job(
        execute_at=None,
        cron_expression="* * * * * *",
        misfire_policy=MisfirePolicy.CATCH_UP,
        next_run_at=NOW - 4 * SECOND,
    )


async def pending(store: Store) -> list[Occurrence]:
    return await store.undispatched(NOW + SECOND, 10)


async def test_a_skip_jobs_backlog_runs_every_fire_one_after_another(store: Store) -> None:
    job = skip_job()
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, every_second)
    assert result.skipped == []
    [first] = result.queued
    assert [o.scheduled_for for o in [first, *result.held]] == [
        NOW - 4 * SECOND + n * SECOND for n in range(5)
    ]
    await store.mark_dispatched([first], NOW)
    # each waits for the one before it: the sweep sends the next only once it has ended
    for nxt in result.held:
        assert [o.id for o in await pending(store)] == []
        previous = first if nxt is result.held[0] else result.held[result.held.index(nxt) - 1]
        await store.apply_status([status(previous, S.RUNNING), status(previous, S.COMPLETED)])
        assert [o.id for o in await pending(store)] == [nxt.id]
        await store.mark_dispatched([nxt], NOW)
    assert (await store.get_occurrence(first.id)).status is S.COMPLETED


async def test_a_skip_jobs_backlog_is_skipped_while_a_run_from_before_is_in_progress(
    store: Store,
) -> None:
    job = skip_job()
    await store.create_jobs([job])
    await store.insert_occurrences([occurrence(job, NOW - 10 * SECOND)])  # still Queued
    result = await store.dispatch_due([job.id], NOW, every_second)
    assert result.queued == []
    assert result.held == []
    assert [(o.status, o.skip_reason) for o in result.skipped] == [(S.SKIPPED, "overlap")] * 5
