"""``GET /api/v1/workers``: live instances grouped by worker group, from the registry."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from rota.core.models import WorkerInfo
from tests.api_runtime import MiniRuntime


def _info(instance: str, group: str, load: int, types: dict[str, dict[str, object]]) -> WorkerInfo:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    return WorkerInfo(
        instance_id=instance,
        worker_id=group,
        host="host-a",
        pid=42,
        job_types=types,
        concurrency=4,
        version="1.2",
        current_load=load,
        started_at=now,
        last_heartbeat=now,
    )


async def test_no_workers_is_an_empty_list(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/workers")
    assert response.status_code == 200
    assert response.json() == {"items": []}


async def test_instances_are_grouped_with_capacity_load_and_job_types(
    runtime: MiniRuntime,
    client: httpx.AsyncClient,
) -> None:
    reg = runtime.coordination
    await reg.register_worker(_info("reports-2", "reports", 3, {"Report": {"maxRetries": 2}}), 30)
    await reg.register_worker(_info("reports-1", "reports", 1, {"Report": {"maxRetries": 2}}), 30)
    await reg.register_worker(_info("mail-1", "mail", 0, {"Send": {}, "Bounce": {}}), 30)

    body = (await client.get("/api/v1/workers")).json()

    assert [g["workerId"] for g in body["items"]] == ["mail", "reports"]
    mail, reports = body["items"]
    assert [i["instanceId"] for i in reports["instances"]] == ["reports-1", "reports-2"]
    assert reports["capacity"] == 8
    assert reports["load"] == 4
    assert reports["jobTypes"] == {"Report": {"maxRetries": 2}}
    assert mail["instances"][0]["jobTypes"] == ["Bounce", "Send"]
    assert mail["instances"][0]["lastHeartbeat"].startswith("2026-11-22T12:00:00")

    await reg.unregister_worker("reports-2")
    body = (await client.get("/api/v1/workers")).json()
    assert [i["instanceId"] for i in body["items"][1]["instances"]] == ["reports-1"]


async def test_one_group_by_its_id(
    runtime: MiniRuntime,
    client: httpx.AsyncClient,
) -> None:
    schema = {"type": "object", "properties": {"kind": {"type": "string"}}}
    reg = runtime.coordination
    await reg.register_worker(_info("reports-1", "reports", 2, {"Report": {"schema": schema}}), 30)
    await reg.register_worker(_info("mail-1", "mail", 0, {"Send": {}}), 30)
    body = (await client.get("/api/v1/workers/reports")).json()
    assert body["workerId"] == "reports"
    assert body["jobTypes"]["Report"]["schema"] == schema
    assert [i["instanceId"] for i in body["instances"]] == ["reports-1"]
    assert body["instances"][0]["lastHeartbeat"].startswith("2026-11-22T12:00:00")
    assert (body["capacity"], body["load"]) == (4, 2)
    response = await client.get("/api/v1/workers/nobody")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
