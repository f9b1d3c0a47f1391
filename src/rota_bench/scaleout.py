"""``rota bench scaleout``: one burst of no-op jobs on S servers and W workers (distributed).

S ``rota server`` processes and W ``rota worker`` processes of their own run on the services
named by ROTA_DATABASE_URL, ROTA_REDIS_URL and ROTA_AMQP_URL (under the ``rota-bench`` name
prefix). Once every worker has registered and every server holds its share of the buckets,
N one-time jobs are created through ``POST /api/v1/jobs/bulk`` (the requests spread over the
servers), all due at one instant far enough ahead for the creation to end before it. The
run is timed from that instant to the last occurrence's end as the store recorded it; every
occurrence is checked Completed, once per job. The CPU each process used per job is reported
by role (servers, workers, and the services when they run on this machine), which is what
docs/performance.md ("Sizing from the CPU per job") scales out on paper from.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from rota.app.settings import Settings
from rota.core.errors import ConfigurationError
from rota.core.models import OccurrenceStatus
from rota_bench.capacity import _distributed_admin
from rota_bench.jobs import JOBS_MODULE
from rota_bench.scenarios import (
    BENCH_WORKER,
    _cpu_per_job,
    _cpu_seconds,
    _environment,
    _server_process,
    bench_prefix,
)

BATCH = 1_000
"""Jobs per bulk request."""

CREATE_RATE = 2_500.0
"""Jobs per second the creation is planned at (the due instant is this far ahead, and more):
well below what one server takes, so the creation ends before the burst is due."""

_SERVER_ENV = {
    "ROTA_SCHEDULER__DISPATCH_BATCH_SIZE": "2000",
    "ROTA_SCHEDULER__DISPATCH_LEAD_SECONDS": "0",
}
"""As ``rota bench throughput``'s server runtime; no dispatch lead: the run is timed from
the due instant, and no fire is sent (and held) ahead of it."""

CONCURRENCY = 256
"""Each worker's concurrency (as ``rota bench throughput``)."""


@asynccontextmanager
async def _workers(count: int) -> AsyncIterator[list[psutil.Process]]:
    """``count`` ``rota worker`` processes of the bench's job module, stopped at the end."""
    env = {**os.environ, "ROTA_NAME_PREFIX": bench_prefix()}
    cmd = [sys.executable, "-m", "rota", "worker", JOBS_MODULE, "--worker-id", BENCH_WORKER]
    cmd += ["--concurrency", str(CONCURRENCY), "--log-level", "warning"]
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            started.append(await asyncio.to_thread(subprocess.Popen, cmd, env=env))
        yield [psutil.Process(p.pid) for p in started]
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                await asyncio.to_thread(process.wait, 60)
            except subprocess.TimeoutExpired:
                process.kill()


async def _until(what: str, check: Any, deadline: float) -> None:
    """Poll the async ``check()`` until it is true; ``RuntimeError`` naming ``what`` after
    ``deadline`` (monotonic)."""
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench scaleout: {what} not within the deadline")
        await asyncio.sleep(0.1)


