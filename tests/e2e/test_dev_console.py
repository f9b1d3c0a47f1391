"""``rota dev``'s console as a user sees it: a taken port is a clear error before anything
runs; readable lines, one per finished execution, the REST API calls but not the dashboard's
own requests."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import AUTH_ENV, HERE, free_port, wait_until

ROOT = HERE.parents[1]
TEXT_LINE = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3} (?P<level>[A-Z]+) +(?P<source>[\w.]+): (?P<rest>.*)$"
)
FINISHED = re.compile(r"^Completed in \d+ ms \[occurrence_id=(?P<occ>[0-9a-f-]{36}) attempt=1\]$")


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **AUTH_ENV, "PYTHONPATH": path, "ROTA_EVENT_LOOP": "asyncio"}


def _dev(*args: str) -> list[str]:
    return [sys.executable, "-m", "rota", "dev", "--no-demo", *args]


def test_a_taken_port_is_a_clear_error_before_anything_runs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            _dev("--port", str(port), "--data-dir", str(data)),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "--port" in done.stderr  # how to choose another
    assert "is running" not in done.stderr + done.stdout
    assert not data.exists()  # nothing migrated, no admin made


@pytest.mark.slow
def test_the_console_shows_readable_lines_finished_executions_and_api_calls(
    tmp_path: Path,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "console.log"
    args = _dev("--port", str(port), "--data-dir", str(tmp_path / "data"))
    args += ["--jobs", str(HERE / "console_jobs.py")]
    with log.open("wb") as out:
        process = subprocess.Popen(args, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    try:

        def finished() -> list[str]:
            return [line for line in _lines(log) if "console.tick: Completed in" in line]

        wait_until(lambda: len(finished()) >= 2, 30, f"no finished executions: {log.read_text()}")
        # the dashboard and its assets, the docs, a probe: not shown; an API call: shown
        for path in ("/", "/login", "/static/rota.css", "/docs", "/api/v1/health/live"):
            httpx.get(f"{base}{path}", timeout=5)
        assert httpx.get(f"{base}/api/v1/jobs?limit=1", timeout=5).status_code == 401
        wait_until(
            lambda: any(line.endswith("GET /api/v1/jobs 401") for line in _lines(log)),
            10,
            f"no line for the API call: {log.read_text()}",
        )
    finally:
        process.terminate()
        process.wait(20)
    lines = _lines(log)
    assert not [line for line in lines if line.startswith("{")], "JSON lines on the console"
    logged = [m for m in map(TEXT_LINE.match, lines) if m is not None]
    assert any(m["rest"] == "rota started" for m in logged)
    executions = [FINISHED.match(m["rest"]) for m in logged if m["source"] == "console.tick"]
    assert executions, lines
    assert all(executions), lines  # each: Completed in N ms, its occurrence, attempt 1
    occurrences = [m["occ"] for m in executions if m is not None]
    assert len(occurrences) == len(set(occurrences)), "one line per execution"
    access = [m["rest"] for m in logged if m["source"] == "uvicorn.access"]
    assert access == ["GET /api/v1/jobs 401"]
    assert not [line for line in lines if "Uvicorn running" in line or "HTTP Request" in line]


def _lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines()
