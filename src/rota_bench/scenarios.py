"""``rota bench``: throughput and latency scenarios; results as JSON and a table.

Each scenario runs a real runtime (store, index, broker, dispatcher, tracker, workers) in a
fresh temporary data dir, so the numbers include every write the product does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

import rota
from rota.app.runtime import Runtime, tune_process
from rota.app.settings import Settings
from rota.core.errors import ConfigurationError
from rota.core.models import OccurrenceStatus
from rota.core.records import OccurrenceQuery
from rota_bench.jobs import JOBS_MODULE


@asynccontextmanager
async def _embedded_runtime(
    concurrency: int, lead: float | None = None
) -> AsyncIterator[tuple[Runtime, int | None]]:
    from rota.app.server import prepare

    with tempfile.TemporaryDirectory(prefix="rota-bench-") as tmp:
        settings = Settings(
            environment="test",
            data_dir=Path(tmp),
            database_url=None,
            redis_url=None,
            amqp_url=None,
        )
        settings.worker.concurrency = concurrency
        if lead is not None:
            settings.scheduler.dispatch_lead_seconds = lead
        runtime = await prepare(settings, [JOBS_MODULE])
        await runtime.start()
        tune_process()
        try:
            yield runtime, None
        finally:
            await runtime.stop(grace=5)


BENCH_PREFIX_VARIABLE = "ROTA_BENCH_PREFIX"


def bench_prefix() -> str:
    """The name prefix of the queues and Redis keys of a distributed bench: ``rota-bench``, or
    ``ROTA_BENCH_PREFIX`` (two benches at once on the same services each need their own)."""
    return os.environ.get(BENCH_PREFIX_VARIABLE) or "rota-bench"


BENCH_WORKER = "bench"


@asynccontextmanager
async def _distributed_runtime(
    concurrency: int, lead: float | None = None
) -> AsyncIterator[tuple[Runtime, int | None]]:
    """One server runtime in this process and one ``rota worker`` process, on the services
    named by ROTA_DATABASE_URL, ROTA_REDIS_URL and ROTA_AMQP_URL (under the ``rota-bench``
    name prefix, so a bench never touches a real installation's queues or keys)."""
    from rota.app.adapters import upgrade_schema
    from rota.app.server import prepare

    settings = Settings(name_prefix=bench_prefix())
    if settings.is_embedded or not settings.database_url:
        raise ConfigurationError(
            "bench --mode distributed needs ROTA_DATABASE_URL, ROTA_REDIS_URL and ROTA_AMQP_URL"
        )
    if lead is not None:
        settings.scheduler.dispatch_lead_seconds = lead
    if settings.auth_secret is None:  # the bench serves no API: any key will do
        settings.auth_secret = SecretStr(secrets.token_urlsafe(48))
    await upgrade_schema(settings.effective_database_url)
    runtime = await prepare(settings, [])
    await runtime.start()
    env = {**os.environ, "ROTA_NAME_PREFIX": bench_prefix()}
    cmd = [sys.executable, "-m", "rota", "worker", JOBS_MODULE, "--worker-id", BENCH_WORKER]
    cmd += ["--concurrency", str(concurrency), "--log-level", "warning"]
    worker = await asyncio.to_thread(subprocess.Popen, cmd, env=env)
    try:
        await _wait_for_worker(runtime, worker)
        tune_process()
        yield runtime, worker.pid
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 60)
        await runtime.stop(grace=5)