async def run_scaleout(servers: int = 1, workers: int = 1, jobs: int = 20_000) -> dict[str, Any]:
    """``jobs`` one-time no-op jobs due at one instant on ``servers`` servers and ``workers``
    workers (see the module); the rate they ran at and the CPU per job of each role."""
    import asyncpg
    import httpx

    settings = Settings(name_prefix=bench_prefix())
    if settings.is_embedded or not settings.database_url:
        raise ConfigurationError(
            "bench scaleout needs ROTA_DATABASE_URL, ROTA_REDIS_URL and ROTA_AMQP_URL"
        )
    admin, password = f"bench-scale-{secrets.token_hex(4)}", secrets.token_urlsafe(24)
    await _distributed_admin(admin, password)
    dsn = settings.database_url.replace("+asyncpg", "")
    # one signing key for all servers, as a deployment has: a token from one is good on all
    env = {**_SERVER_ENV, "ROTA_AUTH_SECRET": secrets.token_urlsafe(48)}
    with tempfile.TemporaryDirectory(prefix="rota-bench-scale-") as tmp:
        async with AsyncExitStack() as stack:
            # the workers start first: they need only the broker and Redis, and their start
            # overlaps the servers'
            worker_processes = await stack.enter_async_context(_workers(workers))
            for i in range(servers):
                (Path(tmp) / str(i)).mkdir()
            started = await asyncio.gather(
                *(
                    stack.enter_async_context(
                        _server_process("distributed", admin, password, Path(tmp) / str(i), env)
                    )
                    for i in range(servers)
                )
            )
            bases = [base for base, _ in started]
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=b, timeout=120))
                for b in bases
            ]
            login = await clients[0].post(
                "/api/v1/auth/login", json={"username": admin, "password": password}
            )
            login.raise_for_status()
            for client in clients:
                client.headers["Authorization"] = f"Bearer {login.json()['accessToken']}"
            deadline = time.monotonic() + 120

            async def registered() -> bool:
                answer = await clients[0].get(f"/api/v1/workers/{BENCH_WORKER}")
                live = answer.json()["instances"] if answer.status_code == 200 else []
                pids = {w.pid for w in worker_processes}
                return pids <= {i["pid"] for i in live}

            async def balanced() -> bool:
                answer = await clients[0].get("/api/v1/admin/buckets")
                holding = [i for i in answer.json()["instances"] if i["buckets"]]
                return len(holding) >= servers

            await _until("every worker registered", registered, deadline)
            ready = time.perf_counter()
            await _until("every server holding buckets", balanced, deadline)
            balance_seconds = time.perf_counter() - ready
            margin = 2.0 + jobs / CREATE_RATE
            due = (datetime.now(UTC) + timedelta(seconds=margin)).replace(microsecond=0)
            created_at = time.perf_counter()
            for n, first in enumerate(range(0, jobs, BATCH)):
                body = {
                    "jobs": [
                        {
                            "displayName": f"scaleout {i}",
                            "jobType": "bench.noop",
                            "executeAt": due.isoformat(),
                        }
                        for i in range(first, min(jobs, first + BATCH))
                    ]
                }
                answer = await clients[n % servers].post("/api/v1/jobs/bulk", json=body)
                if answer.status_code != 201:
                    raise RuntimeError(f"bulk create: {answer.status_code} {answer.text[:300]}")
            create_seconds = time.perf_counter() - created_at
            created_late = datetime.now(UTC) >= due
            roles = {"servers": [p for _, p in started], "workers": worker_processes}
            cpu_before = _cpu_seconds(roles)
            connection = await asyncpg.connect(dsn)
            try:
                completed = int(OccurrenceStatus.COMPLETED)
                query = (
                    "SELECT count(*) FILTER (WHERE status = $2), count(*), "
                    "count(DISTINCT job_id), max(end_time) "
                    "FROM occurrences WHERE scheduled_for = $1"
                )

                async def finished() -> bool:
                    done, *_ = await connection.fetchrow(query, due, completed)
                    return bool(done >= jobs)

                await _until("every occurrence Completed", finished, time.monotonic() + 900)
                cpu_after = _cpu_seconds(roles)
                done, total, distinct, last_end = await connection.fetchrow(query, due, completed)
            finally:
                await connection.close()
    run_seconds = (last_end - due).total_seconds()
    cpu = _cpu_per_job(cpu_before, cpu_after, jobs)
    return {
        "scenario": "scaleout",
        "mode": "distributed",
        "servers": servers,
        "workers": workers,
        "jobs": jobs,
        "balanceSeconds": round(balance_seconds, 2),
        "createSeconds": round(create_seconds, 2),
        "createdLate": created_late,
        "runSeconds": round(run_seconds, 3),
        "jobsPerSecond": round(jobs / run_seconds, 1) if run_seconds > 0 else None,
        "completed": int(done),
        "occurrences": int(total),
        "jobsRun": int(distinct),
        "cpuMicrosPerJob": cpu,
        "environment": _environment(),
    }
