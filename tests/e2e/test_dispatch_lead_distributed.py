"""The dispatch lead in the distributed mode (PostgreSQL, Redis, RabbitMQ; a `rota server` and
a `rota worker` process): an occurrence is committed and sent ahead of its due time, the
worker holds it and starts it at (not before) its due instant; a job disabled during the
hold never starts."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import HERE, Session, free_port, wait_until
from .distributed import Proc, distributed_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

LEAD = 3.0


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_worker_holds_an_occurrence_sent_ahead_and_starts_it_when_due(
    distributed_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    env = {**distributed_env, "ROTA_SCHEDULER__DISPATCH_LEAD_SECONDS": str(LEAD)}
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

        def workers_up() -> bool:
            r = httpx.get(f"{base}/workers", headers=auth, timeout=10)
            return "e2e" in r.text

        wait_until(workers_up, 30, "the worker did not register")

        def one_time_job() -> tuple[dict[str, Any], datetime]:
            due = datetime.now(UTC) + timedelta(seconds=LEAD + 2)
            body = {"jobType": "e2e.tick", "workerId": "e2e", "executeAt": due.isoformat()}
            r = httpx.post(f"{base}/jobs", headers=auth, json=body, timeout=10)
            assert r.status_code == 201, r.text
            return r.json(), due

        def sent_ahead(job: dict[str, Any]) -> dict[str, Any]:
            found: list[dict[str, Any]] = []

            def sent() -> bool:
                r = httpx.get(
                    f"{base}/occurrences", params={"jobId": job["id"]}, headers=auth, timeout=10
                )
                for item in r.json()["items"]:
                    one = httpx.get(f"{base}/occurrences/{item['id']}", headers=auth, timeout=10)
                    if one.json()["dispatchedAt"] is not None:
                        found.append(one.json())
                return bool(found)

            wait_until(sent, 20, f"no occurrence sent ahead; logs: {logs()}")
            occ = found[0]
            assert datetime.now(UTC) < _time(occ["scheduledFor"]), "too slow to see the hold"
            assert occ["status"] == 0  # Queued: held by the worker
            return occ

        def final(occ_id: str) -> dict[str, Any]:
            r = httpx.get(f"{base}/occurrences/{occ_id}", headers=auth, timeout=10)
            return dict(r.json())

        # Sent ahead, started at (not before) its due instant.
        job, due = one_time_job()
        occ = sent_ahead(job)
        assert _time(occ["dispatchedAt"]) < _time(occ["scheduledFor"])
        wait_until(lambda: final(occ["id"])["status"] == 2, 30, f"not completed; {logs()}")
        done = final(occ["id"])
        start, scheduled = _time(done["startTime"]), _time(done["scheduledFor"])
        assert start >= scheduled
        assert start - scheduled < timedelta(seconds=1)  # generous: the machine is shared

        # Disabled during the hold: Cancelled, never started.
        job, due = one_time_job()
        occ = sent_ahead(job)
        r = httpx.patch(
            f"{base}/jobs/{job['id']}", headers=auth, json={"isActive": False}, timeout=10
        )
        assert r.status_code == 200, r.text
        wait_until(lambda: final(occ["id"])["status"] == 4, 15, f"not cancelled; {logs()}")
        wait_until(lambda: datetime.now(UTC) > due + timedelta(seconds=1), 15, "due time")
        cancelled = final(occ["id"])
        assert cancelled["status"] == 4
        assert cancelled["startTime"] is None
        assert cancelled["exception"] == "cancelled: job disabled before its due time"
    finally:
        for proc in procs:
            proc.stop()