async def _wait_for_worker(runtime: Runtime, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the bench worker exited with {worker.returncode}")
        if any("bench.noop" in w.job_types for w in await runtime.coordination.workers()):
            await runtime.workers.refresh(force=True)
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the bench worker did not register within 60 s")


def _runtime_for(mode: str, concurrency: int, lead: float | None = None) -> Any:
    """The runtime of a scenario; ``lead``: its dispatch lead (``None``: the setting's)."""
    if mode == "embedded":
        return _embedded_runtime(concurrency, lead)
    if mode == "distributed":
        return _distributed_runtime(concurrency, lead)
    raise ConfigurationError(f"unknown bench mode {mode!r}: use 'embedded' or 'distributed'")


async def _completed_in_store(runtime: Runtime) -> int:
    counts = await runtime.store.count_occurrences((OccurrenceStatus.COMPLETED,))
    return counts.get(OccurrenceStatus.COMPLETED, 0)


async def _wait_completed(
    runtime: Runtime, target: int, deadline: float, baseline: int, first: list[float] | None = None
) -> int:
    """Wait until the tracker's count of committed Completed occurrences reaches ``target``
    (a cheap in-process counter, so polling does not load the store), then count them in the
    store, less the ``baseline`` it held before the jobs were created. ``first``: the
    ``perf_counter`` time at which the count first rose is appended to it (within the 5 ms
    the polling takes)."""
    stats = runtime.tracker.stats
    start = stats.completed
    while time.monotonic() < deadline:
        if first is not None and not first and stats.completed > start:
            first.append(time.perf_counter())
        if stats.completed >= target:
            break
        await asyncio.sleep(0.005)
    return await _completed_in_store(runtime) - baseline


_SERVICES = {"postgres": "postgres", "beam.smp": "rabbitmq", "redis-server": "redis"}
"""Process names of the services whose CPU a run reports when they run on this machine."""


CpuSeconds = dict[tuple[str, int], float]
"""CPU seconds (user + system) used so far, by role and process id."""


def _cpu_seconds(roles: Mapping[str, Sequence[psutil.Process]]) -> CpuSeconds:
    """The CPU used so far by the given processes (by role) and by the services running on
    this machine (by their name: ``postgres``, ``rabbitmq``, ``redis``), process by process."""
    out: CpuSeconds = {}

    def add(role: str, process: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            out[role, process.pid] = times.user + times.system

    for role, members in roles.items():
        for process in members:
            add(role, process)
    for process in psutil.process_iter(["name"]):
        service = _SERVICES.get(process.info["name"] or "")
        if service is not None:
            add(service, process)
    return out


def _cpu_per_job(before: CpuSeconds, after: CpuSeconds, jobs: int) -> dict[str, float]:
    """Microseconds of CPU per job each role used between two :func:`_cpu_seconds`: the
    processes alive at the second reading, each from its first (or from its start). A process
    that ended in between (a database backend closing) is left out: summing the live ones
    by role would count its CPU before and not after, and go below zero."""
    if jobs <= 0:
        return {}
    used: dict[str, float] = {}
    for (role, pid), seconds in after.items():
        used[role] = used.get(role, 0.0) + seconds - before.get((role, pid), 0.0)
    return {role: round(used[role] * 1e6 / jobs, 1) for role in sorted(used)}


def _environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "rota": rota.__version__ if hasattr(rota, "__version__") else "dev",
        "at": datetime.now(UTC).isoformat(),
    }


def _rate(jobs: int, seconds: float) -> float | None:
    return round(jobs / seconds, 1) if seconds > 0 else None


async def run_throughput(mode: str, jobs: int, concurrency: int = 256) -> dict[str, Any]:
    """N no-op jobs due now, created in one bulk call, then run: the run alone (from the end of
    the creation to the last Completed in the store: ``runSeconds``, ``jobsPerSecond``,
    ``cpuMicrosPerJob``; to the first: ``firstCompletedSeconds``) and the creation and the
    run together (from the start of the bulk call: ``createAndRun…``), each with its CPU per
    job by process."""
    process = psutil.Process()
    async with _runtime_for(mode, concurrency) as (runtime, worker_pid):
        baseline = await _completed_in_store(runtime)
        target = runtime.tracker.stats.completed + jobs
        now = runtime.jobs.now()
        specs = [
            {"display_name": f"noop {i}", "job_type": "bench.noop", "execute_at": now}
            for i in range(jobs)
        ]
        roles = {"bench": [psutil.Process()]}
        if worker_pid is not None:
            roles["worker"] = [psutil.Process(worker_pid)]
        cpu_start = _cpu_seconds(roles)
        sent_before = runtime.broker.message_counts()
        t0 = time.perf_counter()
        await runtime.jobs.create_jobs(specs)
        created = time.perf_counter()
        cpu_before = _cpu_seconds(roles)
        first: list[float] = []
        done = await _wait_completed(runtime, target, time.monotonic() + 600, baseline, first)
        finished = time.perf_counter()
        cpu_after = _cpu_seconds(roles)
        elapsed = finished - created
        sent = _messages_per_job(sent_before, runtime.broker.message_counts())
    return {
        "scenario": "throughput",
        "mode": mode,
        "jobs": jobs,
        "completed": done,
        "createSeconds": round(created - t0, 3),
        "runSeconds": round(elapsed, 3),
        "firstCompletedSeconds": round(first[0] - created, 3) if first else None,
        "jobsPerSecond": _rate(done, elapsed),
        "cpuMicrosPerJob": _cpu_per_job(cpu_before, cpu_after, done),
        "createAndRunSeconds": round(finished - t0, 3),
        "createAndRunJobsPerSecond": _rate(done, finished - t0),
        "createAndRunCpuMicrosPerJob": _cpu_per_job(cpu_start, cpu_after, done),
        "peakRssMiB": round(process.memory_info().rss / 2**20, 1),
        "brokerMessagesPerJob": sent,
        "environment": _environment(),
    }


def _messages_per_job(before: Mapping[str, int], after: Mapping[str, int]) -> float | None:
    """Job messages (single or envelope) the server published per job it published, between
    two readings of the broker's counts; ``None`` where the broker moves no messages (the
    embedded mode hands jobs over in process)."""
    jobs = after.get("published_jobs", 0) - before.get("published_jobs", 0)
    if jobs <= 0:
        return None
    messages = after.get("published_messages", 0) - before.get("published_messages", 0)
    return round(messages / jobs, 4)


WARM_UP_JOBS = 50


async def _warm_up(runtime: Runtime) -> None:
    """Fire and complete a few jobs, spread over a second, before measuring: the first fires
    of a fresh process pay one-time costs (statements prepared, connections and code paths
    used the first time) that say nothing about steady-state latency."""
    baseline = await _completed_in_store(runtime)
    target = runtime.tracker.stats.completed + WARM_UP_JOBS
    now = runtime.jobs.now()
    specs = [
        {
            "display_name": f"warm-up {i}",
            "job_type": "bench.noop",
            "execute_at": now + timedelta(seconds=i / WARM_UP_JOBS),
        }
        for i in range(WARM_UP_JOBS)
    ]
    await runtime.jobs.create_jobs(specs)
    if await _wait_completed(runtime, target, time.monotonic() + 60, baseline) < len(specs):
        raise RuntimeError("the warm-up jobs did not complete within 60 s")


async def run_latency(
    mode: str, jobs: int, spread: float, lead: float | None = None
) -> dict[str, Any]:
    process = psutil.Process()
    async with _runtime_for(mode, 64, lead) as (runtime, _worker_pid):
        lead_seconds = runtime.dispatcher.lead_seconds
        await _warm_up(runtime)
        baseline = await _completed_in_store(runtime)
        target = runtime.tracker.stats.completed + jobs
        start = runtime.jobs.now() + timedelta(seconds=2)
        specs = [
            {
                "display_name": f"latency {i}",
                "job_type": "bench.noop",
                "execute_at": start + timedelta(seconds=spread * i / jobs),
            }
            for i in range(jobs)
        ]
        batches = runtime.dispatcher.stats.batches
        created = await runtime.jobs.create_jobs(specs)
        deadline = time.monotonic() + spread + 120
        done = await _wait_completed(runtime, target, deadline, baseline)
        batches = runtime.dispatcher.stats.batches - batches
        lateness = await _lateness(runtime, {job.id for job in created}, deadline)
    return {
        "scenario": "latency",
        "mode": mode,
        "jobs": jobs,
        "completed": done,
        "spreadSeconds": spread,
        "leadSeconds": lead_seconds,
        "fireBatches": batches,
        **_lateness_percentiles(lateness),
        "peakRssMiB": round(process.memory_info().rss / 2**20, 1),
        "environment": _environment(),
    }


def _lateness_percentiles(lateness: list[float]) -> dict[str, float | None]:
    """p50, p90, p99, p99.9, max and mean of lateness samples (ms)."""
    if not lateness:
        keys = ("p50Ms", "p90Ms", "p99Ms", "p999Ms", "maxMs", "meanMs")
        return dict.fromkeys(keys)
    ordered = sorted(lateness)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {
        "p50Ms": pct(0.50),
        "p90Ms": pct(0.90),
        "p99Ms": pct(0.99),
        "p999Ms": pct(0.999),
        "maxMs": round(ordered[-1], 2),
        "meanMs": round(statistics.fmean(ordered), 2),
    }


CRON_START_SECONDS = 3.0
"""Seconds from the creation of the cron jobs to their first fire (a whole second)."""


async def run_cron(
    mode: str, jobs: int, seconds: int, lead: float | None = None, concurrency: int = 256
) -> dict[str, Any]:
    """``jobs`` cron jobs firing every second for ``seconds`` seconds; the lateness of their
    starts, and the fires missing (an expected fire instant with no occurrence) or doubled
    (more than one occurrence for one fire)."""
    process = psutil.Process()
    async with _runtime_for(mode, concurrency, lead) as (runtime, _worker_pid):
        lead_seconds = runtime.dispatcher.lead_seconds
        await _warm_up(runtime)
        now = runtime.jobs.now()
        start = (now + timedelta(seconds=CRON_START_SECONDS)).replace(microsecond=0)
        end = start + timedelta(seconds=seconds)
        specs = [
            {
                "display_name": f"cron {i}",
                "job_type": "bench.noop",
                "cron_expression": "* * * * * *",
                "execute_at": start,
            }
            for i in range(jobs)
        ]
        created = await runtime.jobs.create_jobs(specs)
        ids = {job.id for job in created}
        expected = jobs * seconds
        # Every fire before the end has come and gone (and had its chance to be recorded).
        wait = (end + timedelta(seconds=2) - runtime.jobs.now()).total_seconds()
        await asyncio.sleep(max(wait, 0.0))
        fires = await _fires(runtime, ids, start, end, time.monotonic() + 120, expected)
        for job in created:  # a database kept for the next run must not go on firing them
            await runtime.jobs.delete_job(job.id)
    started = [late for late in fires.values() if late is not None]
    counts = _fire_counts(fires)
    return {
        "scenario": "cron",
        "mode": mode,
        "jobs": jobs,
        "seconds": seconds,
        "leadSeconds": lead_seconds,
        "expectedFires": expected,
        "recordedFires": counts["recorded"],
        "started": len(started),
        "firesMissing": expected - counts["distinct"],
        "firesDoubled": counts["doubled"],
        **_lateness_percentiles(started),
        "slowestSeconds": _slowest_seconds(fires, start),
        "peakRssMiB": round(process.memory_info().rss / 2**20, 1),
        "environment": _environment(),
    }


_Fires = dict[tuple[UUID, datetime, int], float | None]
"""Occurrences by (job, fire, n-th of that fire): their lateness in ms (``None``: unstarted)."""


def _slowest_seconds(fires: _Fires, start: datetime, top: int = 3) -> list[dict[str, Any]]:
    """The fire instants whose starts were latest (by their median): where the tail comes
    from (a whole burst late, or its last starts)."""
    by_fire: dict[datetime, list[float]] = {}
    for (_, fire, _), late in fires.items():
        if late is not None:
            by_fire.setdefault(fire, []).append(late)
    ranked = sorted(by_fire.items(), key=lambda item: -statistics.median(item[1]))
    return [
        {
            "second": (fire - start).total_seconds(),
            "firstMs": round(min(lates), 2),
            "p50Ms": round(statistics.median(lates), 2),
            "maxMs": round(max(lates), 2),
        }
        for fire, lates in ranked[:top]
    ]


def _fire_counts(fires: _Fires) -> dict[str, int]:
    per_fire: dict[tuple[UUID, datetime], int] = {}
    for job_id, fire, _ in fires:
        per_fire[job_id, fire] = per_fire.get((job_id, fire), 0) + 1
    return {
        "recorded": len(fires),
        "distinct": len(per_fire),
        "doubled": sum(n - 1 for n in per_fire.values()),
    }


async def _fires(
    runtime: Runtime,
    job_ids: set[UUID],
    start: datetime,
    end: datetime,
    deadline: float,
    expected: int,
) -> _Fires:
    """The occurrences of these jobs for fires in [start, end), once all expected ones have
    started (or the deadline passed)."""
    while True:
        fires: _Fires = {}
        seen: dict[tuple[UUID, datetime], int] = {}
        for job_id in job_ids:
            query = OccurrenceQuery(
                job_id=job_id, scheduled_after=start, scheduled_before=end, limit=1000
            )
            for occ in (await runtime.store.list_occurrences(query)).items:
                n = seen[job_id, occ.scheduled_for] = seen.get((job_id, occ.scheduled_for), -1) + 1
                late = None
                if occ.start_time is not None:
                    late = (occ.start_time - occ.scheduled_for).total_seconds() * 1000
                fires[job_id, occ.scheduled_for, n] = late
        done = sum(1 for late in fires.values() if late is not None)
        if done >= expected or time.monotonic() > deadline:
            return fires
        await asyncio.sleep(0.5)


async def _lateness(runtime: Runtime, job_ids: set[UUID], deadline: float) -> list[float]:
    """start − scheduled (ms) of the occurrences of these jobs, once every one has started
    (by the ``deadline``, else an error). The tracker's count that said they were done may
    have counted reports left on the status queue by an earlier run."""
    while True:
        out: list[float] = []
        cursor: str | None = None
        while len(out) < len(job_ids):
            query = OccurrenceQuery(limit=1000, cursor=cursor)
            page = await runtime.store.list_occurrences(query)
            for occ in page.items:
                if occ.job_id in job_ids and occ.start_time is not None:
                    out.append((occ.start_time - occ.scheduled_for).total_seconds() * 1000)
            cursor = page.next_cursor
            if cursor is None:
                break
        if len(out) >= len(job_ids):
            return out
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(out)} of {len(job_ids)} occurrences started")
        await asyncio.sleep(0.5)


