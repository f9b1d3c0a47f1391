"""The REST API over a real SQLite store and the in-memory adapters, through ASGI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest

from rota.api.app import create_app
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.models import LogRecord, OccurrenceStatus, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime

PROBLEM = "application/problem+json"
JOB_KEYS = {
    "id",
    "displayName",
    "description",
    "tags",
    "workerId",
    "jobType",
    "jobData",
    "jobDataRedacted",
    "cronExpression",
    "timeZone",
    "executeAt",
    "isActive",
    "priority",
    "concurrentExecutionPolicy",
    "misfirePolicy",
    "timeoutSeconds",
    "maxRetries",
    "retryDelaySeconds",
    "nextRunAt",
    "version",
    "createdAt",
    "updatedAt",
    "totalExecutions",
    "successRate",
    "averageDuration",
    "bucket",
    "source",
    "autoDisableThreshold",
    "autoDisableWindowSeconds",
    "autoDisableCooldownSeconds",
    "zombiePolicy",
    "zombieThresholdSeconds",
    "every",
    "intervalSeconds",
    "startAt",
    "endAt",
    "maxRuns",
    "runCount",
    "jitterSeconds",
    "misfireWindowSeconds",
    "autoDisable",
    "paused",
    "pauseNote",
    "pausedUntil",
    "pausedBy",
    "pausedAt",
    "skipNext",
    "skipNote",
    "warnings",
    "dependsOn",
    "dependents",
    # the reference's names of what is above (docs/api.md, "The reference API's forms")
    "timeoutMinutes",
    "avarageDuration",
    "auditInfo",
}


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["title"]
    assert body["type"]
    return body


def fields(problem: dict[str, Any]) -> list[str | None]:
    return [e.get("field") for e in problem["errors"]]


async def create(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    body = {"jobType": "report", "cronExpression": "0 0 1 1 *"} | overrides
    response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


# --- jobs ------------------------------------------------------------------------------------


async def test_create_returns_the_job_in_camel_case(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/v1/jobs",
        json={
            "displayName": "Daily sales",
            "jobType": "GenerateReportJob",
            "jobData": '{"reportType": "sales"}',
            "tags": "test,first-job",
            "cronExpression": "0 0 9 * * *",
            "timeZone": "Europe/Berlin",
            "priority": 3,
            "concurrentExecutionPolicy": 1,
            "maxRetries": 2,
        },
    )

    assert response.status_code == 201, response.text
    job = response.json()
    assert set(job) == JOB_KEYS | {"createdBy", "updatedBy"}
    assert response.headers["location"] == f"/api/v1/jobs/{job['id']}"
    assert UUID(job["id"]).version == 7
    assert job["jobData"] == {"reportType": "sales"}
    assert job["tags"] == ["test", "first-job"]
    assert (job["priority"], job["concurrentExecutionPolicy"], job["maxRetries"]) == (3, 1, 2)
    assert (job["version"], job["isActive"], job["totalExecutions"]) == (1, True, 0)
    assert job["source"] == "api"
    assert job["nextRunAt"].endswith(("08:00:00Z", "07:00:00Z"))
    assert job["createdAt"].endswith("Z")


async def test_snake_case_input_is_accepted(client: httpx.AsyncClient) -> None:
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    body = {
        "job_type": "cleanup",
        "execute_at": at.isoformat(),
        "display_name": "Once",
        "job_data": {"a": [1, 2]},
        "concurrent_execution_policy": 1,
    }
    response = await client.post("/api/v1/jobs", json=body)

    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["jobType"], job["displayName"], job["jobData"]) == (
        "cleanup",
        "Once",
        {"a": [1, 2]},
    )
    assert job["concurrentExecutionPolicy"] == 1
    assert job["executeAt"] == job["nextRunAt"] == at.isoformat().replace("+00:00", "Z")
    assert job["cronExpression"] is None


async def test_create_refusals_name_their_field(client: httpx.AsyncClient) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cronExpression": "* * *"}, "cronExpression"),
        ({"cronExpression": "* * * * *", "timeZone": "Moon/Base"}, "timeZone"),
        # with a cron expression, executeAt is its start (test_reference_calls.py); still checked
        ({"executeAt": "tomorrow"}, "executeAt"),
        ({"cronExpression": "@often"}, "cronExpression"),
        ({"priority": 9}, "priority"),
        ({"maxRetries": -1}, "maxRetries"),
        ({"jobType": ""}, "jobType"),
        ({"jobData": "{not json"}, "jobData"),
        ({"colour": "red"}, "colour"),
        ({"cronExpression": None, "executeAt": "0001-01-01T00:00:00+14:00"}, "executeAt"),
        ({"cronExpression": None, "executeAt": "9999-12-31T23:59:59-14:00"}, "executeAt"),
        ({"displayName": "a\u0000b"}, "displayName"),
        ({"tags": ["ok", "b\u0000d"]}, "tags[1]"),
    ]
    for overrides, expected in cases:
        body = {"jobType": "t", "cronExpression": "@daily"} | overrides
        response = await client.post("/api/v1/jobs", json=body)
        problem = assert_problem(response, 422)
        assert expected in fields(problem), (overrides, problem)

    infinite = await client.post(
        "/api/v1/jobs",
        content=b'{"jobType": "t", "cronExpression": "@daily", "timeoutSeconds": 1e400}',
        headers={"content-type": "application/json"},
    )
    assert "timeoutSeconds" in fields(assert_problem(infinite, 422))
    for query in ("search=a%00b", "tag=a%00b", "jobType=a%00b"):
        assert_problem(await client.get(f"/api/v1/jobs?{query}"), 422)
    for query in (
        "scheduledAfter=0001-01-01T00:00:00%2B14:00",
        "scheduledBefore=9999-12-31T23:59:59-14:00",
    ):
        assert_problem(await client.get(f"/api/v1/occurrences?{query}"), 422)
    missing = assert_problem(
        await client.post("/api/v1/jobs", json={"cronExpression": "@daily"}), 422
    )
    assert fields(missing) == ["jobType"]
    assert (await client.get("/api/v1/jobs")).json()["items"] == []


async def test_bad_cron_problem_names_the_cron_part(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/v1/jobs", json={"jobType": "t", "cronExpression": "0 25 * * *"}
    )
    problem = assert_problem(response, 422)
    assert problem["errors"] == [
        {"field": "cronExpression", "message": problem["errors"][0]["message"], "part": "hour"}
    ]
    assert problem["instance"] == "/api/v1/jobs"


async def test_list_filters_and_pages(client: httpx.AsyncClient) -> None:
    a = await create(client, displayName="Alpha report", tags=["x"])
    b = await create(client, displayName="Beta", jobType="mail", isActive=False)
    c = await create(client, displayName="Gamma", tags=["x", "y"])

    first = (await client.get("/api/v1/jobs", params={"limit": 2})).json()
    assert [j["id"] for j in first["items"]] == [c["id"], b["id"]]
    assert first["nextCursor"]
    rest = (await client.get("/api/v1/jobs", params={"cursor": first["nextCursor"]})).json()
    assert [j["id"] for j in rest["items"]] == [a["id"]]
    assert rest["nextCursor"] is None

    async def ids(**params: Any) -> list[str]:
        response = await client.get("/api/v1/jobs", params=params)
        assert response.status_code == 200, response.text
        return [j["id"] for j in response.json()["items"]]

    assert await ids(tag="x") == [c["id"], a["id"]]
    assert await ids(jobType="mail") == [b["id"]]
    assert await ids(isActive="false") == [b["id"]]
    assert await ids(search="alpha") == [a["id"]]
    assert fields(assert_problem(await client.get("/api/v1/jobs?limit=5000"), 422)) == ["limit"]


async def test_get_patch_delete(client: httpx.AsyncClient) -> None:
    job = await create(client)
    url = f"/api/v1/jobs/{job['id']}"

    assert (await client.get(url)).json() == job

    patched = await client.patch(url, json={"displayName": "Renamed", "is_active": False})
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert (body["displayName"], body["isActive"], body["nextRunAt"], body["version"]) == (
        "Renamed",
        False,
        None,
        1,
    )
    assert (await client.get(url)).json() == body

    assert (await client.delete(url)).status_code == 204
    assert_problem(await client.get(url), 404)
    assert_problem(await client.delete(url), 404)
    assert_problem(await client.patch(url, json={"displayName": "x"}), 404)


async def test_patch_refusals(client: httpx.AsyncClient) -> None:
    job = await create(client)
    url = f"/api/v1/jobs/{job['id']}"
    cases: list[tuple[Any, str]] = [
        ({"version": 3}, "version"),
        ({"jobType": None}, "jobType"),
        ({"executeAt": "tomorrow"}, "executeAt"),
        ({"cronExpression": "61 * * * *"}, "cronExpression"),
        ({"priority": "high"}, "priority"),
    ]
    for patch, expected in cases:
        problem = assert_problem(await client.patch(url, json=patch), 422)
        assert expected in fields(problem), (patch, problem)
    assert (await client.get(url)).json() == job


async def test_versions(client: httpx.AsyncClient) -> None:
    job = await create(client, jobData={"v": 1})
    url = f"/api/v1/jobs/{job['id']}"
    assert (await client.get(f"{url}/versions")).json() == {"items": []}

    changed = (await client.patch(url, json={"jobData": {"v": 2}})).json()
    assert changed["version"] == 2

    versions = (await client.get(f"{url}/versions")).json()["items"]
    assert [v["version"] for v in versions] == [1]
    assert versions[0]["snapshot"]["jobData"] == {"v": 1}
    assert versions[0]["createdAt"].endswith("Z")
    assert_problem(await client.get(f"/api/v1/jobs/{new_id()}/versions"), 404)


async def test_trigger(client: httpx.AsyncClient, runtime: MiniRuntime) -> None:
    await runtime.declare("report")
    job = await create(client, jobData={"d": 1})
    url = f"/api/v1/jobs/{job['id']}/trigger"

    response = await client.post(url, json={"reason": "check", "jobData": {"d": 2}})
    assert response.status_code == 202, response.text
    occ = response.json()
    assert (occ["jobId"], occ["status"], occ["statusName"]) == (job["id"], 0, "Queued")
    assert occ["correlationId"] == occ["id"]
    assert (occ["triggerReason"], occ["jobData"], occ["attempt"]) == ("check", {"d": 2}, 1)
    assert [(c["from"], c["to"]) for c in occ["statusChangeLogs"]] == [(None, 0)]
    stored = await runtime.store.get_occurrence(UUID(occ["id"]))
    assert stored.dispatched_at is None

    assert_problem(await client.post(url), 409)
    forced = await client.post(url, json={"force": True})
    assert forced.status_code == 202
    assert forced.json()["jobData"] == {"d": 1}
    assert_problem(await client.post(f"/api/v1/jobs/{new_id()}/trigger"), 404)


async def test_preview(client: httpx.AsyncClient) -> None:
    response = await client.get(
        "/api/v1/schedules/preview",
        params={
            "cron": "0 9 * * *",
            "timeZone": "Europe/Berlin",
            "after": "2026-03-28T00:00:00Z",
            "count": 3,
        },
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "fires": ["2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"]
    }

    bad_cron = await client.get("/api/v1/schedules/preview", params={"cron": "* * * *"})
    assert fields(assert_problem(bad_cron, 422)) == ["cronExpression"]
    bad_zone = await client.get(
        "/api/v1/schedules/preview", params={"cron": "* * * * *", "timeZone": "No/Where"}
    )
    assert fields(assert_problem(bad_zone, 422)) == ["timeZone"]
    too_many = await client.get(
        "/api/v1/schedules/preview", params={"cron": "* * * * *", "count": 100_000}
    )
    assert fields(assert_problem(too_many, 422)) == ["count"]


# --- occurrences -----------------------------------------------------------------------------


async def seed_occurrences(runtime: MiniRuntime, job_id: UUID) -> list[UUID]:
    """Three occurrences of the job: Completed (with logs), Running, Queued (oldest first)."""
    job = await runtime.store.get_job(job_id)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    occurrences = [
        new_occurrence(job, t0 + timedelta(minutes=i), t0, PlanSettings()) for i in range(3)
    ]
    await runtime.store.insert_occurrences(occurrences)
    done, running, _ = (o.id for o in occurrences)
    t1 = t0 + timedelta(minutes=5)
    await runtime.store.apply_status(
        [
            StatusRecord(occurrence_id=done, status=OccurrenceStatus.RUNNING, timestamp=t1),
            StatusRecord(
                occurrence_id=done,
                status=OccurrenceStatus.COMPLETED,
                timestamp=t1 + timedelta(seconds=2),
                result="ok",
                duration_ms=2000,
            ),
            StatusRecord(occurrence_id=running, status=OccurrenceStatus.RUNNING, timestamp=t1),
        ]
    )
    await runtime.store.append_logs(
        [
            LogRecord(
                occurrence_id=done,
                timestamp=t1 + timedelta(milliseconds=i),
                level="INFO",
                message=f"line {i}",
                data={"i": i} if i == 0 else None,
                category="job",
            )
            for i in range(3)
        ]
    )
    return [o.id for o in occurrences]


async def test_occurrence_list_filters_and_pages(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await create(client)
    other = await create(client)
    done, running, queued = map(str, await seed_occurrences(runtime, UUID(job["id"])))
    await seed_occurrences(runtime, UUID(other["id"]))

    async def ids(*params: tuple[str, Any]) -> list[str]:
        response = await client.get("/api/v1/occurrences", params=[("jobId", job["id"]), *params])
        assert response.status_code == 200, response.text
        return [o["id"] for o in response.json()["items"]]

    assert await ids() == [queued, running, done]
    assert await ids(("status", "2")) == [done]
    assert await ids(("status", "0,1")) == [queued, running]
    assert await ids(("status", "0"), ("status", "completed")) == [queued, done]

    page = (await client.get("/api/v1/occurrences", params={"jobId": job["id"], "limit": 2})).json()
    assert len(page["items"]) == 2
    assert page["nextCursor"]
    item = page["items"][0]
    assert item["statusName"] == "Queued"
    assert item["jobType"] == "report"
    assert "statusChangeLogs" not in item

    everything = (await client.get("/api/v1/occurrences")).json()["items"]
    assert len(everything) == 6

    bad = await client.get("/api/v1/occurrences", params={"status": "9"})
    assert fields(assert_problem(bad, 422)) == ["status"]
    bad_id = await client.get("/api/v1/occurrences", params={"jobId": "nope"})
    assert fields(assert_problem(bad_id, 422)) == ["jobId"]


async def test_occurrence_detail_and_logs(client: httpx.AsyncClient, runtime: MiniRuntime) -> None:
    job = await create(client)
    done, _, _ = await seed_occurrences(runtime, UUID(job["id"]))

    detail = (await client.get(f"/api/v1/occurrences/{done}")).json()
    assert (detail["status"], detail["statusName"], detail["result"]) == (2, "Completed", "ok")
    assert detail["durationMs"] == 2000
    assert detail["retryCount"] == 0
    assert detail["startTime"].endswith("Z")
    assert detail["endTime"].endswith("Z")
    changes = [(c["from"], c["to"]) for c in detail["statusChangeLogs"]]
    assert changes == [(None, 0), (0, 1), (1, 2)]
    assert {"timestamp", "from", "to", "attempt", "reason"} == set(detail["statusChangeLogs"][0])

    logs = (await client.get(f"/api/v1/occurrences/{done}/logs", params={"limit": 2})).json()
    assert [line["message"] for line in logs["items"]] == ["line 0", "line 1"]
    assert logs["items"][0]["data"] == {"i": 0}
    assert logs["items"][0]["category"] == "job"
    assert logs["nextAfter"] == logs["items"][-1]["seq"]
    rest = (
        await client.get(f"/api/v1/occurrences/{done}/logs", params={"after": logs["nextAfter"]})
    ).json()
    assert [line["message"] for line in rest["items"]] == ["line 2"]
    tail = (
        await client.get(f"/api/v1/occurrences/{done}/logs", params={"after": rest["nextAfter"]})
    ).json()
    assert tail == {"items": [], "nextAfter": rest["nextAfter"]}

    assert_problem(await client.get(f"/api/v1/occurrences/{new_id()}"), 404)
    assert_problem(await client.get(f"/api/v1/occurrences/{new_id()}/logs"), 404)


# --- errors, limits, health, OpenAPI ---------------------------------------------------------


async def test_garbage_is_a_problem_not_a_crash(client: httpx.AsyncClient) -> None:
    headers = {"content-type": "application/json"}
    for body in (b"{", b"\xff\xfe", b"[1, 2]", b'"text"', b"null", b"{}"):
        response = await client.post("/api/v1/jobs", content=body, headers=headers)
        assert_problem(response, 422)
    garbage = await client.post("/api/v1/jobs", content=b"{", headers=headers)
    assert fields(assert_problem(garbage, 422)) == ["body"]
    not_an_object = await client.post("/api/v1/jobs", content=b"[1, 2]", headers=headers)
    assert fields(assert_problem(not_an_object, 422)) == ["body"]
    bad_tag = await client.post(
        "/api/v1/jobs", json={"jobType": "t", "cronExpression": "@daily", "tags": ["ok", 1]}
    )
    assert fields(assert_problem(bad_tag, 422)) == ["tags[1]"]
    assert_problem(await client.get("/api/v1/jobs/not-a-uuid"), 422)
    assert_problem(await client.get("/api/v1/nothing-here"), 404)
    assert_problem(await client.put("/api/v1/jobs", json={}), 405)


async def test_bytes_that_are_not_text_are_a_422_on_the_body(client: httpx.AsyncClient) -> None:
    """Found by schemathesis: a body that is not UTF-8 was FastAPI's bare 400."""
    headers = {"content-type": "application/json"}
    for path in ("/api/v1/jobs", "/api/v1/users", "/api/v1/auth/login"):
        response = await client.post(path, content=b'{"jobType": "\x80\xc3"}', headers=headers)
        problem = assert_problem(response, 422)
        assert fields(problem) == ["body"]
        assert "UTF-8" in problem["detail"]


