"""Silence detection on the embedded runtime: a paused dispatcher makes a cron job miss its
fires and raises an alert (API, metric, webhook); resuming resolves it. A dispatcher loop that
stops ticking raises its own alert."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from rota.api.app import create_app
from tests.api_client import api_client
from tests.helpers import RuntimeFactory, eventually


class Receiver:
    """A tiny HTTP endpoint that keeps the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.bodies: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hook"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode().split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        body = await reader.readexactly(length)
        await self.bodies.put(json.loads(body))
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.close()


async def test_a_paused_dispatcher_makes_a_cron_job_raise_an_alert(
    receiver: Receiver,  # set up first, torn down after the runtime (its webhook target)
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory(
        {
            "silence.interval_seconds": 0.2,
            "silence.window_seconds": 60,
            "silence.grace_seconds": 1.0,
            "silence.fire_check_enabled": False,  # its fire_overdue: tests/.../test_missed_fires
            "alert_webhook_url": receiver.url,
        },
        ["tests.integration.ops_jobs"],
        grace=1,
    )
    rt.dispatcher.pause("silence test")
    job = await rt.jobs.create_job({"job_type": "ops.fast", "cron_expression": "* * * * * *"})
    app = create_app(rt)

    async def alerted() -> bool:
        return any(a.job_id == job.id for a in rt.silence.active)

    await eventually(alerted, 15, "a missed_fire alert")
    async with api_client(app, role="viewer") as http:
        body = (await http.get("/api/v1/admin/alerts")).json()
    [alert] = [a for a in body["active"] if a["jobId"] == str(job.id)]
    assert alert["kind"] == "missed_fire"
    assert alert["jobType"] == "ops.fast"
    assert alert["instanceId"] == rt.instance_id
    assert alert["expectedAt"] is not None
    assert "should have fired" in alert["message"]
    hook = await asyncio.wait_for(receiver.bodies.get(), 10)
    assert hook["source"] == "rota"
    assert hook["alert"]["kind"] == "missed_fire"  # type: ignore[index]
    assert hook["alert"]["jobId"] == str(job.id)  # type: ignore[index]
    # published in this server's heartbeat, for the other servers' admin/alerts
    await rt.owner.tick()
    shared = json.loads((await rt.coordination.instances())[rt.instance_id]["alerts"])
    assert [a["jobId"] for a in shared] == [str(job.id)]
    text = rt.metrics.exposition().decode()
    assert 'rota_silence_alerts_total{kind="missed_fire"} 1.0' in text
    assert 'rota_silence_alerts_active{kind="missed_fire"} 1.0' in text
    assert "rota_dispatcher_paused 1.0" in text

    rt.dispatcher.resume()

    async def resolved() -> bool:
        return not any(a.job_id == job.id for a in rt.silence.active)

    await eventually(resolved, 15, "the alert resolved once the job fires again")
    async with api_client(app, role="viewer") as http:
        body = (await http.get("/api/v1/admin/alerts")).json()
    assert [a["jobId"] for a in body["recent"]] == [str(job.id)]
    assert body["recent"][0]["resolvedAt"] is not None
    assert body["checks"] > 0
    assert 'rota_silence_alerts_active{kind="missed_fire"} 0.0' in (
        rt.metrics.exposition().decode()
    )


async def test_alerts_of_other_servers_are_listed(runtime_factory: RuntimeFactory) -> None:
    rt = await runtime_factory(None, ["tests.integration.ops_jobs"], grace=1)
    other = {
        "kind": "dispatcher_stalled",
        "key": "dispatcher:rota-other-1",
        "message": "the dispatcher of rota-other-1 has not ticked for 75 s",
        "raisedAt": "2030-01-01T00:00:00+00:00",
        "resolvedAt": None,
        "instanceId": "rota-other-1",
        "jobId": None,
        "jobType": None,
        "expectedAt": None,
    }
    await rt.coordination.heartbeat_instance(
        "rota-other-1", {"alerts": json.dumps([other, {"kind": 1}])}, 30
    )
    await rt.coordination.heartbeat_instance("rota-other-2", {"alerts": "not json"}, 30)
    async with api_client(create_app(rt), role="viewer") as http:
        response = await http.get("/api/v1/admin/alerts")
    assert response.status_code == 200
    # malformed entries are left out
    assert response.json()["active"] == [other | {"raisedAt": "2030-01-01T00:00:00Z"}]


async def test_a_dispatcher_that_stops_ticking_raises_an_alert(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory(
        {"silence.interval_seconds": 0.2, "silence.dispatcher_stall_seconds": 0.5},
        ["tests.integration.ops_jobs"],
        grace=1,
    )
    assert not rt.silence.active
    rt.dispatcher.stop()  # its loop ends: no more ticks

    async def stalled() -> bool:
        return any(a.kind == "dispatcher_stalled" for a in rt.silence.active)

    await eventually(stalled, 15, "a dispatcher_stalled alert")
    [alert] = [a for a in rt.silence.active if a.kind == "dispatcher_stalled"]
    assert alert.key == f"dispatcher:{rt.instance_id}"
    assert "has not ticked" in alert.message
    assert 'rota_silence_alerts_total{kind="dispatcher_stalled"} 1.0' in (
        rt.metrics.exposition().decode()
    )