def report(result: dict[str, Any], json_file: Path | None, console: Console) -> None:
    table = Table(title=f"rota bench {result['scenario']} ({result['mode']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if key not in {"environment", "scenario", "mode"}:
            table.add_row(key, str(value))
    console.print(table)
    if json_file is not None:
        json_file.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"written to {json_file}")


# --- login flood ---------------------------------------------------------------------------

FLOOD_PROBE_INTERVAL = 0.05
"""Seconds between two calls of the probe (the normal authenticated API call)."""
PROBE_PATH = "/api/v1/jobs?limit=20"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def _server_process(
    mode: str,
    admin: str,
    password: str,
    data_dir: Path | None = None,
    env_extra: dict[str, str] | None = None,
) -> AsyncIterator[tuple[str, psutil.Process]]:
    """``rota server`` in a process of its own (embedded: SQLite in a temporary data dir, or
    ``data_dir``; distributed: on ROTA_DATABASE_URL, ROTA_REDIS_URL and ROTA_AMQP_URL under
    the ``rota-bench`` prefix), with a bench Admin and ``env_extra`` settings; its base URL
    and process."""
    import httpx

    with tempfile.TemporaryDirectory(prefix="rota-bench-") as scratch:
        tmp = str(data_dir or scratch)
        port = _free_port()
        env = {
            **os.environ,
            "ROTA_ENVIRONMENT": "test",
            "ROTA_DATA_DIR": tmp,
            "ROTA_ADMIN_USER": admin,
            "ROTA_ADMIN_PASSWORD": password,
            "ROTA_SILENCE__ENABLED": "false",
            # The attackers name their own addresses in X-Forwarded-For, as a proxy would.
            "ROTA_API__TRUSTED_PROXIES": "127.0.0.1",
            **(env_extra or {}),
        }
        if mode == "embedded":
            for name in ("ROTA_DATABASE_URL", "ROTA_REDIS_URL", "ROTA_AMQP_URL"):
                env.pop(name, None)
        elif mode == "distributed":
            settings = Settings()
            if settings.is_embedded or not settings.database_url:
                raise ConfigurationError(
                    "bench --mode distributed needs ROTA_DATABASE_URL, ROTA_REDIS_URL and "
                    "ROTA_AMQP_URL"
                )
            from rota.app.adapters import upgrade_schema

            await upgrade_schema(settings.database_url)
            env["ROTA_NAME_PREFIX"] = bench_prefix()
            env.setdefault("ROTA_AUTH_SECRET", secrets.token_urlsafe(48))
        else:
            raise ConfigurationError(
                f"unknown bench mode {mode!r}: use 'embedded' or 'distributed'"
            )
        cmd = [sys.executable, "-m", "rota", "server", "--port", str(port)]
        cmd += ["--host", "127.0.0.1", "--log-level", "error"]
        server = await asyncio.to_thread(subprocess.Popen, cmd, env=env, stdout=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base, timeout=5) as http:
                deadline = time.monotonic() + 60
                while True:
                    if server.poll() is not None:
                        raise RuntimeError(f"the bench server exited with {server.returncode}")
                    with contextlib.suppress(httpx.HTTPError):
                        if (await http.get("/api/v1/health/live")).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        raise RuntimeError("the bench server did not answer within 60 s")
                    await asyncio.sleep(0.1)
            yield base, psutil.Process(server.pid)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(server.wait, 30)
            except subprocess.TimeoutExpired:
                server.kill()


