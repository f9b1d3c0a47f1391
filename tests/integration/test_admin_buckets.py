"""Buckets and zombies in the embedded runtime: the admin buckets endpoint (through ASGI), the
graceful stop's Completing state and lease release, and a zombie's new attempt end to end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from msgspec.structs import replace

from rota.app.runtime import Runtime
from rota.app.server import prepare
from rota.core.models import FailureType, OccurrenceStatus, StatusRecord, utcnow
from rota.core.planning import PlanSettings, new_occurrence
from tests.helpers import eventually, settings_for

S = OccurrenceStatus


class Stoppable:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.stopped = False

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.runtime.stop(grace=2)


@pytest.fixture
async def handle(tmp_path: Path) -> AsyncIterator[Stoppable]:
    settings = settings_for(tmp_path)
    settings.scheduler.sweeper_interval_seconds = 0.5
    settings.scheduler.zombie_interval_seconds = 0.2
    rt = await prepare(settings, ["tests.integration.runtime_jobs"])
    await rt.start()
    handle = Stoppable(rt)
    try:
        yield handle
    finally:
        await handle.stop()


@pytest.fixture
def runtime(handle: Stoppable) -> Runtime:
    return handle.runtime


async def buckets(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/v1/admin/buckets")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_buckets_lists_every_bucket_with_owner_lease_and_index(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    execute_at = utcnow() + timedelta(seconds=60)
    job = await runtime.jobs.create_job({"job_type": "it.fast", "execute_at": execute_at})
    body = await buckets(client)

    assert body["bucketCount"] == 16
    assert body["instances"] == [
        {"instanceId": runtime.instance_id, "state": "Active", "buckets": list(range(16))}
    ]
    rows = body["buckets"]
    assert [b["bucket"] for b in rows] == list(range(16))
    for row in rows:
        assert set(row) == {"bucket", "owner", "state", "leaseExpiresAt", "lag", "indexed"}
        assert (row["owner"], row["state"]) == (runtime.instance_id, "Active")
        assert row["leaseExpiresAt"] is not None
        assert row["lag"] == 0
    assert [b["indexed"] for b in rows if b["indexed"]] == [1]
    assert rows[job.bucket]["indexed"] == 1


async def test_buckets_is_documented(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    ok = spec["paths"]["/api/v1/admin/buckets"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/BucketsOut"
    }
    bucket = spec["components"]["schemas"]["BucketOut"]
    assert bucket["properties"]["state"]["enum"] == ["Active", "Completing", "Lost"]


async def test_graceful_stop_shows_completing_then_releases_every_lease(
    handle: Stoppable, runtime: Runtime, client: httpx.AsyncClient
) -> None:
    await runtime.owner.begin_release()
    body = await buckets(client)
    assert {b["state"] for b in body["buckets"]} == {"Completing"}
    assert body["instances"][0]["state"] == "Stopping"

    await handle.stop()
    assert await runtime.coordination.leases() == {}


async def test_a_zombie_gets_a_new_attempt_that_runs(runtime: Runtime) -> None:
    far = utcnow() + timedelta(days=1)
    job = await runtime.jobs.create_job({"job_type": "it.fast", "execute_at": far})
    now = utcnow()
    occ = new_occurrence(job, now, now, PlanSettings(), trigger_reason="manual")
    await runtime.store.insert_occurrences([replace(occ, dispatched_at=now)])
    # A worker took it and died without a word since.
    silent_since = now - timedelta(seconds=60)
    record = StatusRecord(
        occurrence_id=occ.id, status=S.RUNNING, timestamp=silent_since, instance_id="ghost-1"
    )
    await runtime.store.apply_status([record])

    async def completed() -> bool:
        return (await runtime.store.get_occurrence(occ.id)).status is S.COMPLETED

    await eventually(completed, 15, "the new attempt to complete")
    stored = await runtime.store.get_occurrence(occ.id)
    assert stored.attempt == 2
    assert stored.result == "fast"
    changes = [(c.to_status, c.attempt) for c in stored.status_changes]
    assert changes[:4] == [(S.QUEUED, 1), (S.RUNNING, 1), (S.UNKNOWN, 1), (S.QUEUED, 2)]
    assert changes[-1] == (S.COMPLETED, 2)  # a fast job's Running may travel with it
    unknown = stored.status_changes[2]
    why = f"{FailureType.ZOMBIE.value}: no heartbeat from worker instance ghost-1 for "
    assert (unknown.reason or "").startswith(why)
    assert stored.exception is None  # the zombie message stays in the history only
    assert runtime.zombies.requeued == 1
