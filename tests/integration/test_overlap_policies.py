"""The overlap policies beyond Skip and Queue, end to end in the embedded runtime, with a job
firing every second whose runs last longer than that: AllowAll runs them side by side,
BufferOne keeps at most one waiting (the rest Skipped), CancelOther cancels the running one
for the new fire."""

from __future__ import annotations

from uuid import UUID

from rota.app.runtime import Runtime
from rota.core.models import ConcurrencyPolicy, OccurrenceStatus
from rota.core.records import OccurrenceQuery
from rota.services.cancellation import DISPLACED
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus
JOBS = ["tests.integration.runtime_jobs"]


async def every_second(rt: Runtime, job_type: str, policy: ConcurrencyPolicy) -> UUID:
    job = await rt.jobs.create_job(
        {"job_type": job_type, "cron_expression": "* * * * * *", "concurrency_policy": policy}
    )
    return job.id


async def statuses(rt: Runtime, job_id: UUID) -> list[OccurrenceStatus]:
    page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=100))
    return [o.status for o in page.items]


async def test_allow_all_runs_fires_side_by_side(runtime_factory: RuntimeFactory) -> None:
    rt = await runtime_factory({}, JOBS, grace=0.2)
    job_id = await every_second(rt, "it.two_seconds", ConcurrencyPolicy.ALLOW_ALL)

    async def two_running() -> bool:
        return (await statuses(rt, job_id)).count(S.RUNNING) >= 2

    await eventually(two_running, 10, "two runs of the job at once")
    assert S.SKIPPED not in await statuses(rt, job_id)


async def test_buffer_one_keeps_one_waiting_and_skips_the_rest(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory({}, JOBS, grace=0.2)
    job_id = await every_second(rt, "it.two_seconds", ConcurrencyPolicy.BUFFER_ONE)
    most = {"running": 0, "active": 0}

    async def skipped_and_completed() -> bool:  # each look also keeps the most seen at once
        seen = await statuses(rt, job_id)
        most["running"] = max(most["running"], seen.count(S.RUNNING))
        most["active"] = max(most["active"], seen.count(S.RUNNING) + seen.count(S.QUEUED))
        return S.SKIPPED in seen and S.COMPLETED in seen and most["active"] == 2

    await eventually(skipped_and_completed, 15, "a fire skipped with one running, one waiting")
    seen = await statuses(rt, job_id)
    assert S.SKIPPED in seen, seen  # a fire with one running and one waiting
    assert most["running"] == 1
    assert most["active"] == 2  # one running, one waiting: never more


async def test_cancel_other_cancels_the_running_one_for_the_new_fire(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory({}, JOBS, grace=0.2)
    job_id = await every_second(rt, "it.lingers", ConcurrencyPolicy.CANCEL_OTHER)

    async def displaced() -> bool:
        page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=100))
        return any(o.status is S.CANCELLED and DISPLACED in (o.exception or "") for o in page.items)

    await eventually(displaced, 15, "a run cancelled by the next fire")
    seen = await statuses(rt, job_id)
    assert S.SKIPPED not in seen
    assert seen.count(S.RUNNING) <= 1
