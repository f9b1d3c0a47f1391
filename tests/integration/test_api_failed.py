"""Failed occurrences (dead letters) through the REST API on the embedded runtime: a failing
job's record, resolve, retry; poison messages from the dead-letter channel; input checks."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest

from rota.app.runtime import Runtime
from rota.brokers.inprocess import InProcessBroker
from rota.core.models import FailureType, JobMessage, OccurrenceStatus, WorkerInfo
from rota.core.records import FAILURE_TEXT_LIMIT
from rota.core.wire import DeadLetter, encode_dead_letter
from tests.helpers import RuntimeFactory, eventually

API = "/api/v1/failed-occurrences"
PROBLEM = "application/problem+json"
WITHIN = 15.0
"""Upper bound for something that must happen (never reached when it works)."""


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.sweeper_interval_seconds": 0.5}
    return await runtime_factory(overrides, ["tests.integration.failed_jobs"])


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


async def failed_list(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ok(await client.get(API, params=params))["items"]
    return items


async def run_failing_job(runtime: Runtime, client: httpx.AsyncClient) -> dict[str, Any]:
    """Create ``it.flaky`` (fails its first attempt, no retries); its failed record."""
    job = ok(
        await client.post(
            "/api/v1/jobs",
            json={"jobType": "it.flaky", "executeAt": runtime.jobs.now().isoformat()},
        ),
        201,
    )

    async def recorded() -> bool:
        return bool(await failed_list(client, jobId=job["id"]))

    await eventually(recorded, WITHIN, "the failed-occurrence record")
    [record] = await failed_list(client, jobId=job["id"])
    return record


# --- the life of a failed occurrence ----------------------------------------------------------


async def test_failed_job_is_recorded_resolved_retried_and_completes(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    record = await run_failing_job(runtime, client)
    assert record["failureType"] == "retries_exhausted"
    assert "the first attempt always fails" in record["exception"]
    assert (record["attempts"], record["retryCount"], record["resolved"]) == (1, 0, False)
    assert record["correlationId"] == record["occurrenceId"]
    occurrence = ok(await client.get(f"/api/v1/occurrences/{record['occurrenceId']}"))
    assert occurrence["statusName"] == "Failed"
    assert ok(await client.get(f"{API}/{record['id']}")) == record

    # Resolve in the reference API's partial-update form.
    resolved = ok(
        await client.put(
            f"{API}/{record['id']}",
            json={
                "resolutionNote": {"value": "Fixed data and requeued", "isUpdated": True},
                "resolutionAction": {"value": "Manually resolved", "isUpdated": True},
            },
        )
    )
    assert resolved["resolved"] is True
    assert resolved["resolvedAt"] is not None
    assert (resolved["resolutionNote"], resolved["resolutionAction"]) == (
        "Fixed data and requeued",
        "Manually resolved",
    )
    assert await failed_list(client, resolved="false", jobId=record["jobId"]) == []

    # Retry: a second attempt runs and completes.
    retried = ok(await client.post(f"{API}/{record['id']}/retry"), 202)
    assert (retried["id"], retried["status"], retried["attempt"]) == (
        record["occurrenceId"],
        int(OccurrenceStatus.QUEUED),
        2,
    )
    assert retried["statusChangeLogs"][-1]["reason"] == "manual retry"

    async def completed() -> bool:
        body = ok(await client.get(f"/api/v1/occurrences/{record['occurrenceId']}"))
        return bool(body["statusName"] == "Completed")

    await eventually(completed, WITHIN, "the retried occurrence to complete")
    done = ok(await client.get(f"/api/v1/occurrences/{record['occurrenceId']}"))
    assert (done["attempt"], done["result"]) == (2, "attempt 2 worked")
    after = ok(await client.get(f"{API}/{record['id']}"))
    assert (after["resolved"], after["resolutionAction"]) == (True, "retried")
    assert len(await failed_list(client, jobId=record["jobId"])) == 1  # nothing new failed
    # A completed occurrence cannot be retried.
    problem(await client.post(f"{API}/{record['id']}/retry"), 409)


async def test_plain_json_update_reopen_and_delete(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    record = await run_failing_job(runtime, client)
    url = f"{API}/{record['id']}"
    noted = ok(await client.put(url, json={"resolutionNote": "looking into it", "resolved": False}))
    assert (noted["resolved"], noted["resolutionNote"]) == (False, "looking into it")
    # isUpdated false: not changed; a plain action resolves.
    resolved = ok(
        await client.put(
            url,
            json={
                "resolutionNote": {"value": "ignored", "isUpdated": False},
                "resolutionAction": "ignored on purpose",
            },
        )
    )
    assert (resolved["resolved"], resolved["resolutionNote"]) == (True, "looking into it")
    assert resolved["resolutionAction"] == "ignored on purpose"
    reopened = ok(await client.put(url, json={"resolved": False}))
    assert (reopened["resolved"], reopened["resolvedAt"]) == (False, None)
    assert ok(await client.put(url, json={})) == reopened
    delete = await client.delete(url)
    assert delete.status_code == 204
    problem(await client.get(url), 404)
    problem(await client.delete(url), 404)
    # The occurrence stays.
    ok(await client.get(f"/api/v1/occurrences/{record['occurrenceId']}"))


# --- dead letters in the embedded mode ----------------------------------------------------------


async def test_poison_and_readable_dead_letters_become_records(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    broker = runtime.broker
    assert isinstance(broker, InProcessBroker)
    pad = "x" * 20_000
    garbage = f'{{"occurrenceId": "not-a-uuid", "jobType": "it.flaky", "pad": "{pad}"}}'.encode()
    await broker.dead_letter_body(garbage)
    await broker.dead_letter_body(b"\x00\xff binary")

    # A readable letter naming an occurrence the store does not know (with a reason).
    now = runtime.jobs.now()
    stranger = JobMessage(
        occurrence_id=UUID("0190c2b6-0000-7000-8000-000000000001"),
        job_id=UUID("0190c2b6-0000-7000-8000-000000000002"),
        job_type="it.flaky",
        job_data={"k": 1},
        scheduled_for=now,
        timestamp=now,
        retry_count=2,
    )
    letter = DeadLetter(
        message=stranger,
        failure_type=FailureType.INVALID_DATA,
        exception="k must be a string",
        failed_at=now,
    )
    await broker.dead_letter_body(encode_dead_letter(letter))

    async def stored() -> bool:
        return len(await failed_list(client)) == 3

    await eventually(stored, WITHIN, "three dead-letter records")
    poison = await failed_list(client, failureType="poison")
    assert len(poison) == 2
    assert all(p["occurrenceId"] is None for p in poison)
    text = next(p for p in poison if p["jobType"] == "it.flaky")
    assert text["rawMessage"].startswith('{"occurrenceId": "not-a-uuid"')
    assert len(text["rawMessage"]) == FAILURE_TEXT_LIMIT
    assert "undecodable job message" in text["exception"]
    binary = next(p for p in poison if p["jobType"] == "")
    assert "\x00" not in binary["rawMessage"]
    [known] = await failed_list(client, failureType="invalid_data")
    assert (known["occurrenceId"], known["jobId"]) == (
        str(stranger.occurrence_id),
        str(stranger.job_id),
    )
    assert (known["attempts"], known["jobData"]) == (3, {"k": 1})
    assert known["exception"].startswith("k must be a string")
    problem(await client.post(f"{API}/{text['id']}/retry"), 409)  # names no occurrence
    stats = runtime.dead_letters.stats
    assert (stats.letters, stats.poison, stats.errors) == (3, 3, 0)
    assert (await broker.queue_depths())["rota.dlq"] == 0  # all taken and acknowledged


async def test_rejected_job_message_fails_its_occurrence(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    # A triggered occurrence of a type no worker runs now (declared, nothing consumes here)
    # stays Queued; its job message, found in the dead-letter channel, fails it (failure type
    # poison) with a record.
    nobody = WorkerInfo(
        instance_id="nobody-1",
        worker_id="nobody",
        host="h",
        pid=1,
        job_types={"it.nobody": {}},
        concurrency=1,
    )
    await runtime.coordination.register_worker(nobody, ttl=60)
    job = await runtime.jobs.create_job(
        {"job_type": "it.nobody", "execute_at": runtime.jobs.now() + timedelta(days=1)}
    )
    occurrence = await runtime.jobs.trigger(job.id, reason="test")
    broker = runtime.broker
    assert isinstance(broker, InProcessBroker)
    message = JobMessage(
        occurrence_id=occurrence.id,
        job_id=job.id,
        job_type=job.job_type,
        job_data=None,
        scheduled_for=occurrence.scheduled_for,
        timestamp=runtime.jobs.now(),
    )
    await broker.dead_letter_body(encode_dead_letter(DeadLetter(message=message)))

    async def recorded() -> bool:
        return bool(await failed_list(client, jobId=str(job.id)))

    await eventually(recorded, WITHIN, "the dead-lettered occurrence's record")
    [record] = await failed_list(client, jobId=str(job.id))
    assert (record["occurrenceId"], record["failureType"]) == (str(occurrence.id), "poison")
    assert "dead-lettered without running" in record["exception"]
    stored = await runtime.store.get_occurrence(occurrence.id)
    assert stored.status is OccurrenceStatus.FAILED
    assert stored.status_changes[-1].reason == "poison"
    # The same letter again (a redelivery) is stale: nothing new.
    await broker.dead_letter_body(encode_dead_letter(DeadLetter(message=message)))

    async def seen_twice() -> bool:
        return runtime.dead_letters.stats.stale == 1

    await eventually(seen_twice, WITHIN, "the repeated letter")
    assert len(await failed_list(client, jobId=str(job.id))) == 1


# --- input checks -------------------------------------------------------------------------------


async def test_bad_input_is_a_problem_naming_the_field(client: httpx.AsyncClient) -> None:
    body = problem(await client.get(API, params={"failureType": "nonsense"}), 422)
    assert [e["field"] for e in body["errors"]] == ["failureType"]
    body = problem(await client.get(API, params={"jobId": "nope"}), 422)
    assert [e["field"] for e in body["errors"]] == ["jobId"]
    body = problem(await client.get(API, params={"failedAfter": "yesterday"}), 422)
    assert [e["field"] for e in body["errors"]] == ["failedAfter"]
    body = problem(await client.get(API, params={"cursor": "zz"}), 422)
    assert [e["field"] for e in body["errors"]] == ["cursor"]
    problem(await client.get(f"{API}/not-a-uuid"), 422)
    missing = "0190c2b6-0000-7000-8000-00000000abcd"
    problem(await client.get(f"{API}/{missing}"), 404)
    problem(await client.put(f"{API}/{missing}", json={"resolutionNote": "x"}), 404)
    problem(await client.post(f"{API}/{missing}/retry"), 404)
    body = problem(await client.put(f"{API}/{missing}", json={"resolutionNote": 5}), 422)
    assert [e["field"] for e in body["errors"]] == ["resolutionNote"]
    body = problem(
        await client.put(f"{API}/{missing}", json={"resolutionAction": {"isUpdated": "yes"}}),
        422,
    )
    assert [e["field"] for e in body["errors"]] == ["resolutionAction"]
    body = problem(await client.put(f"{API}/{missing}", json={"resolvedBy": "me"}), 422)
    assert [e["field"] for e in body["errors"]] == ["resolvedBy"]
    body = problem(await client.put(f"{API}/{missing}", json={"resolutionAction": "a" * 101}), 422)
    assert [e["field"] for e in body["errors"]] == ["resolutionAction"]
