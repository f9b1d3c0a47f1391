"""The dashboard in a real Chromium: a ``rota dev`` server on a free port, driven by Playwright.

Debian's ``chromium`` is used through ``executable_path`` (Playwright cannot download browsers
here; ``.ci/run`` installs the package when it is missing). Screenshots go to
``$ROTA_ARTIFACTS`` or ``tests/browser/artifacts``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ADMIN = ("admin", "browser-Admin-pass-2026!")
VIEWER = ("viewer", "browser-Viewer-pass-2026!")
OPERATOR = ("operator", "browser-Operator-pass-2026!")

expect.set_options(timeout=15_000)


def _chromium() -> str:
    """Debian's chromium; without it the browser tests skip on a developer machine and fail
    under CI (whose script installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "the browser tests need Debian's chromium: apt-get install chromium"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, user: tuple[str, str]) -> str:
        if user[0] not in self.tokens:
            answer = httpx.post(
                f"{self.url}/api/v1/auth/login",
                json={"username": user[0], "password": user[1]},
                timeout=10,
            )
            answer.raise_for_status()
            self.tokens[user[0]] = answer.json()["accessToken"]
        return self.tokens[user[0]]

    def api(self, user: tuple[str, str] = ADMIN) -> httpx.Client:
        token = self.token(user)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=10)

    def wait_for(self, what: str, check: Any, timeout: float = 20.0) -> Any:
        """Poll ``check()`` until it returns something truthy (or fail after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")


def artifacts_dir(*parts: str) -> Path:
    """Where screenshots go: ``$ROTA_ARTIFACTS`` or ``tests/browser/artifacts`` (and ``parts``
    below it), created."""
    where = Path(os.environ.get("ROTA_ARTIFACTS") or ROOT / "tests" / "browser" / "artifacts")
    where = where.joinpath(*parts)
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture(scope="session")
def artifacts() -> Path:
    return artifacts_dir()


def rota_env(**extra: str) -> dict[str, str]:
    """The environment of the Rota processes the browser tests start."""
    return {
        **os.environ,
        "ROTA_ADMIN_USER": ADMIN[0],
        "ROTA_ADMIN_PASSWORD": ADMIN[1],
        "ROTA_EVENT_LOOP": "asyncio",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **extra,
    }


@contextmanager
def rota_process(
    args: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m rota ARGS…`` with its output in ``log``; SIGTERM (then SIGKILL) on exit."""
    with log.open("wb") as out:
        command = [sys.executable, "-m", "rota", *args]
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def wait_live(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Until ``url`` answers its liveness check (fails with the log if the process exits)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/api/v1/health/live", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{process.args} did not start: {log.read_text()}")
        time.sleep(0.1)


def signed_in_server(url: str) -> Server:
    """The running server, with the Viewer and the Operator created by the Admin."""
    running = Server(url=url)
    with running.api(ADMIN) as api:
        for name, password in (VIEWER, OPERATOR):
            answer = api.post("/users", json={"username": name, "password": password, "role": name})
            assert answer.status_code == 201, answer.text
    return running


# Module scope, not session: Playwright's sync API keeps an event loop running in this thread
# while it is open, which the asyncio tests that follow in the same run could not start under.
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``rota dev`` (embedded: SQLite, in-process broker and worker) with the test jobs."""
    data = tmp_path_factory.mktemp("rota-browser")
    port = _free_port()
    args = ["dev", "--no-demo", "--port", str(port), "--data-dir", str(data)]
    args += ["--jobs", "tests.browser.jobs", "--log-level", "warning"]
    url = f"http://127.0.0.1:{port}"
    with rota_process(args, rota_env(), data / "server.log") as process:
        wait_live(process, url, data / "server.log")
        yield signed_in_server(url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def sign_in(page: Page, server: Server, user: tuple[str, str]) -> None:
    """Open the dashboard signed in as ``user`` (through the login form)."""
    page.goto(f"{server.url}/")
    expect(page).to_have_url(f"{server.url}/login")
    page.get_by_label("Username").fill(user[0])
    page.get_by_label("Password").fill(user[1])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("user")).to_contain_text(user[0])
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


VIEWPORT: Final = {"width": 1280, "height": 860}


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Page]:
    """A fresh browser context: nobody signed in."""
    context = browser.new_context(viewport=VIEWPORT)
    opened = context.new_page()
    yield opened
    context.close()


@pytest.fixture(scope="module")
def admin_state(browser: Browser, server: Server) -> Any:
    """The Admin's cookies after one sign-in through the form (reused: argon2 is slow)."""
    context = browser.new_context(viewport=VIEWPORT)
    sign_in(context.new_page(), server, ADMIN)
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture
def admin_page(browser: Browser, admin_state: Any) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT, storage_state=admin_state)
    opened = context.new_page()
    yield opened
    context.close()
