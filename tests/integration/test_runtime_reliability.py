"""Cancellation, auto-disable and late reports in the embedded runtime, end to end: real
executor, dispatcher, tracker and API over SQLite and the in-process adapters."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus, StatusRecord, WorkerInfo
from rota.services.zombies import zombie_records
from tests.helpers import RuntimeFactory, eventually, settings_for
from tests.integration import reliability_jobs

S = OccurrenceStatus


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {
        "scheduler.sweeper_interval_seconds": 0.2,
        "worker.concurrency": 1,  # a second occurrence waits for the slot (Queued)
    }
    return await runtime_factory(overrides, ["tests.integration.reliability_jobs"])


async def create(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"cronExpression": "0 0 1 1 *"} | fields
    response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def trigger(client: httpx.AsyncClient, job_id: str) -> str:
    response = await client.post(f"/api/v1/jobs/{job_id}/trigger", json={"force": True})
    assert response.status_code == 202, response.text
    occurrence_id: str = response.json()["id"]
    return occurrence_id


async def status_of(runtime: Runtime, occurrence_id: str) -> S:
    return (await runtime.store.get_occurrence(UUID(occurrence_id))).status


async def started(occurrence_id: str) -> bool:
    event = reliability_jobs.started.get(occurrence_id)
    return event is not None and event.is_set()


@pytest.mark.parametrize("job_type", ["rel.async_block", "rel.sync_block"])
async def test_cancel_a_running_occurrence_through_its_worker(
    runtime: Runtime, client: httpx.AsyncClient, job_type: str
) -> None:
    job = await create(client, jobType=job_type)
    occurrence_id = await trigger(client, job["id"])
    await eventually(lambda: started(occurrence_id), 10, "the handler to start")
    await eventually(
        lambda: _is(runtime, occurrence_id, S.RUNNING), 10, "the Running report to be stored"
    )
    begun = time.monotonic()
    response = await client.post(
        f"/api/v1/occurrences/{occurrence_id}/cancel", json={"reason": "operator"}
    )
    assert response.status_code == 202, response.text
    await eventually(lambda: _is(runtime, occurrence_id, S.CANCELLED), 10, "Cancelled")
    elapsed = time.monotonic() - begun
    assert elapsed < 5, f"cancelling took {elapsed:.1f} s"  # the handler waits up to 30 s
    assert occurrence_id in reliability_jobs.saw_cancel  # the task / the ctx.cancelled flag
    stored = await runtime.store.get_occurrence(UUID(occurrence_id))
    assert stored.end_time is not None
    assert stored.result is None
    # The reason given is kept, as for a Queued one: in exception and the status change.
    assert stored.exception == "cancelled: operator"
    assert stored.status_changes[-1].reason == "cancelled: operator"
    again = await client.post(f"/api/v1/occurrences/{occurrence_id}/cancel")
    assert again.status_code == 409


async def test_a_cancelled_queued_occurrence_never_runs(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    job = await create(client, jobType="rel.async_block")
    first = await trigger(client, job["id"])
    await eventually(lambda: started(first), 10, "the first run to take the only slot")
    second = await trigger(client, job["id"])

    async def handed_to_the_worker() -> bool:
        return (await runtime.store.get_occurrence(UUID(second))).dispatched_at is not None

    await eventually(handed_to_the_worker, 10, "the second occurrence to be dispatched")
    executor = runtime.executor
    assert executor is not None
    skipped_before = executor.stats.cancelled_unstarted
    response = await client.post(f"/api/v1/occurrences/{second}/cancel", json={"reason": "dup"})
    assert response.status_code == 200, response.text
    assert response.json()["statusName"] == "Cancelled"
    # Free the slot: the worker then takes the second message, and skips it.
    assert (await client.post(f"/api/v1/occurrences/{first}/cancel")).status_code == 202
    await eventually(lambda: _is(runtime, first, S.CANCELLED), 10, "the first one Cancelled")

    async def skipped() -> bool:
        return executor.stats.cancelled_unstarted == skipped_before + 1

    # The worker handled the second delivery by skipping it (its only delivery: the handler
    # can no longer start), not merely prefetched it.
    await eventually(skipped, 10, "the worker to skip the second message")
    assert not await started(second)
    stored = await runtime.store.get_occurrence(UUID(second))
    assert stored.status is S.CANCELLED
    assert S.RUNNING not in [c.to_status for c in stored.status_changes]


async def test_a_failing_job_is_auto_disabled(runtime: Runtime, client: httpx.AsyncClient) -> None:
    job = await create(
        client, jobType="rel.fail", cronExpression="* * * * * *", autoDisableThreshold=2
    )
    job_id = UUID(job["id"])

    async def disabled() -> bool:
        return not (await runtime.store.get_job(job_id)).is_active

    await eventually(disabled, 15, "the job to be disabled")
    shown = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    assert shown["autoDisable"]["consecutiveFailures"] >= 2
    assert shown["autoDisable"]["disabledReason"].startswith("2 consecutive failures within 60 min")
    assert "RuntimeError: upstream down" in shown["autoDisable"]["disabledReason"]
    # It fires no more: the store has it inactive with no next fire (the dispatcher fires only
    # active jobs, in the transaction that reads them), and its index entry goes (removed in
    # the background).
    assert (shown["isActive"], shown["nextRunAt"]) == (False, None)
    buckets = list(range(runtime.settings.scheduler.bucket_count))

    async def unindexed() -> bool:
        return await runtime.index.size(buckets) == 0

    await eventually(unindexed, 5, "the disabled job to leave the schedule index")


async def test_a_late_report_of_a_superseded_attempt_is_ignored_and_counted(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    before = (await client.get("/api/v1/admin/reliability")).json()
    # Declared by a worker group (a registration; nothing runs it here): the run waits Queued.
    nobody = WorkerInfo(
        instance_id="nobody-1",
        worker_id="nobody",
        host="h",
        pid=1,
        job_types={"rel.nobody": {}},
        concurrency=1,
    )
    await runtime.coordination.register_worker(nobody, ttl=60)
    job = await create(client, jobType="rel.nobody")
    occurrence_id = UUID(await trigger(client, job["id"]))
    now = datetime.now(UTC)
    running = StatusRecord(
        occurrence_id=occurrence_id, status=S.RUNNING, timestamp=now, instance_id="w-old"
    )
    await runtime.broker.publish_status([running])
    await eventually(lambda: _is(runtime, str(occurrence_id), S.RUNNING), 10, "Running")
    occurrence = await runtime.store.get_occurrence(occurrence_id)
    await runtime.store.apply_status(zombie_records(occurrence, now))  # a new attempt (2)
    late = StatusRecord(
        occurrence_id=occurrence_id, status=S.COMPLETED, timestamp=now, attempt=1, result="old"
    )
    await runtime.broker.publish_status([late])

    async def counted() -> bool:
        body = (await client.get("/api/v1/admin/reliability")).json()
        return bool(body["lateReports"] == before["lateReports"] + 1)

    await eventually(counted, 10, "the late report to be counted")
    stored = await runtime.store.get_occurrence(occurrence_id)
    assert (stored.status, stored.attempt, stored.result) == (S.QUEUED, 2, None)


async def _is(runtime: Runtime, occurrence_id: str, status: S) -> bool:
    return await status_of(runtime, occurrence_id) is status


async def test_a_job_past_the_stop_grace_is_interrupted_and_run_again_after_a_restart(
    tmp_path: Path, runtime_factory: RuntimeFactory
) -> None:
    """Embedded: the process stops (SIGTERM) while a job runs past its grace. The attempt is
    stored as interrupted (Unknown, not Cancelled); the restarted process gives the occurrence
    its next attempt at once (the dead-worker sweep), which runs."""
    from rota.app.server import prepare

    overrides = {"worker.concurrency": 1}
    first = await prepare(settings_for(tmp_path, overrides), ["tests.integration.reliability_jobs"])
    await first.start()
    job = await first.jobs.create_job(
        {"job_type": "rel.async_block", "cron_expression": "0 0 1 1 *"}
    )
    occurrence = await first.jobs.trigger(job.id, force=True)
    oid = str(occurrence.id)
    await eventually(lambda: started(oid), 10, "the job to start")
    await first.stop(grace=0.1)
    assert oid in reliability_jobs.saw_cancel  # the handler was cut short

    second = await runtime_factory(overrides, ["tests.integration.reliability_jobs"])

    async def second_attempt_runs() -> bool:
        stored = await second.store.get_occurrence(occurrence.id)
        return stored.attempt == 2 and stored.status is S.RUNNING

    await eventually(second_attempt_runs, 10, "attempt 2 to run")
    stored = await second.store.get_occurrence(occurrence.id)
    changes = [(c.to_status, c.attempt, c.reason) for c in stored.status_changes]
    assert [(to, n, (r or "").split(":")[0]) for to, n, r in changes if to is S.UNKNOWN] == [
        (S.UNKNOWN, 1, "zombie")
    ], changes
    assert all(to is not S.CANCELLED for to, _, _ in changes), changes
    interrupted = [c for c in stored.status_changes if c.to_status is S.UNKNOWN]
    assert len(interrupted) == 1
    assert (await second.store.get_job(job.id)).consecutive_failures == 0
