"""The distributed mode as an operator runs it: `rota migrate`, a `rota server` and a
`rota worker` process on the real PostgreSQL, Redis and RabbitMQ of this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from .conftest import HERE, Session, free_port, wait_until
from .distributed import Proc, empty_distributed_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def test_server_and_worker_processes_run_a_cron_job(
    empty_distributed_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    env = empty_distributed_env  # `rota migrate` below makes its schema, as an operator does
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
        auth = Session().headers(base)
        job = httpx.post(
            f"{base}/jobs",
            headers=auth,
            json={"jobType": "e2e.tick", "workerId": "e2e", "cronExpression": "*/1 * * * * *"},
            timeout=10,
        ).json()

        def occurrences() -> list[dict[str, Any]]:
            r = httpx.get(
                f"{base}/occurrences", params={"jobId": job["id"]}, headers=auth, timeout=10
            )
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
        logs_url = f"{base}/occurrences/{done['id']}/logs"
        lines = httpx.get(logs_url, headers=auth, timeout=10).json()["items"]
        assert any("tick" in line["message"] for line in lines)

        # The changes reach the event stream (through Redis), replayed from the feed's start.
        query = {"lastEventId": "0-0-0", "types": "occurrence.updated", "jobId": job["id"]}
        timeout = httpx.Timeout(10, read=10)
        with httpx.stream(
            "GET", f"{base}/events", params=query, headers=auth, timeout=timeout
        ) as stream:
            assert stream.status_code == 200
            data = next(
                orjson.loads(line[5:])
                for line in stream.iter_lines()
                if line.startswith("data:") and '"status":2' in line
            )
        assert data["jobId"] == job["id"]
        assert data["instanceId"].startswith("e2e-")
    finally:
        for proc in procs:
            proc.stop()
