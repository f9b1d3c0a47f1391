"""The Django example (``examples/django_project``) as real processes on the distributed
services: ``uvicorn mysite.asgi:application`` serves Django at ``/`` and Rota at ``/rota``,
``python manage.py rota_worker`` runs the project's job with Django set up, end to end
(``docs/embedding.md``)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

import rota

from .conftest import ADMIN_PASSWORD, ADMIN_USER, Session, free_port, wait_until
from .distributed import COMPLETED, distributed_env  # noqa: F401

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_project"


@contextmanager
def process(
    command: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` in the example's folder, its output in ``log``; ended on exit if it runs."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=EXAMPLE, env=env, stdout=out, stderr=out)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def enqueue(url: str) -> tuple[Any, str]:
    """Through the Python client, as the project's code would: the run's result."""
    async with rota.Client(url, username=ADMIN_USER, password=ADMIN_PASSWORD) as client:
        handle = await client.enqueue("reports.summary", {"week": 48}, display_name="Week 48")
        return await handle.result(timeout=30), str(handle.job_id)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_django_serves_rota_and_its_worker_command_runs_a_job(
    distributed_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    env = {**distributed_env, "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    port = free_port()
    site = f"http://127.0.0.1:{port}"
    api = f"{site}/rota/api/v1"
    web_log, worker_log = tmp_path / "web.log", tmp_path / "worker.log"
    web_command = [sys.executable, "-m", "uvicorn", "mysite.asgi:application", "--port", str(port)]
    worker_command = [sys.executable, "manage.py", "rota_worker", "--worker-id", "django-example"]
    with process(web_command, env, web_log) as web:
        wait_until(
            lambda: answers(f"{api}/health/ready") or web.poll() is not None,
            30,
            "the Django site to serve Rota",
        )
        assert web.poll() is None, web_log.read_text()
        assert httpx.get(f"{site}/", timeout=5).json() == {"app": "django", "scheduler": "/rota/"}
        page = httpx.get(f"{site}/rota/", headers={"Accept": "text/html"}, timeout=5)
        assert page.status_code == 303
        assert page.headers["location"].startswith("/rota/ui/session/resume?next=")

        session = Session()

        def call(method: str, path: str, **kw: Any) -> Any:
            answer = session.request(method, f"{api}{path}", api, timeout=10, **kw)
            assert answer.status_code < 300, answer.text
            return answer.json()

        with process(worker_command, env, worker_log) as worker:
            wait_until(
                lambda: (
                    "django-example" in str(call("GET", "/workers")) or worker.poll() is not None
                ),
                30,
                "the worker to register",
            )
            assert worker.poll() is None, worker_log.read_text()
            # the application's side: rota.Client at the site's /rota, the job type by name
            result, job_id = asyncio.run(enqueue(f"{site}/rota"))
            assert result == "Weekly numbers, week 48"  # the project's Django setting
            (run,) = call("GET", "/occurrences", params={"jobId": job_id})["items"]
            assert run["status"] == COMPLETED, run
            assert run["workerId"] == "django-example"
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, worker_log.read_text()
        assert "Rota worker stopped." in worker_log.read_text()
        web.send_signal(signal.SIGTERM)
        web.wait(30)
    assert "Application shutdown complete" in web_log.read_text()
    assert "Traceback" not in web_log.read_text()
