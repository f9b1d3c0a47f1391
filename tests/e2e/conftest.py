"""Real ``rota dev`` processes for end-to-end tests."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).parent
ADMIN_USER = "e2e-admin"
ADMIN_PASSWORD = "e2e admin passphrase"
AUTH_ENV = {
    "ROTA_ADMIN_USER": ADMIN_USER,
    "ROTA_ADMIN_PASSWORD": ADMIN_PASSWORD,
    # One key for every process of a test session: a token works on any server.
    "ROTA_AUTH_SECRET": secrets.token_urlsafe(48),
}
"""The environment every Rota process of the e2e tests gets: the first admin and the key."""


class Session:
    """Signs in to a Rota API (``base`` ends in ``/api/v1``) as the e2e admin and sends
    requests with the access token, signing in again when one is refused (expired, or a
    server restarted with another key)."""

    def __init__(self) -> None:
        self._token: str | None = None

    def headers(self, base: str) -> dict[str, str]:
        if self._token is None:
            r = httpx.post(
                f"{base}/auth/login",
                json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
                timeout=10,
            )
            assert r.status_code == 200, f"login: {r.status_code} {r.text}"
            self._token = str(r.json()["accessToken"])
        return {"Authorization": f"Bearer {self._token}"}

    def request(self, method: str, url: str, base: str, **kw: Any) -> httpx.Response:
        r = httpx.request(method, url, headers=self.headers(base), **kw)
        if r.status_code == 401:
            self._token = None
            r = httpx.request(method, url, headers=self.headers(base), **kw)
        return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def all_occurrences(api: Callable[..., Any], job_id: str) -> list[dict[str, Any]]:
    """Every occurrence of a job, through the API's cursor pages (``api(method, path, **kw)``
    returns the decoded body)."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"jobId": job_id, "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = api("GET", "/occurrences", params=params)
        items += page["items"]
        cursor = page.get("nextCursor")
        if not cursor:
            return items


class RotaProcess:
    """A ``rota dev`` process on a data dir; start, kill -9, restart."""

    def __init__(self, data_dir: Path, log_dir: Path, jobs: Path = HERE / "jobs.py") -> None:
        self.data_dir = data_dir
        self.jobs = jobs
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.session = Session()

    def start(self, **env_overrides: str) -> None:
        self.starts += 1
        log = (self.log_dir / f"rota-{self.starts}.log").open("wb")
        cmd = [
            sys.executable, "-m", "rota", "dev", "--no-demo",
            "--jobs", str(self.jobs),
            "--data-dir", str(self.data_dir), "--port", str(self.port),
        ]  # fmt: skip
        env = {
            **os.environ,
            **AUTH_ENV,
            "ROTA_SCHEDULER__SWEEPER_INTERVAL_SECONDS": "1",
            **env_overrides,
        }
        with log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"rota exited with {self.proc.returncode}: {self.logs()}")
            try:
                if httpx.get(f"{self.base}/api/v1/health/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"rota did not become ready: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(self.log_dir.glob("rota-*.log")))

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float) -> int:
        """SIGTERM; returns the exit code (fails if it takes longer than ``timeout``)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        base = f"{self.base}/api/v1"
        r = self.session.request(method, f"{base}{path}", base, timeout=10, **kw)
        assert r.status_code < 300, r.text
        return r.json()

    def occurrences(self, job_id: str) -> list[dict[str, Any]]:
        return all_occurrences(self.api, job_id)


@pytest.fixture
def rota_process(tmp_path: Path) -> Iterator[RotaProcess]:
    logs = tmp_path / "logs"
    logs.mkdir()
    proc = RotaProcess(tmp_path / "data", logs)
    try:
        yield proc
    finally:
        proc.stop()


def wait_until(predicate: Any, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(message)


@pytest.fixture(scope="session")
def e2e_vhost() -> Iterator[str]:
    """One RabbitMQ vhost for the session's distributed deployments, each under a name prefix
    of its own inside it (a vhost per test cost about 2.5 s of ``rabbitmqctl``); deleted, with
    whatever queues the tests left, at the end."""
    from .distributed import service_missing

    name = f"rota-e2e-{secrets.token_hex(5)}"
    try:
        for args in (("add_vhost", name), ("set_permissions", "-p", name, "guest", *[".*"] * 3)):
            subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        service_missing(f"RabbitMQ: {exc}")
    try:
        yield name
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, timeout=60)


# --- recovery times of the fault tests (tests/e2e/recovery.py): fixture and summary hook -----
from .recovery import pytest_terminal_summary, recovery  # noqa: E402, F401