async def test_json_that_cannot_be_stored_is_a_422_not_a_crash(client: httpx.AsyncClient) -> None:
    """Python's JSON reader takes lone surrogates, NaN, 1e999, deep nesting and huge
    integers; each was a 500 (the store or the response could not encode it) or a bare 400."""
    job = await create(client)
    headers = {"content-type": "application/json"}
    base = b'{"jobType": "t", "cronExpression": "@daily", '
    cases: list[tuple[str, str, bytes, str]] = [
        ("POST", "/api/v1/jobs", base + b'"jobData": "\\ud800"}', "jobData"),
        ("POST", "/api/v1/jobs", base + b'"jobData": {"\\udfff": [1]}}', "jobData"),
        ("POST", "/api/v1/jobs", base + b'"jobData": "[\\"\\ud800\\"]"}', "jobData"),
        ("POST", "/api/v1/jobs", base + b'"jobData": NaN}', "jobData"),
        ("POST", "/api/v1/jobs", base + b'"jobData": {"a": 1e999}}', "jobData"),
        (
            "POST",
            "/api/v1/jobs",
            base + b'"jobData": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "jobData",  # refused before it is parsed, naming where it nests too deeply
        ),
        ("POST", "/api/v1/jobs", base + b'"jobData": ' + b"9" * 5000 + b"}", "body"),
        ("POST", f"/api/v1/jobs/{job['id']}/trigger", b'{"jobData": "\\ud800"}', "jobData"),
        (
            "PUT",
            "/api/v1/jobs/job",
            b'{"id": "%s", "jobData": "\\ud800"}' % job["id"].encode(),
            "jobData",
        ),
        (
            "PUT",
            "/api/v1/jobs/job",
            b'{"id": "%s", "\\ud800": {"value": 1, "isUpdated": 3}}' % job["id"].encode(),
            "\ud800",
        ),
    ]
    for method, path, body, named in cases:
        response = await client.request(method, path, content=body, headers=headers)
        assert fields(assert_problem(response, 422)) == [named], (path, body[:80])
    assert [j["id"] for j in (await client.get("/api/v1/jobs")).json()["items"]] == [job["id"]]
    assert (await client.get("/api/v1/occurrences")).json()["items"] == []