def _percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50Ms": None, "p99Ms": None, "maxMs": None}
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {"p50Ms": pct(0.50), "p99Ms": pct(0.99), "maxMs": round(ordered[-1], 2)}


class _Attack:
    """The attackers of a login flood: wrong passwords as fast as they are answered, from
    ``clients`` connections (run in a process of their own, so that the probe's latency is
    the server's, not the attackers' event loop's)."""

    def __init__(self, base: str, admin: str, seconds: float, distinct: bool) -> None:
        self.base = base
        self.admin = admin
        self.seconds = seconds
        self.distinct = distinct
        self.statuses: dict[str, int] = {}
        self.retry_after_missing = 0

    async def run(self, clients: int, ready: Callable[[], None]) -> None:
        import httpx

        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=self.base, timeout=30, limits=limits) as http:
            ready()
            stop = time.monotonic() + self.seconds
            await asyncio.gather(*(self._client(http, n, stop) for n in range(clients)))

    async def _client(self, http: Any, n: int, stop: float) -> None:
        """Three sprayed names, then the Admin's, and again."""
        import httpx

        headers = {"X-Forwarded-For": f"10.66.{n // 250}.{n % 250 + 1}"} if self.distinct else {}
        k = 0
        while time.monotonic() < stop:
            k += 1
            name = self.admin if k % 4 == 0 else f"spray-{n}-{k}"
            try:
                answer = await http.post(
                    "/api/v1/auth/login",
                    json={"username": name, "password": f"guess {n} {k}"},
                    headers=headers,
                )
            except httpx.HTTPError as exc:
                key = type(exc).__name__
            else:
                key = str(answer.status_code)
                refused = answer.status_code in (429, 503)
                self.retry_after_missing += refused and not answer.headers.get("retry-after")
            self.statuses[key] = self.statuses.get(key, 0) + 1


