"""``POST /api/v1/jobs/bulk`` with 10,000 jobs in one request, one transaction, on SQLite and
PostgreSQL: all created, or none with every refused job named."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from uuid import UUID

import httpx
import pytest

from rota.api.app import create_app
from rota.stores.sql import SqlStore
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime
from tests.stores import store as store  # each store kind, over the conftest's SQLite one
from tests.stores import store_runtime as store_runtime  # the API's runtime on it

log = logging.getLogger(__name__)

COUNT = 10_000


@pytest.fixture
async def client(runtime: MiniRuntime) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(create_app(runtime)) as http:
        http.timeout = httpx.Timeout(120)
        yield http


def spec(n: int) -> dict[str, object]:
    if n % 2:
        schedule: dict[str, object] = {"cronExpression": f"{n % 60} * * * *"}
    else:
        schedule = {"executeAt": f"2031-01-01T00:{n % 60:02d}:00Z"}
    return {
        "jobType": "send-reminder",
        "displayName": f"reminder {n}",
        "tags": ["bulk", f"batch-{n % 10}"],
        "jobData": {"user": n, "text": "don't forget"},
        **schedule,
    }


async def test_ten_thousand_jobs_in_one_request(
    client: httpx.AsyncClient, store: SqlStore, store_kind: str
) -> None:
    body = {"jobs": [spec(n) for n in range(COUNT)]}
    started = time.perf_counter()
    response = await client.post("/api/v1/jobs/bulk", json=body)
    elapsed = time.perf_counter() - started
    log.warning("bulk create of %d jobs on %s: %.2f s", COUNT, store_kind, elapsed)
    assert response.status_code == 201, response.text[:500]
    created = response.json()["items"]
    assert len(created) == COUNT
    assert len({job["id"] for job in created}) == COUNT
    assert created[17]["displayName"] == "reminder 17"
    assert (await store.overview(datetime.now(UTC))).jobs == COUNT
    tags = {t.tag: t.jobs for t in await store.tags()}
    assert tags["bulk"] == COUNT
    assert tags["batch-3"] == COUNT // 10


async def test_one_bad_job_refuses_all_and_every_bad_one_is_named(
    client: httpx.AsyncClient, store: SqlStore
) -> None:
    jobs = [spec(n) for n in range(COUNT)]
    jobs[17] = jobs[17] | {"cronExpression": "61 * * * *"}
    jobs[9_999] = {"jobType": "x", "executeAt": "2031-01-01T00:00Z", "timeZone": "Mars/Olympus"}
    response = await client.post("/api/v1/jobs/bulk", json={"jobs": jobs})
    assert response.status_code == 422, response.text[:500]
    problem = response.json()
    assert [e["field"] for e in problem["errors"]] == [
        "jobs[17].cronExpression",
        "jobs[9999].timeZone",
    ]
    assert problem["errors"][0]["part"] == "minute"
    assert (await store.overview(datetime.now(UTC))).jobs == 0

    malformed = [spec(n) for n in range(3)] + [{"jobType": "x", "priority": 9}]
    response = await client.post("/api/v1/jobs/bulk", json={"jobs": malformed})
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["jobs[3].priority"]
    too_many = {"jobs": [spec(1)] * (COUNT + 1)}
    response = await client.post("/api/v1/jobs/bulk", json=too_many)
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["jobs"]
    assert (await store.overview(datetime.now(UTC))).jobs == 0


async def test_prefer_return_minimal_answers_the_ids_in_order(
    client: httpx.AsyncClient, store: SqlStore
) -> None:
    """``Prefer: return=minimal``: the ids of the created jobs, in the request's order, and
    the preference named as applied; the jobs are created as without it."""
    body = {"jobs": [spec(n) for n in range(100)]}
    headers = {"Prefer": 'respond-async, RETURN="minimal"; x=1'}
    response = await client.post("/api/v1/jobs/bulk", json=body, headers=headers)
    assert response.status_code == 201, response.text[:500]
    assert response.headers["Preference-Applied"] == "return=minimal"
    answer = response.json()
    assert set(answer) == {"count", "ids"}
    assert answer["count"] == 100
    names = [(await store.get_job(UUID(i))).display_name for i in answer["ids"]]
    assert names == [f"reminder {n}" for n in range(100)]

    full = await client.post("/api/v1/jobs/bulk", json=body, headers={"Prefer": "return=full"})
    assert full.status_code == 201
    assert "Preference-Applied" not in full.headers
    assert len(full.json()["items"]) == 100
    assert (await store.overview(datetime.now(UTC))).jobs == 200


async def test_a_minimal_answer_is_replayed_for_its_idempotency_key(
    client: httpx.AsyncClient, store: SqlStore
) -> None:
    body = {"jobs": [spec(n) for n in range(3)]}
    headers = {"Prefer": "return=minimal", "Idempotency-Key": "load-1"}
    first = await client.post("/api/v1/jobs/bulk", json=body, headers=headers)
    again = await client.post("/api/v1/jobs/bulk", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Preference-Applied"] == "return=minimal"
    assert again.json() == first.json()
    assert (await store.overview(datetime.now(UTC))).jobs == 3


async def test_each_job_of_the_answer_is_what_the_jobs_list_shows(
    client: httpx.AsyncClient, store: SqlStore
) -> None:
    """The bulk answer shows each job as every other answer does (one model, one writer):
    whole numbers where floats are held, every optional setting, a paused one."""
    full = spec(1) | {
        "timeoutSeconds": 90,
        "maxRetries": 2,
        "retryDelaySeconds": 1,
        "zombiePolicy": "fail",
        "zombieThresholdSeconds": 30.5,
        "autoDisableThreshold": 3,
        "jitterSeconds": 2,
        "description": "é ☃",
    }
    every = {"jobType": "t", "every": "1h30m", "isActive": False}
    body = {"jobs": [spec(0), full, every]}
    response = await client.post("/api/v1/jobs/bulk", json=body)
    assert response.status_code == 201, response.text[:500]
    items = response.json()["items"]
    listed = {job["id"]: job for job in (await client.get("/api/v1/jobs")).json()["items"]}
    assert [listed[job["id"]] for job in items] == items
    assert items[1]["timeoutSeconds"] == 90.0
    assert items[1]["timeoutMinutes"] == 1.5
    assert items[2]["every"] == "1h30m"
