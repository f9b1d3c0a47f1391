"""The FastAPI example (``examples/fastapi_app``) as a real uvicorn process, its Rota mounted
at ``/rota``, in Chromium: the dashboard loads under the prefix (every request the pages make
stays under it and none fails), the login form signs in, the live parts follow the event
stream, and an action sent by the page's script reaches the API (``docs/embedding.md``)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Request, Response, expect

from tests.browser.conftest import (
    ADMIN,
    ROOT,
    VIEWPORT,
    Server,
    _free_port,
    rota_env,
)
from tests.browser.test_dashboard import MARK, STILL_MARKED

pytestmark = pytest.mark.browser

EXAMPLE = ROOT / "examples" / "fastapi_app"
PREFIX = "/rota"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``uvicorn app:app`` in the example's folder, as its docstring says to run it."""
    data = tmp_path_factory.mktemp("rota-fastapi-example")
    port = _free_port()
    env = rota_env(ROTA_DATA_DIR=str(data), ROTA_ENVIRONMENT="development")
    log = data / "uvicorn.log"
    command = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=EXAMPLE, env=env, stdout=out, stderr=out)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_live(process, f"{url}{PREFIX}", log)
            yield Server(url=f"{url}{PREFIX}")
        finally:
            process.terminate()
            process.wait(15)
    # a clean stop through the lifespan (uvicorn then ends by the signal it was sent)
    output = log.read_text()
    assert "Application shutdown complete" in output, output
    assert "Traceback" not in output, output


def _wait_live(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    server = Server(url=url)

    def live() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the example did not start: {log.read_text()}")
        try:
            return httpx.get(f"{url}/api/v1/health/live", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    server.wait_for("the example to serve", live, timeout=30)


@pytest.fixture
def page(browser: Browser, example: Server) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)
    opened = context.new_page()
    yield opened
    context.close()


def _watch(page: Page) -> tuple[list[str], list[str]]:
    """The paths the page asked for outside the prefix, and the answers that failed."""
    outside: list[str] = []
    failed: list[str] = []

    def answered(response: Response) -> None:
        path = urlsplit(response.url).path
        if not path.startswith(f"{PREFIX}/"):
            outside.append(response.url)
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page.on("response", answered)

    def broken(request: Request) -> None:
        # a page left while its event stream or a fragment is open cancels them: not a failure
        if request.failure != "net::ERR_ABORTED":
            failed.append(f"{request.failure} {request.url}")

    page.on("requestfailed", broken)
    return outside, failed


def test_the_host_app_answers_beside_rota(example: Server) -> None:
    host = example.url.removesuffix(PREFIX)
    assert httpx.get(f"{host}/", timeout=5).json() == {"app": "my app", "scheduler": "/rota/"}


def test_the_dashboard_under_a_prefix(page: Page, example: Server) -> None:
    outside, failed = _watch(page)
    page.goto(f"{example.url}/")
    expect(page).to_have_url(f"{example.url}/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("user")).to_contain_text(ADMIN[0])
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    # the job the example's code declares, live: its runs arrive over the event stream
    page.get_by_role("navigation").get_by_role("link", name="Jobs").click()
    expect(page).to_have_url(f"{example.url}/jobs")
    page.get_by_role("link", name="example.heartbeat").first.click()
    expect(page).to_have_url(re.compile(rf"{PREFIX}/jobs/[0-9a-f-]{{36}}$"))
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")
    page.evaluate(MARK)
    rows = page.locator("#job-occurrences [data-testid=occurrence-row]")
    seen = rows.count()
    expect(rows.nth(seen + 1)).to_be_visible()  # two more runs, the page not reloaded
    assert page.evaluate(STILL_MARKED), "the page was reloaded"

    # an action of the page's script: run a job now, then open its execution
    with example.api() as api:
        created = api.post(
            "/jobs",
            json={"displayName": "Sales report", "jobType": "example.report",
                  "jobData": {"kind": "sales", "pages": 3}, "executeAt": "2099-01-01T00:00:00Z"},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        assert created.headers["location"].startswith(f"{PREFIX}/api/v1/jobs/")
    page.goto(f"{example.url}/jobs/{created.json()['id']}")
    page.get_by_test_id("trigger").click()
    page.get_by_test_id("flash-link").click()
    expect(page).to_have_url(re.compile(rf"{PREFIX}/executions/[0-9a-f-]{{36}}$"))
    expect(page.locator("#occurrence-summary .status-line")).to_contain_text("Completed")
    expect(page.get_by_test_id("log").locator("li")).to_have_count(3)

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{example.url}/login")
    assert outside == []
    assert failed == []


def test_the_api_docs_under_a_prefix(page: Page, example: Server) -> None:
    outside, failed = _watch(page)
    page.goto(f"{example.url}/docs")
    jobs = page.locator(
        ".opblock", has=page.locator(".opblock-summary-path[data-path='/api/v1/jobs']")
    )
    expect(jobs.locator(".opblock-summary-method", has_text="POST")).to_be_visible()
    expect(page.locator(".servers select")).to_contain_text(PREFIX)  # Try it out: /rota/api/v1
    assert outside == []
    assert failed == []