def _attack_process(
    base: str, admin: str, clients: int, seconds: float, distinct: bool, out: Any
) -> None:
    """A process's entry: say when it starts, run the attack, send back the statuses (and
    the refusals without a Retry-After)."""
    attack = _Attack(base, admin, seconds, distinct)
    asyncio.run(attack.run(clients, lambda: out.send("ready")))
    out.send((attack.statuses, attack.retry_after_missing))
    out.close()


def _receive(pipe: Any, timeout: float) -> Any:
    if not pipe.poll(timeout):
        raise RuntimeError(f"the bench's attackers did not answer within {timeout:.0f} s")
    return pipe.recv()


class _Probe:
    """The normal authenticated call, every 50 ms, and the server's memory."""

    def __init__(self, http: Any, bearer: dict[str, str], server: psutil.Process) -> None:
        self.http = http
        self.bearer = bearer
        self.server = server
        self.errors = 0
        self.peak_rss = server.memory_info().rss

    async def calls(self, until: float, into: list[float]) -> None:
        import httpx

        while time.monotonic() < until:
            t0 = time.perf_counter()
            try:
                answer = await self.http.get(PROBE_PATH, headers=self.bearer)
            except httpx.HTTPError:
                self.errors += 1
            else:
                self.errors += answer.status_code != 200
                into.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(FLOOD_PROBE_INTERVAL)

    async def memory(self, until: float) -> None:
        while time.monotonic() < until:
            with contextlib.suppress(psutil.Error):
                self.peak_rss = max(self.peak_rss, self.server.memory_info().rss)
            await asyncio.sleep(0.25)