async def test_numbers_past_what_is_stored_are_a_422(client: httpx.AsyncClient) -> None:
    """Found by schemathesis: ``after`` over 64 bits was a 500 (SQLite overflow); a duration of
    1e12 seconds was stored and later overflowed the date arithmetic of retries, zombies and
    auto-disable."""
    huge = await client.get(f"/api/v1/occurrences/{new_id()}/logs", params={"after": 2**63})
    assert fields(assert_problem(huge, 422)) == ["after"]
    largest = await client.get(f"/api/v1/occurrences/{new_id()}/logs", params={"after": 2**63 - 1})
    assert_problem(largest, 404)  # valid: no such occurrence

    base = {"jobType": "t", "cronExpression": "@daily"}
    for name in (
        "timeoutSeconds",
        "retryDelaySeconds",
        "autoDisableWindowSeconds",
        "autoDisableCooldownSeconds",
        "zombieThresholdSeconds",
    ):
        refused = await client.post("/api/v1/jobs", json=base | {name: 1e12})
        assert fields(assert_problem(refused, 422)) == [name]
    job = await create(client, retryDelaySeconds=315_576_000)
    assert job["retryDelaySeconds"] == 315_576_000
    patched = await client.patch(f"/api/v1/jobs/{job['id']}", json={"timeoutSeconds": 1e300})
    assert fields(assert_problem(patched, 422)) == ["timeoutSeconds"]


