"""The dispatch lead, end to end in the embedded runtime: an occurrence is committed and sent
ahead of its due time, the worker holds it and starts it at (not before) its due instant, and
disabling, deleting or cancelling the job during the hold keeps it from starting, and an edit
during the hold is honoured (the new version runs at the due instant, or a fire the new
schedule no longer has is cancelled)."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from uuid import UUID

import pytest

from rota.app.runtime import Runtime
from rota.core.models import Occurrence, OccurrenceStatus
from rota.core.records import OccurrenceQuery
from rota.services.cancellation import cancel_occurrence
from tests.helpers import RuntimeFactory, eventually
from tests.integration.runtime_jobs import RAN_AHEAD

S = OccurrenceStatus
LEAD = 3.0


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.dispatch_lead_seconds": LEAD}
    return await runtime_factory(overrides, ["tests.integration.runtime_jobs"])


async def held_occurrence(rt: Runtime, job_id: UUID) -> Occurrence:
    """The job's first occurrence, once it is sent (Queued, dispatched) before its due time."""
    found: list[Occurrence] = []

    async def sent() -> bool:
        page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=10))
        found[:] = [o for o in page.items if o.dispatched_at is not None]
        return bool(found)

    await eventually(sent, 15, "an occurrence sent ahead")
    occ = found[0]
    assert rt.jobs.now() < occ.scheduled_for, "the test was too slow to see the hold"
    return occ


def in_a_while(rt: Runtime) -> datetime:
    return rt.jobs.now() + timedelta(seconds=LEAD + 1.5)


async def test_an_occurrence_is_committed_ahead_and_starts_at_its_due_instant(
    runtime: Runtime,
) -> None:
    due = in_a_while(runtime)
    job = await runtime.jobs.create_job({"job_type": "it.ahead", "execute_at": due})
    occ = await held_occurrence(runtime, job.id)
    assert occ.status is S.QUEUED
    assert occ.scheduled_for == due  # the true due time, not the dispatch time
    assert occ.created_at < due
    assert occ.dispatched_at is not None
    assert occ.dispatched_at < due

    async def done() -> bool:
        return (await runtime.store.get_occurrence(occ.id)).status is S.COMPLETED

    await eventually(done, 15, "the held occurrence completed")
    ran = await runtime.store.get_occurrence(occ.id)
    assert ran.start_time is not None
    assert ran.start_time >= due  # never before its due instant
    assert ran.start_time - due < timedelta(seconds=1)  # generous: the machine is shared


async def cancelled_unrun(rt: Runtime, occ: Occurrence, reason: str) -> None:
    async def cancelled() -> bool:
        return (await rt.store.get_occurrence(occ.id)).status is S.CANCELLED

    await eventually(cancelled, 10, "the held occurrence cancelled")
    stored = await rt.store.get_occurrence(occ.id)
    assert stored.exception == f"cancelled: {reason}"
    executor = rt.executor
    assert executor is not None
    # the worker dropped the held delivery (it cannot start any more) ...
    await eventually(lambda: executor.early == 0, 10, "the hold emptied")
    assert executor.stats.cancelled_unstarted >= 1
    assert str(occ.id) not in RAN_AHEAD
    # ... and it stays Cancelled past its due time
    await eventually(lambda: rt.jobs.now() > occ.scheduled_for, 15, "the due time passed")
    assert (await rt.store.get_occurrence(occ.id)).status is S.CANCELLED
    assert str(occ.id) not in RAN_AHEAD


async def test_disabling_the_job_during_the_hold_prevents_the_start(runtime: Runtime) -> None:
    # a cron job (every second) whose first fire is a while away: its execute_at
    job = await runtime.jobs.create_job(
        {
            "job_type": "it.ahead",
            "cron_expression": "* * * * * *",
            "execute_at": in_a_while(runtime),
        }
    )
    occ = await held_occurrence(runtime, job.id)
    await runtime.jobs.update_job(job.id, {"is_active": False})
    await cancelled_unrun(runtime, occ, "job disabled before its due time")


