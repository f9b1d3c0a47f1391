"""The distributed mode with real processes: a fresh PostgreSQL database and name prefix (its
queues in the session's RabbitMQ vhost, its Redis keys) per test, and helpers to run
``rota server`` / ``rota worker`` processes, kill them and read the result through the API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import AUTH_ENV, HERE, Session, all_occurrences, free_port, wait_until

PG = "postgresql://postgres@127.0.0.1:5432/{db}"
REDIS_PORT = os.environ.get("ROTA_TEST_REDIS_PORT", "6379")
"""The Redis the e2e tests use (a private one for the fault tests that flush or stop it)."""
REDIS = f"redis://127.0.0.1:{REDIS_PORT}/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672/{vhost}"

QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED, TIMED_OUT, UNKNOWN, SKIPPED = range(8)

CANCELLED_AHEAD = frozenset(
    f"cancelled: job {what} before its due time" for what in ("disabled", "deleted")
)


def cancelled_ahead(status: int, exception: str | None) -> bool:
    """A fire sent ahead of its due time (the dispatch lead) and cancelled because the test
    disabled or deleted its job before it came due: never started, recorded, not lost."""
    return status == CANCELLED and exception in CANCELLED_AHEAD


def service_missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"service unavailable in CI: {reason}")
    pytest.skip(reason)


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def _in_thread(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` to its end on a loop of its own thread (callers may be inside one:
    Playwright's sync API keeps a loop running in the browser tests' thread)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result()


async def _pg(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres", timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _redis_cleanup(prefix: str) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


MIGRATED = "E2E_MIGRATED"
"""Set (``"1"``) in a deployment's environment whose database is a clone of the session's
migrated template: :class:`Cluster` then runs no ``rota migrate``."""


@contextmanager
def fresh_deployment(
    data_dir: Path, template: str | None = None, vhost: str | None = None
) -> Iterator[dict[str, str]]:
    """Environment variables for Rota processes on a fresh PostgreSQL database (empty, or a
    clone of ``template``, a database migrated to head), RabbitMQ vhost (``vhost``, shared,
    or one of its own) and Redis key prefix, all removed again on exit (a shared vhost is
    the session's to delete; the deployment's queues in it have names of their own)."""
    name = f"rota_e2e_{uuid.uuid4().hex[:10]}"
    clone = f' TEMPLATE "{template}"' if template else ""
    try:
        _in_thread(_pg(f'CREATE DATABASE "{name}"{clone}'))
    except Exception as exc:  # asyncpg raises its own error types, not OSError
        service_missing(f"PostgreSQL: {exc}")
    own_vhost = vhost is None
    vhost = vhost or name
    if own_vhost:
        try:
            _run("rabbitmqctl", "add_vhost", vhost)
            _run("rabbitmqctl", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        except (OSError, subprocess.SubprocessError) as exc:
            _in_thread(_pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            service_missing(f"RabbitMQ: {exc}")
    env = {
        **os.environ,
        **AUTH_ENV,
        "ROTA_DATABASE_URL": PG.format(db=name),
        "ROTA_REDIS_URL": REDIS,
        "ROTA_AMQP_URL": AMQP.format(vhost=vhost),
        "ROTA_NAME_PREFIX": name.replace("_", "-"),
        "ROTA_DATA_DIR": str(data_dir),
        "ROTA_SCHEDULER__SWEEPER_INTERVAL_SECONDS": "1",
        "ROTA_VHOST": vhost,
    }
    if template:
        env[MIGRATED] = "1"
    try:
        yield env
    finally:
        _in_thread(_redis_cleanup(env["ROTA_NAME_PREFIX"]))
        if own_vhost:
            subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)
        _in_thread(_pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def distributed_env(tmp_path: Path, pg_template: str, e2e_vhost: str) -> Iterator[dict[str, str]]:
    """A fresh deployment's environment for one test, its database already migrated (a clone
    of the session's template: a ``rota migrate`` process costs seconds a test), in the
    session's vhost."""
    with fresh_deployment(tmp_path / "data", pg_template, e2e_vhost) as env:
        yield env