async def test_date_times_are_iso_text_not_numbers(client: httpx.AsyncClient) -> None:
    """Found by schemathesis: a number was taken as seconds since 1970 (``executeAt: -662``
    made a job for 1969), against the documented date-time format."""
    for value in (23946997, -662, "79026", 1.5):
        refused = await client.post("/api/v1/jobs", json={"jobType": "t", "executeAt": value})
        problem = assert_problem(refused, 422)
        assert fields(problem) == ["executeAt"]
        assert "ISO-8601" in problem["detail"]
    bulk = await client.post("/api/v1/jobs/bulk", json={"jobs": [{"jobType": "t", "executeAt": 5}]})
    assert fields(assert_problem(bulk, 422)) == ["jobs[0].executeAt"]
    for path, name, extra in (
        ("/api/v1/failed-occurrences", "failedBefore", {}),
        ("/api/v1/occurrences", "scheduledAfter", {}),
        ("/api/v1/audit", "after", {}),
        ("/api/v1/schedules/preview", "after", {"cron": "@daily"}),
    ):
        response = await client.get(path, params={name: "79026"} | extra)
        assert fields(assert_problem(response, 422)) == [name], path
    assert (await client.get("/api/v1/jobs")).json()["items"] == []
    iso = await client.get("/api/v1/occurrences", params={"scheduledAfter": "2030-01-01T00:00:00Z"})
    assert iso.status_code == 200


