"""The API's reliability parts: auto-disable and zombie settings of a job, the reference's
``PUT /jobs/job`` re-enable, and cancelling occurrences (over the in-memory adapters)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx
import pytest

from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.models import OccurrenceStatus, StatusRecord
from rota.core.records import Cancellation
from tests.api_runtime import MiniRuntime
from tests.integration.test_api import assert_problem, create


@pytest.fixture(autouse=True)
async def declared(runtime: MiniRuntime) -> None:
    """The job type of these jobs (``report``) is declared by a worker (live, idle): their
    manual runs are Queued, not Skipped ``no_worker``."""
    await runtime.declare("report")


S = OccurrenceStatus


async def test_job_settings_and_auto_disable_state_are_shown(client: httpx.AsyncClient) -> None:
    job = await create(client)
    assert job["autoDisable"] == {
        "threshold": 5,
        "windowSeconds": 3600.0,
        "cooldownSeconds": None,
        "consecutiveFailures": 0,
        "lastFailureAt": None,
        "disabledReason": None,
        "disabledAt": None,
        "probing": False,
    }
    assert (job["zombiePolicy"], job["zombieThresholdSeconds"]) == (None, None)
    own = await create(
        client,
        autoDisableThreshold=2,
        autoDisableWindowSeconds=600,
        autoDisableCooldownSeconds=120,
        zombiePolicy="fail",
        zombieThresholdSeconds=90,
    )
    assert own["autoDisableThreshold"] == 2
    assert (own["zombiePolicy"], own["zombieThresholdSeconds"]) == ("fail", 90.0)
    assert own["autoDisable"]["threshold"] == 2
    assert own["autoDisable"]["cooldownSeconds"] == 120.0
    changed = await client.patch(
        f"/api/v1/jobs/{own['id']}", json={"autoDisableThreshold": None, "zombiePolicy": "requeue"}
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["autoDisableThreshold"], body["autoDisable"]["threshold"]) == (None, 5)
    assert body["zombiePolicy"] == "requeue"


async def test_bad_settings_are_refused_with_the_field(client: httpx.AsyncClient) -> None:
    for field, value in [
        ("autoDisableThreshold", -1),
        ("autoDisableWindowSeconds", 0),
        ("zombiePolicy", "explode"),
        ("zombieThresholdSeconds", 0),
    ]:
        response = await client.post(
            "/api/v1/jobs", json={"jobType": "r", "cronExpression": "* * * * *", field: value}
        )
        problem = assert_problem(response, 422)
        assert field in str(problem["errors"])


async def disable_by_failures(runtime: MiniRuntime, job_id: str, count: int = 5) -> None:
    for _ in range(count):
        occurrence = await runtime.jobs.trigger(UUID(job_id), force=True)
        end = StatusRecord(
            occurrence_id=occurrence.id,
            status=S.FAILED,
            timestamp=datetime.now(UTC),
            exception="RuntimeError: upstream down",
        )
        await runtime.store.apply_status([end])


async def test_auto_disabled_job_is_shown_and_re_enabled_through_put_jobs_job(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await create(client, cronExpression="* * * * *")
    await disable_by_failures(runtime, job["id"])
    shown = (await client.get(f"/api/v1/jobs/{job['id']}")).json()
    assert shown["isActive"] is False
    assert shown["nextRunAt"] is None
    state = shown["autoDisable"]
    assert state["consecutiveFailures"] == 5
    assert state["disabledReason"] == (
        "5 consecutive failures within 60 min; last: RuntimeError: upstream down"
    )
    assert state["disabledAt"] is not None
    listed = (await client.get("/api/v1/jobs", params={"autoDisabled": "true"})).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]]

    # The reference's call, as written there.
    response = await client.put(
        "/api/v1/jobs/job",
        json={"id": job["id"], "isActive": {"value": True, "isUpdated": True}},
    )
    assert response.status_code == 200, response.text
    enabled = response.json()
    assert enabled["isActive"] is True
    assert enabled["nextRunAt"] is not None
    assert enabled["autoDisable"]["consecutiveFailures"] == 0
    assert enabled["autoDisable"]["disabledReason"] is None
    assert enabled["autoDisable"]["disabledAt"] is None


async def test_a_change_sent_with_a_copy_from_before_an_auto_disable_is_refused(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await create(client, cronExpression="* * * * *")
    read = await client.get(f"/api/v1/jobs/{job['id']}")
    stale = read.headers["ETag"]
    await disable_by_failures(runtime, job["id"])

    for method, path, body in [
        ("PATCH", f"/api/v1/jobs/{job['id']}", {"isActive": True, "priority": 3}),
        ("PUT", "/api/v1/jobs/job", {"id": job["id"], "isActive": True, "priority": 3}),
    ]:
        refused = await client.request(method, path, json=body, headers={"If-Match": stale})
        problem = assert_problem(refused, 412)
        assert "changed since" in problem["detail"]
    deleted = await client.delete(f"/api/v1/jobs/{job['id']}", headers={"If-Match": stale})
    assert_problem(deleted, 412)
    shown = await client.get(f"/api/v1/jobs/{job['id']}")
    assert shown.json()["isActive"] is False  # the auto-disable stands
    assert shown.json()["priority"] == job["priority"]

    fresh = shown.headers["ETag"]
    assert fresh != stale
    changed = await client.patch(
        f"/api/v1/jobs/{job['id']}", json={"priority": 3}, headers={"If-Match": fresh}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["priority"] == 3
    assert changed.json()["isActive"] is False
    assert changed.headers["ETag"] not in (fresh, stale)
    # Weak tags and lists compare by value; "*" matches any existing job.
    weak = await client.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"priority": 4},
        headers={"If-Match": f'"nope", W/{changed.headers["ETag"]}'},
    )
    assert weak.status_code == 200, weak.text
    anything = await client.patch(
        f"/api/v1/jobs/{job['id']}", json={"priority": 1}, headers={"If-Match": "*"}
    )
    assert anything.status_code == 200, anything.text


async def test_put_jobs_job_applies_only_updated_fields(client: httpx.AsyncClient) -> None:
    job = await create(client, displayName="before", priority=1)
    response = await client.put(
        "/api/v1/jobs/job",
        json={
            "id": job["id"],
            "displayName": {"value": "after", "isUpdated": True},
            "priority": {"value": 4, "isUpdated": False},
            "autoDisableThreshold": 3,
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["displayName"], body["priority"], body["autoDisableThreshold"]) == ("after", 1, 3)
    missing = await client.put("/api/v1/jobs/job", json={"isActive": True})
    assert assert_problem(missing, 422)["errors"][0]["field"] == "id"
    unknown = await client.put(
        "/api/v1/jobs/job", json={"id": job["id"], "colour": {"value": 1, "isUpdated": True}}
    )
    assert assert_problem(unknown, 422)["errors"][0]["field"] == "colour"
    gone = await client.put(
        "/api/v1/jobs/job", json={"id": "00000000-0000-7000-8000-000000000000", "priority": 1}
    )
    assert_problem(gone, 404)


async def test_put_jobs_job_takes_objects_that_are_not_wrappers_as_values(
    client: httpx.AsyncClient,
) -> None:
    job = await create(client, cronExpression="0 0 1 1 *", jobData={"old": True})
    job_id = job["id"]
    # A jobData object that happens to have a "value" key is jobData, not a wrapper.
    response = await client.put("/api/v1/jobs/job", json={"id": job_id, "jobData": {"value": 5}})
    assert response.status_code == 200, response.text
    assert response.json()["jobData"] == {"value": 5}
    assert (await client.get(f"/api/v1/jobs/{job_id}")).json()["jobData"] == {"value": 5}
    # The same object sent wrapped; and a wrapper that says "not updated" changes nothing.
    wrapped = {"value": {"value": 6}, "isUpdated": True}
    response = await client.put("/api/v1/jobs/job", json={"id": job_id, "jobData": wrapped})
    assert response.json()["jobData"] == {"value": 6}
    response = await client.put(
        "/api/v1/jobs/job", json={"id": job_id, "jobData": {"isUpdated": False}}
    )
    assert response.json()["jobData"] == {"value": 6}
    # isUpdated true without a value: refused naming the field; nothing is cleared.
    missing = await client.put(
        "/api/v1/jobs/job", json={"id": job_id, "cronExpression": {"isUpdated": True}}
    )
    assert assert_problem(missing, 422)["errors"][0]["field"] == "cronExpression"
    not_bool = await client.put(
        "/api/v1/jobs/job",
        json={"id": job_id, "cronExpression": {"value": "* * * * *", "isUpdated": "yes"}},
    )
    assert assert_problem(not_bool, 422)["errors"][0]["field"] == "cronExpression"
    shown = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    assert (shown["cronExpression"], shown["jobData"]) == ("0 0 1 1 *", {"value": 6})


async def test_failed_occurrence_update_reads_wrappers_like_put_jobs_job(
    client: httpx.AsyncClient,
) -> None:
    url = "/api/v1/failed-occurrences/0190c2b6-0000-7000-8000-00000000abcd"
    for body in [
        {"resolutionNote": {"isUpdated": True}},
        {"resolutionNote": {"value": "x", "isUpdated": "yes"}},
        {"resolutionNote": {"value": "x"}},  # no isUpdated: an object, not text
    ]:
        problem = assert_problem(await client.put(url, json=body), 422)
        assert [e["field"] for e in problem["errors"]] == ["resolutionNote"], body
    # A proper wrapper passes the input checks (and finds no such record).
    wrapped = {"resolutionNote": {"value": "x", "isUpdated": True}}
    assert_problem(await client.put(url, json=wrapped), 404)


async def test_post_jobs_job_creates(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/v1/jobs/job", json={"jobType": "report", "cronExpression": "0 0 * * *"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["jobType"] == "report"


# --- cancel -----------------------------------------------------------------------------------


async def test_cancel_a_queued_occurrence_at_once(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await create(client)
    occurrence = (await client.post(f"/api/v1/jobs/{job['id']}/trigger")).json()
    cancels = runtime.coordination.cancellations()
    heard = asyncio.ensure_future(anext(cancels))
    await asyncio.sleep(0)
    response = await client.post(
        f"/api/v1/occurrences/{occurrence['id']}/cancel", json={"reason": "wrong data"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["statusName"] == "Cancelled"
    assert body["exception"] == "cancelled: wrong data"
    last = body["statusChangeLogs"][-1]
    assert (last["from"], last["to"], last["reason"]) == (0, 4, "cancelled: wrong data")
    # The workers hear it too: one already holding the message skips it.
    assert await asyncio.wait_for(heard, 5) == Cancellation(
        UUID(occurrence["id"]), "cancelled: wrong data"
    )
    again = await client.post(f"/api/v1/occurrences/{occurrence['id']}/cancel")
    assert "Cancelled" in assert_problem(again, 409)["detail"]


class UnreachableCancels(MemoryCoordination):
    """A coordination whose cancellation channel cannot be reached (Redis down)."""

    async def cancel(
        self,
        occurrence_ids: Sequence[UUID],
        reason: str | None = None,
        *,
        superseded_below: int | None = None,
    ) -> None:
        raise BackendUnavailableError("coordination unreachable")


async def test_a_queued_cancel_stands_when_the_workers_cannot_be_told(
    client: httpx.AsyncClient, runtime: MiniRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    job = await create(client)
    queued = (await client.post(f"/api/v1/jobs/{job['id']}/trigger")).json()
    running = (await client.post(f"/api/v1/jobs/{job['id']}/trigger", json={"force": True})).json()
    record = StatusRecord(
        occurrence_id=UUID(running["id"]), status=S.RUNNING, timestamp=datetime.now(UTC)
    )
    await runtime.store.apply_status([record])
    runtime.coordination = UnreachableCancels()
    # Queued: the store's change is the cancel; the workers not hearing of it is logged.
    response = await client.post(f"/api/v1/occurrences/{queued['id']}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["statusName"] == "Cancelled"
    stored = await runtime.store.get_occurrence(UUID(queued["id"]))
    assert stored.status is S.CANCELLED
    assert "could not be told" in caplog.text
    # Running: nothing happened without the channel, so the caller hears it (and may retry).
    response = await client.post(f"/api/v1/occurrences/{running['id']}/cancel")
    assert_problem(response, 503)
    assert (await runtime.store.get_occurrence(UUID(running["id"]))).status is S.RUNNING


async def test_cancel_a_running_occurrence_goes_to_its_worker(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await create(client)
    occurrence = (await client.post(f"/api/v1/jobs/{job['id']}/trigger")).json()
    occurrence_id = UUID(occurrence["id"])
    running = StatusRecord(
        occurrence_id=occurrence_id, status=S.RUNNING, timestamp=datetime.now(UTC)
    )
    await runtime.store.apply_status([running])
    cancels = runtime.coordination.cancellations()
    heard = asyncio.ensure_future(anext(cancels))
    await asyncio.sleep(0)
    response = await client.post(f"/api/v1/occurrences/{occurrence_id}/cancel")
    assert response.status_code == 202, response.text
    assert response.json()["statusName"] == "Running"
    assert await asyncio.wait_for(heard, 5) == Cancellation(occurrence_id, "cancelled")
    logs = (await client.get(f"/api/v1/occurrences/{occurrence_id}/logs")).json()["items"]
    assert logs[-1]["message"] == "cancel requested: no reason given"
    # The worker's report ends it.
    done = StatusRecord(
        occurrence_id=occurrence_id,
        status=S.CANCELLED,
        timestamp=datetime.now(UTC),
        exception="cancelled",
    )
    await runtime.store.apply_status([done])
    final: dict[str, Any] = (await client.get(f"/api/v1/occurrences/{occurrence_id}")).json()
    assert final["statusName"] == "Cancelled"


async def test_cancel_refuses_unknown_and_bad_input(client: httpx.AsyncClient) -> None:
    missing = await client.post("/api/v1/occurrences/00000000-0000-7000-8000-000000000000/cancel")
    assert_problem(missing, 404)
    job = await create(client)
    occurrence = (await client.post(f"/api/v1/jobs/{job['id']}/trigger")).json()
    bad = await client.post(
        f"/api/v1/occurrences/{occurrence['id']}/cancel", json={"reason": "x" * 501}
    )
    assert assert_problem(bad, 422)["errors"][0]["field"] == "reason"