@pytest.fixture
def empty_distributed_env(tmp_path: Path, e2e_vhost: str) -> Iterator[dict[str, str]]:
    """A fresh deployment's environment on an empty database, for a test that migrates it as
    an operator does."""
    with fresh_deployment(tmp_path / "data", vhost=e2e_vhost) as env:
        yield env


class Proc:
    """One ``rota …`` process with its log file."""

    def __init__(
        self, args: list[str], env: dict[str, str], log: Path, cwd: Path | None = None
    ) -> None:
        self.args = args
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rota", *args], env=env, stdout=out, stderr=out, cwd=cwd
            )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float) -> int:
        """SIGTERM; the exit code (fails if the stop takes longer than ``timeout``)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.log.name}\n{self.log.read_text(errors='replace')[-chars:]}"


class Server(Proc):
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/api/v1"
        super().__init__(["server", "--port", str(self.port)], env, log)

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.base}/health/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


class Cluster:
    """Servers and workers of one deployment (one database, vhost and prefix)."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self.session = Session()
        if env.get(MIGRATED) != "1":
            subprocess.run(
                [sys.executable, "-m", "rota", "migrate"], env=env, check=True, timeout=120,
                capture_output=True,
            )  # fmt: skip

    def server(self, name: str, **env: str) -> Server:
        server = Server({**self.env, **env}, self.log_dir / f"{name}.log")
        self.procs.append(server)
        wait_until(server.ready, 30, f"server {name} not ready: {self.logs()}")
        return server

    def worker(
        self,
        name: str,
        *,
        worker_id: str = "e2e",
        concurrency: int = 4,
        grace: float | None = None,
        jobs: Path = HERE / "jobs.py",
    ) -> Proc:
        args = ["worker", str(jobs), "--worker-id", worker_id]
        args += ["--concurrency", str(concurrency)]
        if grace is not None:
            args += ["--grace", str(grace)]
        env = {**self.env, "ROTA_DATA_DIR": str(self.log_dir / f"data-{name}")}
        proc = Proc(args, env, self.log_dir / f"{name}.log")
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.procs)

    # --- the API of any live server ---------------------------------------------------

    @property
    def base(self) -> str:
        for proc in self.procs:
            if isinstance(proc, Server) and proc.alive:
                return proc.base
        raise AssertionError("no live server")

    def api(self, method: str, path: str, **kw: Any) -> Any:
        base = self.base
        r = self.session.request(method, f"{base}{path}", base, timeout=15, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        return r.json() if r.content else None

    def occurrences(self, job_id: str) -> list[dict[str, Any]]:
        return all_occurrences(self.api, job_id)

    def logs_of(self, occurrence_id: str) -> list[dict[str, Any]]:
        return list(
            self.api("GET", f"/occurrences/{occurrence_id}/logs", params={"limit": 1000})["items"]
        )

    def worker_instances(self) -> list[str]:
        """Ids of the live worker instances (empty while the API cannot say)."""
        try:
            groups = self.api("GET", "/workers")["items"]
        except (AssertionError, httpx.HTTPError):
            return []
        return [i["instanceId"] for g in groups for i in g["instances"]]


@pytest.fixture
def cluster(distributed_env: dict[str, str], tmp_path: Path) -> Iterator[Cluster]:
    logs = tmp_path / "logs"
    logs.mkdir()
    c = Cluster(distributed_env, logs)
    try:
        yield c
    finally:
        c.stop()


def settle(cluster: Cluster, job_ids: list[str], timeout: float) -> None:
    """Wait until every one of the jobs has fired and none of its occurrences is Queued or
    Running (a job due later has no occurrence yet: that is not settled)."""

    def settled() -> bool:
        for j in job_ids:
            runs = cluster.occurrences(j)
            if not runs or any(o["status"] in (QUEUED, RUNNING) for o in runs):
                return False
        return True

    wait_until(settled, timeout, f"occurrences stayed Queued/Running: {cluster.logs()}")


def wait_seconds(seconds: float) -> None:
    """Let wall-clock time pass while the cluster works (the schedule itself is under test)."""
    time.sleep(seconds)