async def test_header_and_wrapped_update_errors_name_their_field(
    client: httpx.AsyncClient,
) -> None:
    """Found by schemathesis: an invalid If-Match header, and a PUT /jobs/job field, gave an
    error without its ``field`` (the schema requires it) or with a snake_case one."""
    job = await create(client)
    too_long = {"If-Match": "x" * 501}
    patched = await client.patch(f"/api/v1/jobs/{job['id']}", json={}, headers=too_long)
    assert fields(assert_problem(patched, 422)) == ["If-Match"]
    deleted = await client.delete(f"/api/v1/jobs/{job['id']}", headers=too_long)
    assert fields(assert_problem(deleted, 422)) == ["If-Match"]

    wrapped = await client.put(
        "/api/v1/jobs/job",
        json={
            "id": job["id"],
            "displayName": {"value": "x" * 201, "isUpdated": True},
            "max_retries": -1,
        },
    )
    problem = assert_problem(wrapped, 422)
    assert sorted(fields(problem)) == ["displayName", "maxRetries"]
    missing = await client.put("/api/v1/jobs/job", json={})
    assert missing.json()["errors"] == [{"field": "id", "message": "id is required"}]


async def test_request_bodies_over_the_limit_are_refused(runtime: MiniRuntime) -> None:
    runtime.settings.api.max_body_bytes = 1024 * 1024  # ROTA_API__MAX_BODY_BYTES
    big = {"jobType": "t", "cronExpression": "@daily", "jobData": "x" * (1024 * 1024)}
    async with api_client(create_app(runtime)) as client:
        problem = assert_problem(await client.post("/api/v1/jobs", json=big), 413)
        assert problem["detail"] == "the request body is larger than 1048576 bytes"

        async def chunks() -> AsyncIterator[bytes]:
            payload = json.dumps(big).encode()
            for start in range(0, len(payload), 64 * 1024):
                yield payload[start : start + 64 * 1024]

        streamed = await client.post(
            "/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
        )
        assert_problem(streamed, 413)
        assert (await client.get("/api/v1/jobs")).json()["items"] == []

        fits = {"jobType": "t", "cronExpression": "@daily", "jobData": "x" * 1000}
        assert (await client.post("/api/v1/jobs", json=fits)).status_code == 201