async def run_login_flood(
    mode: str = "embedded",
    clients: int = 48,
    seconds: float = 20.0,
    *,
    baseline_seconds: float = 3.0,
    distinct_addresses: bool = True,
) -> dict[str, Any]:
    """``clients`` attackers post wrong passwords to the login as fast as they are answered
    for ``seconds`` (each from an address of its own, sent as X-Forwarded-For, which the
    server believes from 127.0.0.1, its trusted proxy; or all from this host), spraying many
    user names and the bench Admin's; meanwhile a probe makes a normal authenticated API call
    every 50 ms. The probe's latency before and during the flood, the login answers by
    status, and the server's CPU and memory."""
    import multiprocessing

    import httpx

    admin, password = "bench-admin", secrets.token_urlsafe(24)
    async with (
        _server_process(mode, admin, password) as (base, server),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        login = await http.post(
            "/api/v1/auth/login", json={"username": admin, "password": password}
        )
        login.raise_for_status()
        bearer = {"Authorization": f"Bearer {login.json()['accessToken']}"}
        for _ in range(20):  # warm the probe's path
            await http.get(PROBE_PATH, headers=bearer)
        probe = _Probe(http, bearer, server)
        rss_before = probe.peak_rss
        baseline: list[float] = []
        await probe.calls(time.monotonic() + baseline_seconds, baseline)
        context = multiprocessing.get_context("spawn")
        receive, send = context.Pipe(duplex=False)
        args = (base, admin, clients, seconds, distinct_addresses, send)
        attackers = context.Process(target=_attack_process, args=args, daemon=True)
        attackers.start()
        await asyncio.to_thread(_receive, receive, 60)  # started
        during: list[float] = []
        cpu_before = server.cpu_times()
        started = time.perf_counter()
        stop = time.monotonic() + seconds
        await asyncio.gather(probe.calls(stop, during), probe.memory(stop))
        statuses, retry_after_missing = await asyncio.to_thread(_receive, receive, 60)
        elapsed = time.perf_counter() - started
        cpu_after = server.cpu_times()
        await asyncio.to_thread(attackers.join, 30)
        rss_after = server.memory_info().rss
    attempts = sum(statuses.values())
    return {
        "scenario": "login-flood",
        "mode": mode,
        "clients": clients,
        "seconds": seconds,
        "distinctAddresses": distinct_addresses,
        "probe": PROBE_PATH,
        "baseline": {**_percentiles(baseline), "calls": len(baseline)},
        "duringFlood": {**_percentiles(during), "calls": len(during)},
        "probeErrors": probe.errors,
        "loginAttempts": attempts,
        "loginsPerSecond": round(attempts / elapsed, 1) if elapsed > 0 else None,
        "loginStatuses": dict(sorted(statuses.items())),
        "count429": statuses.get("429", 0),
        "count503": statuses.get("503", 0),
        "count5xxOther": sum(
            n for key, n in statuses.items() if key.startswith("5") and key != "503"
        ),
        "refusedWithoutRetryAfter": retry_after_missing,
        "serverCpuPercent": round(
            100 * (sum(cpu_after[:2]) - sum(cpu_before[:2])) / elapsed if elapsed > 0 else 0, 1
        ),
        "serverRssMiB": {
            "before": round(rss_before / 2**20, 1),
            "peak": round(probe.peak_rss / 2**20, 1),
            "after": round(rss_after / 2**20, 1),
        },
        "environment": _environment(),
    }
