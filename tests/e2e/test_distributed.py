"""The distributed mode as an operator runs it: `rota migrate`, a `rota server` and a
`rota worker` process on the real PostgreSQL, Redis and RabbitMQ of this machine."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import HERE, free_port, wait_until

pytestmark = pytest.mark.slow

PG = "postgresql://postgres@127.0.0.1:5432/{db}"
REDIS = "redis://127.0.0.1:6379/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672/{vhost}"


def _service_missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"service unavailable in CI: {reason}")
    pytest.skip(reason)


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


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


@pytest.fixture
def distributed_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    name = f"rota_e2e_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_pg(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # asyncpg raises its own error types, not OSError
        _service_missing(f"PostgreSQL: {exc}")
    try:
        _run("rabbitmqctl", "add_vhost", name)
        _run("rabbitmqctl", "set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    except (OSError, subprocess.SubprocessError) as exc:
        asyncio.run(_pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        _service_missing(f"RabbitMQ: {exc}")
    env = {
        **os.environ,
        "ROTA_DATABASE_URL": PG.format(db=name),
        "ROTA_REDIS_URL": REDIS,
        "ROTA_AMQP_URL": AMQP.format(vhost=name),
        "ROTA_NAME_PREFIX": name.replace("_", "-"),
        "ROTA_DATA_DIR": str(tmp_path / "data"),
        "ROTA_SCHEDULER__SWEEPER_INTERVAL_SECONDS": "1",
    }
    try:
        yield env
    finally:
        asyncio.run(_redis_cleanup(env["ROTA_NAME_PREFIX"]))
        subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, timeout=60)
        asyncio.run(_pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rota", *args], env=env, stdout=out, stderr=out
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def test_server_and_worker_processes_run_a_cron_job(
    distributed_env: dict[str, str], tmp_path: Path
) -> None:
    env = distributed_env
    subprocess.run([sys.executable, "-m", "rota", "migrate"], env=env, check=True, timeout=120)
    port = free_port()
    base = f"http://127.0.0.1:{port}/api/v1"
    procs = [
        Proc(["server", "--port", str(port)], env, tmp_path / "server.log"),
        Proc(
            ["worker", str(HERE / "jobs.py"), "--worker-id", "e2e", "--concurrency", "4"],
            env,
            tmp_path / "worker.log",
        ),
    ]

    def logs() -> str:
        return "\n".join(p.log.read_text()[-3000:] for p in procs)

    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{base}/health/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 30, "server not ready")
        job = httpx.post(
            f"{base}/jobs",
            json={"jobType": "e2e.tick", "workerId": "e2e", "cronExpression": "*/1 * * * * *"},
            timeout=10,
        ).json()

        def occurrences() -> list[dict[str, Any]]:
            r = httpx.get(f"{base}/occurrences", params={"jobId": job["id"]}, timeout=10)
            return list(r.json()["items"])

        def three_completed() -> bool:
            return sum(o["status"] == 2 for o in occurrences()) >= 3

        try:
            wait_until(three_completed, 40, "no completed fires")
        except AssertionError:
            seen = [(o["status"], o["skipReason"]) for o in occurrences()][:10]
            raise AssertionError(f"occurrences {seen}; logs: {logs()}") from None
        done = next(o for o in occurrences() if o["status"] == 2)
        assert done["instanceId"].startswith("e2e-")
        lines = httpx.get(f"{base}/occurrences/{done['id']}/logs", timeout=10).json()["items"]
        assert any("tick" in line["message"] for line in lines)
    finally:
        for proc in procs:
            proc.stop()
