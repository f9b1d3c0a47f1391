"""``Idempotency-Key`` on ``POST /jobs`` and ``POST /jobs/bulk``, on SQLite and PostgreSQL: a
repeat within 24 h gets the first answer and creates nothing; the same key with another body
is refused; a failed request leaves its key free; the answers expire and are purged."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from rota.api.app import create_app
from rota.core.errors import ConflictError
from rota.services.idempotency import PENDING, TTL, Answer, Idempotency
from rota.services.maintenance import Maintenance, RetentionPolicy
from rota.stores.sql import SqlStore
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime
from tests.stores import store as store  # each store kind, over the conftest's SQLite one
from tests.stores import store_runtime as store_runtime  # the API's runtime on it

KEY = {"Idempotency-Key": "8b0f7c1e-7d43-4f0a-9a57-2f3d0d0c1a11"}
JOB = {"jobType": "send-report", "displayName": "monthly report", "cronExpression": "0 8 1 * *"}


async def jobs_named(client: httpx.AsyncClient, name: str) -> int:
    listed = await client.get("/api/v1/jobs", params={"search": name, "limit": 100})
    return sum(1 for job in listed.json()["items"] if job["displayName"] == name)


async def test_a_repeat_gets_the_first_answer_and_creates_nothing(
    client: httpx.AsyncClient,
) -> None:
    first = await client.post("/api/v1/jobs", json=JOB, headers=KEY)
    assert first.status_code == 201, first.text
    assert first.headers["Idempotent-Replayed"] == "false"
    again = await client.post("/api/v1/jobs", json=JOB, headers=KEY)
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["ETag"] == first.headers["ETag"]
    # the reference's path is the same operation: the same key finds the same answer
    reference = await client.post("/api/v1/jobs/job", json=JOB, headers=KEY)
    assert reference.json()["id"] == first.json()["id"]
    assert await jobs_named(client, "monthly report") == 1
    # without a key, every request creates
    plain = await client.post("/api/v1/jobs", json=JOB)
    assert plain.status_code == 201
    assert "Idempotent-Replayed" not in plain.headers
    assert await jobs_named(client, "monthly report") == 2


async def test_the_same_key_with_another_body_is_refused(client: httpx.AsyncClient) -> None:
    assert (await client.post("/api/v1/jobs", json=JOB, headers=KEY)).status_code == 201
    other = await client.post("/api/v1/jobs", json={**JOB, "displayName": "other"}, headers=KEY)
    assert other.status_code == 422
    problem = other.json()
    assert problem["errors"][0]["field"] == "Idempotency-Key"
    assert "another body" in problem["detail"]
    assert await jobs_named(client, "other") == 0
    # the same fields in another order are the same request
    reordered = dict(reversed(list(JOB.items())))
    assert (await client.post("/api/v1/jobs", json=reordered, headers=KEY)).status_code == 201


async def test_a_key_is_the_callers_and_the_operations_own(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    mine = await client.post("/api/v1/jobs", json=JOB, headers=KEY)
    async with api_client(create_app(runtime), "operator") as operator:
        theirs = await operator.post("/api/v1/jobs", json=JOB, headers=KEY)
    assert theirs.status_code == 201
    assert theirs.headers["Idempotent-Replayed"] == "false"
    assert theirs.json()["id"] != mine.json()["id"]
    bulk = await client.post("/api/v1/jobs/bulk", json={"jobs": [JOB]}, headers=KEY)
    assert bulk.status_code == 201
    assert bulk.headers["Idempotent-Replayed"] == "false"
    assert await jobs_named(client, "monthly report") == 3


async def test_a_bulk_repeat_returns_the_same_jobs(client: httpx.AsyncClient) -> None:
    body = {"jobs": [{**JOB, "displayName": f"bulk {n}"} for n in range(50)]}
    first = await client.post("/api/v1/jobs/bulk", json=body, headers=KEY)
    assert first.status_code == 201
    again = await client.post("/api/v1/jobs/bulk", json=body, headers=KEY)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert [j["id"] for j in again.json()["items"]] == [j["id"] for j in first.json()["items"]]
    assert await jobs_named(client, "bulk 7") == 1


async def test_a_failed_request_leaves_its_key_free(client: httpx.AsyncClient) -> None:
    bad = await client.post(
        "/api/v1/jobs", json={**JOB, "cronExpression": "61 * * * *"}, headers=KEY
    )
    assert bad.status_code == 422
    fixed = await client.post("/api/v1/jobs", json=JOB, headers=KEY)
    assert fixed.status_code == 201
    assert fixed.headers["Idempotent-Replayed"] == "false"


async def test_a_malformed_key_is_refused(client: httpx.AsyncClient) -> None:
    for key in ["", "x" * 256, "naïve", "two words"]:
        answer = await client.post(
            "/api/v1/jobs", json=JOB, headers={"Idempotency-Key": key.encode()}
        )
        assert answer.status_code == 422, (key, answer.text)
        assert answer.json()["errors"][0]["field"] == "Idempotency-Key"
    assert await jobs_named(client, "monthly report") == 0


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_a_repeat_while_the_first_is_handled_is_refused(store: SqlStore) -> None:
    """Two requests with one key at once: the second is refused (409), not run; once the
    first has answered, a repeat gets its answer."""
    idempotency = Idempotency(store)
    entered, leave = asyncio.Event(), asyncio.Event()
    runs = 0

    async def slow() -> Answer:
        nonlocal runs
        runs += 1
        entered.set()
        await leave.wait()
        return Answer(201, b'{"id": 1}')

    first = asyncio.create_task(idempotency.answer("k", "ann", "jobs.create", b"{}", slow))
    await entered.wait()
    with pytest.raises(ConflictError):
        await idempotency.answer("k", "ann", "jobs.create", b"{}", slow)
    leave.set()
    assert (await first).replayed is False
    repeat = await idempotency.answer("k", "ann", "jobs.create", b"{}", slow)
    assert (repeat.body, repeat.replayed, runs) == (b'{"id": 1}', True, 1)


async def test_answers_expire_after_a_day_and_are_purged(store: SqlStore) -> None:
    clock = Clock()
    idempotency = Idempotency(store, clock)
    runs = 0

    async def create() -> Answer:
        nonlocal runs
        runs += 1
        return Answer(201, f'{{"run": {runs}}}'.encode())

    await idempotency.answer("k", "ann", "jobs.create", b"{}", create)
    clock.now += TTL - timedelta(seconds=1)
    assert (await idempotency.answer("k", "ann", "jobs.create", b"{}", create)).replayed
    clock.now += timedelta(seconds=2)
    fresh = await idempotency.answer("k", "ann", "jobs.create", b"{}", create)
    assert (fresh.body, fresh.replayed) == (b'{"run": 2}', False)

    # a claim whose request never answered (its server died) frees the key after PENDING
    stuck = await store.claim_idempotency_key("s" * 64, "f", clock.now, clock.now + PENDING)
    assert stuck is None
    assert (await store.claim_idempotency_key("s" * 64, "f", clock.now, clock.now)) is not None
    later = clock.now + PENDING
    assert (await store.claim_idempotency_key("s" * 64, "f", later, later + PENDING)) is None

    maintenance = Maintenance(store, RetentionPolicy(), clock=lambda: clock.now + 2 * TTL)
    report = await maintenance.run_once()
    assert report.idempotency_keys == 2
    assert await store.purge_idempotency_keys(clock.now + 3 * TTL, 100) == 0
