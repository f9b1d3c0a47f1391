"""Cluster-wide limits in the embedded runtime end to end (SQLite, the in-memory
coordination and broker, the worker in the process): set through the API, followed by the
worker; the runs that overlap never exceed the limit, per type and per key, measured."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from tests.helpers import RuntimeFactory, eventually
from tests.integration import limit_jobs
from tests.limits_measure import max_overlap


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory(
        {"worker.concurrency": 16, "worker.heartbeat_seconds": 0.2},
        ["tests.integration.limit_jobs"],
    )


async def test_the_embedded_worker_follows_the_limits(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    limit_jobs.spans.clear()
    limits = [
        {"type": "lim.span", "max": 3},
        {"type": "lim.customer", "max": 1, "key": "customer"},
    ]
    r = await client.put("/api/v1/limits", json={"limits": limits})
    assert r.status_code == 200, r.text
    gate = runtime.executor.gate if runtime.executor is not None else None
    assert gate is not None

    async def followed() -> bool:
        return set(gate.limits) == {"lim.span", "lim.customer"}

    await eventually(followed, 5, "the worker to read the limits (at its next heartbeat)")
    now = datetime.now(UTC).isoformat()
    jobs = [{"jobType": "lim.span", "executeAt": now} for _ in range(15)]
    jobs += [
        {"jobType": "lim.customer", "executeAt": now, "jobData": {"customer": f"c{i % 2}"}}
        for i in range(8)
    ]
    r = await client.post("/api/v1/jobs/bulk", json={"jobs": jobs})
    assert r.status_code in (200, 201), r.text
    await eventually(lambda: len(limit_jobs.spans) >= len(jobs), 30, "every job to run")
    spans = limit_jobs.spans
    assert max_overlap((s, e) for s, e, who in spans if who == "-") == 3
    for customer in ("c0", "c1"):
        assert max_overlap((s, e) for s, e, who in spans if who == customer) == 1
    assert max_overlap((s, e) for s, e, who in spans if who != "-") == 2

    async def all_completed() -> bool:
        r = await client.get("/api/v1/occurrences", params={"limit": 100})
        statuses = [o["status"] for o in r.json()["items"]]
        return statuses == [OccurrenceStatus.COMPLETED.value] * len(jobs)

    await eventually(all_completed, 10, "every occurrence Completed")
    usage = (await client.get("/api/v1/limits")).json()
    assert usage["waiting"] == []
    assert [x["running"] for x in usage["limits"]] == [0, 0]
