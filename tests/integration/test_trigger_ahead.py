"""A manual trigger of a Skip-policy job is not refused by a fire sent ahead of its due time
(the dispatch lead: committed, sent, held by the worker until due), and that fire is judged at
its due time against the triggered run: cancelled (reason ``overlap``, never started) if the
triggered run is still going, run as sent if it has ended. Embedded runtime, a long lead so
that the hold is wide enough to act in."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import pytest

from rota.app.runtime import Runtime
from rota.core.errors import ConflictError
from rota.core.models import Occurrence, OccurrenceStatus
from rota.services.ahead import OVERLAP, judge_at_due
from tests.helpers import RuntimeFactory, eventually
from tests.integration.test_dispatch_lead import held_occurrence as held

S = OccurrenceStatus
LEAD = 3.0


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.dispatch_lead_seconds": LEAD}
    return await runtime_factory(overrides, ["tests.integration.runtime_jobs"])


async def final(rt: Runtime, occurrence_id: UUID) -> Occurrence:
    async def ended() -> Occurrence | None:
        o = await rt.store.get_occurrence(occurrence_id)
        return o if o.status.is_terminal else None

    await eventually(ended, 20, f"occurrence {occurrence_id} ended")
    return await rt.store.get_occurrence(occurrence_id)


async def triggered_after_it_ended(rt: Runtime) -> tuple[datetime, Occurrence, Occurrence]:
    """A fast job's fire held ahead, and a trigger of the job that has completed: the fire's
    due time, the fire and the triggered run."""
    due = rt.jobs.now() + timedelta(seconds=LEAD + 0.5)
    job = await rt.jobs.create_job({"job_type": "it.fast", "execute_at": due})
    fire = await held(rt, job.id)
    triggered = await rt.jobs.trigger(job.id, reason="test")
    assert (await final(rt, triggered.id)).status is S.COMPLETED
    return due, fire, triggered


async def cancelled_for_overlap(rt: Runtime, fire: Occurrence) -> Occurrence:
    """``fire`` once ended: Cancelled, for the overlap with the manual run."""
    ended = await final(rt, fire.id)
    assert ended.status is S.CANCELLED
    assert ended.exception == f"cancelled: {OVERLAP}"
    return ended


async def test_a_fire_sent_ahead_does_not_refuse_a_trigger_and_yields_to_it_at_its_due_time(
    runtime: Runtime,
) -> None:
    rt = runtime
    due = rt.jobs.now() + timedelta(seconds=LEAD + 1.0)
    job = await rt.jobs.create_job({"job_type": "it.two_seconds", "execute_at": due})
    fire = await held(rt, job.id)
    # a trigger during the hold, the fire's due time inside the triggered run's 2.2 s
    await eventually(lambda: rt.jobs.now() >= due - timedelta(seconds=1.5), 10, "the hold")
    triggered = await rt.jobs.trigger(job.id, reason="test")
    assert triggered.status is S.QUEUED
    # the triggered run is in progress now: a second trigger is refused
    with pytest.raises(ConflictError):
        await rt.jobs.trigger(job.id, reason="again")
    ended = await cancelled_for_overlap(rt, fire)
    # Judged 0.3 s before its due time: dropped unstarted. (Judged late, on a stalled
    # server, it is cancelled as it starts: the next test.)
    assert ended.start_time is None or ended.start_time >= due
    assert (await final(rt, triggered.id)).status is S.COMPLETED


async def test_a_fire_sent_ahead_runs_when_the_triggered_run_ended_before_its_due_time(
    runtime: Runtime,
) -> None:
    rt = runtime
    due, fire, _ = await triggered_after_it_ended(rt)
    assert rt.jobs.now() < due - timedelta(seconds=0.5), "the test was too slow"
    ran = await final(rt, fire.id)
    assert ran.status is S.COMPLETED
    assert ran.start_time is not None
    assert ran.start_time >= due


async def test_a_fire_judged_late_is_cancelled_as_it_runs(runtime: Runtime) -> None:
    """The judgement of a fire sent ahead comes after the fire has started (a server stalled
    past its due instant): the fire is cancelled all the same, as a running occurrence is."""
    rt = runtime
    due = rt.jobs.now() + timedelta(seconds=LEAD + 0.5)
    job = await rt.jobs.create_job({"job_type": "it.two_seconds", "execute_at": due})
    fire = await held(rt, job.id)

    async def started() -> bool:
        return (await rt.store.get_occurrence(fire.id)).status is S.RUNNING

    await eventually(started, 15, "the fire started")
    triggered = await rt.jobs.trigger(job.id, reason="test", force=True)
    judged = await judge_at_due(
        rt.store, rt.coordination, fire, triggered.id, clock=rt.jobs.now, events=rt.events
    )
    assert judged is True
    assert (await final(rt, triggered.id)).status is S.COMPLETED
    started_at = (await cancelled_for_overlap(rt, fire)).start_time
    assert started_at is not None  # it had started: cancelled as it ran
    assert started_at >= due


async def test_a_fire_is_not_judged_against_a_triggered_run_that_has_ended(
    runtime: Runtime,
) -> None:
    rt = runtime
    _, fire, triggered = await triggered_after_it_ended(rt)
    judged = await judge_at_due(
        rt.store, rt.coordination, fire, triggered.id, clock=rt.jobs.now, events=rt.events
    )
    assert judged is False
    assert (await final(rt, fire.id)).status is S.COMPLETED
