"""A worker written from docs/protocol.md alone — raw AMQP and Redis, nothing of Rota — runs jobs
beside a Rota worker in one group. While it is live its group gets single messages (it
announces no envelopes, §5a); once it has left, the same group gets job envelopes, which the
Rota worker reads. Real `rota server` and `rota worker` processes, real services."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import redis.asyncio as aioredis

from .conftest import free_port, wait_until
from .distributed import (
    COMPLETED,
    REDIS,
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
    settle,
)
from .test_operations import scrape

pytestmark = pytest.mark.slow

GROUP = "mixed"
JOB_TYPE = "e2e.quick"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class ForeignWorker:
    """docs/protocol.md §3, §5, §6, §9, §10 (no claims: each attempt is delivered once here),
    on its own thread and event loop."""

    def __init__(self, env: dict[str, str]) -> None:
        self.prefix = env["ROTA_NAME_PREFIX"]
        self.amqp = env["ROTA_AMQP_URL"]
        self.instance_id = f"{GROUP}-foreign-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.content_types: list[str | None] = []
        self.ran: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(30), f"the foreign worker did not start: {self._error!r}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._error is None, repr(self._error)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported by stop()
            self._error = exc
            self._ready.set()

    def _registration(self) -> bytes:
        return json.dumps({
            "instanceId": self.instance_id, "workerId": GROUP, "host": socket.gethostname(),
            "pid": os.getpid(), "jobTypes": {JOB_TYPE: {}}, "concurrency": 4,
            "startedAt": self._started, "lastHeartbeat": _now(),
        }).encode()  # fmt: skip

    async def _run(self) -> None:
        p = self.prefix
        self._started = _now()
        r = aioredis.from_url(REDIS)
        connection = await aio_pika.connect_robust(self.amqp)
        try:
            channel = await connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=4)
            arguments = {
                "x-queue-type": "classic",
                "x-max-priority": 4,
                "x-dead-letter-exchange": f"{p}.dlx",
            }
            queue = await channel.declare_queue(
                f"{p}.jobs.{GROUP}", durable=True, arguments=arguments
            )
            self._status = await channel.declare_exchange(f"{p}.status", "fanout", durable=True)
            await self._register(r)
            await queue.consume(self._take)
            self._ready.set()
            while not await asyncio.to_thread(self._stop.wait, 1.0):  # the heartbeat period
                await self._register(r)
            await channel.close()
        finally:
            await r.delete(f"{p}:worker:{self.instance_id}")
            await r.srem(f"{p}:workers", self.instance_id)
            await r.aclose()
            await connection.close()

    async def _register(self, r: Any) -> None:
        p = self.prefix
        async with r.pipeline(transaction=True) as pipe:
            pipe.set(f"{p}:worker:{self.instance_id}", self._registration(), px=6000)
            pipe.sadd(f"{p}:workers", self.instance_id)
            await pipe.execute()

    async def _take(self, message: Any) -> None:
        self.content_types.append(message.content_type)
        job = json.loads(message.body)
        attempt = job["retryCount"] + 1
        common = {"occurrenceId": job["occurrenceId"], "attempt": attempt,
                  "instanceId": self.instance_id}  # fmt: skip
        records = [
            {**common, "status": 1, "timestamp": _now()},
            {**common, "status": 2, "timestamp": _now(), "result": "foreign", "durationMs": 0},
        ]
        body = json.dumps(records).encode()
        await self._status.publish(
            aio_pika.Message(body, content_type="application/json", delivery_mode=2),
            routing_key="",
        )
        self.ran.append(job["occurrenceId"])
        await message.ack()


def _create(c: Cluster, n: int, later: float) -> list[str]:
    at = (datetime.now(UTC) + timedelta(seconds=later)).isoformat()
    jobs = c.api("POST", "/jobs/bulk", json={"jobs": [
        {"jobType": JOB_TYPE, "executeAt": at, "displayName": f"mixed {i}"} for i in range(n)
    ]})["items"]  # fmt: skip
    return [job["id"] for job in jobs]


def _run_batch(
    c: Cluster, metrics: str, n: int, later: float = 0.0
) -> tuple[list[dict[str, Any]], float, float]:
    """``n`` jobs due ``later`` seconds from now, run to their end: their occurrences (all
    Completed), and the job messages and jobs the server published for them."""
    before = _published(metrics)
    ids = _create(c, n, later)
    settle(c, ids, 60)
    after = _published(metrics)
    ended = [o for j in ids for o in c.occurrences(j)]
    assert [o["status"] for o in ended] == [COMPLETED] * n
    return ended, after[0] - before[0], after[1] - before[1]


def _published(metrics: str) -> tuple[float, float]:
    values = scrape(metrics)
    direction = (("direction", "published"),)
    return (
        values.get(("rota_broker_job_messages_total", direction), 0.0),
        values.get(("rota_broker_jobs_total", direction), 0.0),
    )


def test_a_protocol_only_worker_runs_jobs_beside_an_envelope_reading_one(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    cluster.server("server", ROTA_METRICS__PORT=str(metrics_port), ROTA_METRICS__PUBLIC="true")
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    # The foreign worker first: no dispatcher ever sees the group with envelope readers only
    # while it is there (a worker that reads none gives an envelope back, §5a).
    foreign = ForeignWorker(cluster.env)
    foreign.start()
    cluster.worker("rota", worker_id=GROUP, concurrency=8)
    try:
        wait_until(lambda: len(cluster.worker_instances()) == 2, 30, cluster.logs())
        ended, messages, jobs = _run_batch(cluster, metrics, 60)
        by = {o["instanceId"] for o in ended}
        assert foreign.instance_id in by, by  # both ran jobs
        assert len(by) == 2, by
        assert set(foreign.content_types) == {"application/json"}  # single messages only
        assert jobs == 60
        assert messages == 60  # one job a message
    finally:
        foreign.stop()

    wait_until(lambda: len(cluster.worker_instances()) == 1, 30, cluster.logs())
    # Due in 3 s: the dispatcher's view of the workers (read again after 1 s) has lost the
    # foreign worker by then.
    ended, messages, jobs = _run_batch(cluster, metrics, 60, later=3.0)
    assert jobs == 60
    assert messages < 30  # the group gets envelopes now
    assert {o["instanceId"] for o in ended} != {foreign.instance_id}