async def test_job_data_over_the_limit_is_a_422_on_jobdata(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    limit = runtime.jobs.max_job_data_bytes
    assert limit == 256 * 1024  # the default (ROTA_API__MAX_JOB_DATA_BYTES)
    over = "x" * limit  # with its quotes, 2 bytes over
    base = {"jobType": "t", "cronExpression": "@daily"}

    created = assert_problem(await client.post("/api/v1/jobs", json=base | {"jobData": over}), 422)
    assert fields(created) == ["jobData"]
    assert f"limit is {limit}" in created["detail"]
    as_string = await client.post("/api/v1/jobs/job", json=base | {"jobData": json.dumps([over])})
    assert fields(assert_problem(as_string, 422)) == ["jobData"]
    bulk = await client.post("/api/v1/jobs/bulk", json={"jobs": [base, base | {"jobData": over}]})
    assert fields(assert_problem(bulk, 422)) == ["jobs[1].jobData"]
    assert (await client.get("/api/v1/jobs")).json()["items"] == []

    job = await create(client, jobData={"fits": "x" * (limit - 20)})
    patched = await client.patch(f"/api/v1/jobs/{job['id']}", json={"jobData": over})
    assert fields(assert_problem(patched, 422)) == ["jobData"]
    wrapped = {"id": job["id"], "jobData": {"value": over, "isUpdated": True}}
    assert fields(assert_problem(await client.put("/api/v1/jobs/job", json=wrapped), 422)) == [
        "jobData"
    ]
    triggered = await client.post(f"/api/v1/jobs/{job['id']}/trigger", json={"jobData": over})
    assert fields(assert_problem(triggered, 422)) == ["jobData"]
    assert (await client.get(f"/api/v1/jobs/{job['id']}")).json()["jobData"] == job["jobData"]
    assert (await client.get("/api/v1/occurrences")).json()["items"] == []


async def test_unexpected_and_backend_errors_are_problems(
    client: httpx.AsyncClient, runtime: MiniRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    async def down(*args: Any, **kwargs: Any) -> None:
        raise BackendUnavailableError("store unreachable")

    monkeypatch.setattr(runtime.jobs, "get_job", crash)
    crashed = assert_problem(await client.get(f"/api/v1/jobs/{new_id()}"), 500)
    assert "boom" not in json.dumps(crashed)

    monkeypatch.setattr(runtime.jobs, "get_job", down)
    unavailable = assert_problem(await client.get(f"/api/v1/jobs/{new_id()}"), 503)
    assert unavailable["detail"] == "store unreachable"


async def test_health(client: httpx.AsyncClient, runtime: MiniRuntime) -> None:
    live = await client.get("/api/v1/health/live")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})

    ready = await client.get("/api/v1/health/ready")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ok",
        "components": {"store": "ok", "index": "ok", "broker": "ok"},
        "warnings": [],
    }

    runtime.failing["broker"] = "connection refused"
    not_ready = await client.get("/api/v1/health/ready")
    assert not_ready.status_code == 503
    assert not_ready.json()["components"]["broker"] == "connection refused"
    assert not_ready.json()["status"] == "unavailable"