async def test_deleting_the_job_during_the_hold_prevents_the_start(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job({"job_type": "it.ahead", "execute_at": in_a_while(runtime)})
    occ = await held_occurrence(runtime, job.id)
    await runtime.jobs.delete_job(job.id)
    await cancelled_unrun(runtime, occ, "job deleted before its due time")


async def test_an_edit_during_the_hold_runs_the_new_version_at_the_due_instant(
    runtime: Runtime,
) -> None:
    due = in_a_while(runtime)
    job = await runtime.jobs.create_job(
        {"job_type": "it.echo", "execute_at": due, "job_data": {"word": "old"}}
    )
    occ = await held_occurrence(runtime, job.id)
    assert occ.job_version == job.version
    edited = await runtime.jobs.update_job(job.id, {"job_data": {"word": "new"}})
    assert edited.version == job.version + 1
    executor = runtime.executor
    assert executor is not None
    assert executor.early == 1  # the new copy replaced the old one in the hold

    async def done() -> bool:
        return (await runtime.store.get_occurrence(occ.id)).status is S.COMPLETED

    await eventually(done, 15, "the occurrence completed")
    ran = await runtime.store.get_occurrence(occ.id)
    assert ran.result == "new"
    assert ran.job_version == edited.version
    assert ran.start_time is not None
    assert ran.start_time >= due  # still at its due instant, not before
    assert RAN_AHEAD.count(str(occ.id)) == 1


async def test_a_new_schedule_during_the_hold_cancels_the_fire_it_no_longer_has(
    runtime: Runtime,
) -> None:
    job = await runtime.jobs.create_job(
        {
            "job_type": "it.ahead",
            "cron_expression": "* * * * * *",
            "execute_at": in_a_while(runtime),
        }
    )
    occ = await held_occurrence(runtime, job.id)
    await runtime.jobs.update_job(job.id, {"cron_expression": "0 0 1 1 *"})  # yearly
    await cancelled_unrun(
        runtime, occ, "job edited before its due time (no longer one of its fires)"
    )


async def test_cancelling_the_occurrence_during_the_hold_prevents_the_start(
    runtime: Runtime,
) -> None:
    job = await runtime.jobs.create_job({"job_type": "it.ahead", "execute_at": in_a_while(runtime)})
    occ = await held_occurrence(runtime, job.id)
    outcome = await cancel_occurrence(
        runtime.store,
        runtime.coordination,
        occ.id,
        reason="changed my mind",
        now=runtime.jobs.now(),
    )
    assert not outcome.requested
    await cancelled_unrun(runtime, occ, "changed my mind")


async def test_a_skip_policy_fire_is_not_skipped_for_a_run_that_ends_before_it(
    runtime: Runtime,
) -> None:
    # it.slow runs 1 s; every 3 s with a 3 s lead, the next fire is planned while the one
    # before still runs. Its overlap is decided at its due time, when that one has ended.
    job = await runtime.jobs.create_job(
        {
            "job_type": "it.slow",
            "cron_expression": "*/3 * * * * *",
            "execute_at": in_a_while(runtime),
        }
    )

    # Decided at planning time, every fire after the first would be Skipped (the one
    # before it is always running then). Decided at its due time, two fires in a row run.
    # A loaded machine may still be running the one before at that time: such a skip is
    # right, and is checked against the recorded end of the fire before it.
    found: list[Occurrence] = []

    async def two_in_a_row_completed() -> bool:
        page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=100))
        found[:] = sorted(page.items, key=lambda o: o.scheduled_for)
        return any(
            a.status is S.COMPLETED
            and b.status is S.COMPLETED
            and b.scheduled_for - a.scheduled_for == timedelta(seconds=3)
            for a, b in pairwise(found)
        )

    await eventually(two_in_a_row_completed, 40, "two fires in a row completed")
    ran: Occurrence | None = None
    for occ in found:
        if occ.status is not S.SKIPPED:
            ran = occ
            continue
        assert occ.skip_reason == "overlap"
        # skipped only while the last fire that ran before it had not ended
        assert ran is not None
        assert ran.end_time is None or ran.end_time > occ.created_at, (ran, occ)