async def test_openapi_documents_every_route_with_problems(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert "Problem" in spec["components"]["schemas"]
    expected = {
        ("post", "/api/v1/jobs"),
        ("get", "/api/v1/jobs"),
        ("post", "/api/v1/jobs/bulk"),
        ("get", "/api/v1/jobs/{job_id}"),
        ("patch", "/api/v1/jobs/{job_id}"),
        ("delete", "/api/v1/jobs/{job_id}"),
        ("post", "/api/v1/jobs/{job_id}/trigger"),
        ("get", "/api/v1/jobs/{job_id}/versions"),
        ("get", "/api/v1/schedules/preview"),
        ("get", "/api/v1/occurrences"),
        ("get", "/api/v1/occurrences/{occurrence_id}"),
        ("get", "/api/v1/occurrences/{occurrence_id}/logs"),
        ("get", "/api/v1/health/live"),
        ("get", "/api/v1/health/ready"),
    }
    operations = {(m, p): op for p, item in spec["paths"].items() for m, op in item.items()}
    assert expected <= set(operations)
    for (method, path), op in operations.items():
        ok = [code for code in op["responses"] if code.startswith("2")]
        assert ok, (method, path)
        if path.endswith("/live"):
            continue
        problems = [code for code in op["responses"] if code[0] in "45"]
        assert problems, (method, path)
        for code in problems:
            content = op["responses"][code]["content"]
            if code != "503" or not path.endswith("/ready"):
                assert PROBLEM in content, (method, path, code)
    job_schema = spec["components"]["schemas"]["JobOut"]["properties"]
    assert {"nextRunAt", "concurrentExecutionPolicy", "averageDuration"} <= set(job_schema)


async def test_bulk_create(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/v1/jobs/bulk",
        json={"jobs": [{"jobType": "a", "executeAt": "2030-01-01T00:00:00Z"}] * 3},
    )
    assert response.status_code == 201, response.text
    assert len(response.json()["items"]) == 3

    refused = await client.post(
        "/api/v1/jobs/bulk",
        json={
            "jobs": [
                {"jobType": "a", "cronExpression": "@daily"},
                {"jobType": "b", "cronExpression": "@often"},
            ]
        },
    )
    assert fields(assert_problem(refused, 422)) == ["jobs[1].cronExpression"]
    one = await client.post(
        "/api/v1/jobs/bulk", json={"jobs": [{"jobType": "b", "cronExpression": "@often"}]}
    )
    assert fields(assert_problem(one, 422)) == ["jobs[0].cronExpression"]
    assert len((await client.get("/api/v1/jobs")).json()["items"]) == 3
