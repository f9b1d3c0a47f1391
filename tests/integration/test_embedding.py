"""``rota.Rota`` inside another ASGI app, mounted under ``/rota`` (``docs/embedding.md``): the
host's lifespan starts and stops it, a job runs in the embedded mode, and every URL the API
and the dashboard hand out (links, forms, redirects, ``Location``, cookie paths, the event
stream, the scripts' and the docs' assets) carries the prefix. Through ASGI, no browser (the
browser test is ``tests/browser/test_embedded_prefix.py``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import rota
from tests.integration.test_dashboard_pages import CSRF, PAGE, set_cookies

PREFIX = "/rota"
ADMIN = ("admin", "embedded-Admin-pass-2026!")

URL_ATTRIBUTE = re.compile(
    r'\s(href|src|action|hx-get|sse-connect|data-[a-z-]+)="'
    r'(?:(?:GET|POST|PUT|PATCH|DELETE) )?(/[^"]*)"'
)
"""An attribute holding one of the app's URLs (``data-api`` ones after their method)."""


def outside_the_prefix(html: str) -> list[str]:
    """The app's URLs in a page that do not start with the prefix."""
    found = [(name, url) for name, url in URL_ATTRIBUTE.findall(html)]
    assert found, "the page holds no URL at all"
    return [f"{name}={url}" for name, url in found if not url.startswith(f"{PREFIX}/")]


def embedded(data_dir: Path) -> rota.Rota:
    settings = rota.Settings(
        environment="development",
        data_dir=data_dir,
        admin_user=ADMIN[0],
        admin_password=ADMIN[1],  # type: ignore[arg-type]  # pydantic takes the text
    )
    return rota.Rota(settings, jobs=["tests.integration.embed_jobs"])


@pytest.fixture
def scheduler(tmp_path: Path) -> rota.Rota:
    return embedded(tmp_path / "rota")


@pytest.fixture
def host(scheduler: rota.Rota) -> FastAPI:
    """The user's app: a route of its own, Rota under ``/rota``, Rota started by its
    lifespan."""
    app = FastAPI(lifespan=scheduler.lifespan)

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    app.mount(PREFIX, scheduler.asgi())
    return app


@pytest.fixture
async def http(host: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client (keeps cookies) on the host app, run through its lifespan."""
    async with host.router.lifespan_context(host):
        transport = httpx.ASGITransport(app=host)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client


async def test_the_lifespan_starts_and_stops_rota(scheduler: rota.Rota, host: FastAPI) -> None:
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        before = await client.get(f"{PREFIX}/api/v1/health/live")
        assert before.status_code == 503
        assert "lifespan" in before.json()["detail"]
        async with host.router.lifespan_context(host):
            assert scheduler.running
            live = await client.get(f"{PREFIX}/api/v1/health/ready")
            assert live.status_code == 200, live.text
            assert (await client.get("/hello")).json() == {"hello": "world"}
        assert not scheduler.running
        assert (await client.get(f"{PREFIX}/api/v1/health/live")).status_code == 503


async def test_a_second_rota_on_the_same_sqlite_store_is_refused(scheduler: rota.Rota) -> None:
    async with scheduler:
        other = rota.Rota(scheduler.settings)
        with pytest.raises(rota.RotaError, match=r"in use|held|another"):
            await other.start()
        assert not other.running


async def signed_in(http: httpx.AsyncClient) -> httpx.Response:
    """Through the dashboard's login form, as the page's script sends it."""
    form = await http.get(f"{PREFIX}/login", headers=PAGE)
    assert form.status_code == 200
    assert f'action="{PREFIX}/login"' in form.text
    answer = await http.post(
        f"{PREFIX}/login",
        data={"username": ADMIN[0], "password": ADMIN[1], "next": f"{PREFIX}/jobs"},
        headers=CSRF,
    )
    assert answer.status_code == 204, answer.text
    return answer


async def test_signing_in_under_the_prefix(http: httpx.AsyncClient) -> None:
    first = await http.get(f"{PREFIX}/", headers=PAGE)
    assert first.status_code == 303
    resume = first.headers["location"]
    assert resume.startswith(f"{PREFIX}/ui/session/resume?next=")
    to_login = await http.get(resume, headers=PAGE)
    assert to_login.status_code == 303
    assert to_login.headers["location"] == f"{PREFIX}/login"
    login_page = await http.get(f"{PREFIX}/login", headers=PAGE)
    assert outside_the_prefix(login_page.text) == []
    assert f'<meta name="rota-root" content="{PREFIX}">' in login_page.text

    answer = await signed_in(http)
    assert answer.headers["X-Rota-Redirect"] == f"{PREFIX}/jobs"
    paths = {name: attrs["path"] for name, value, attrs in set_cookies(answer) if value}
    assert paths == {"rota_access": PREFIX, "rota_refresh": f"{PREFIX}/ui/session"}

    elsewhere = await http.post(
        f"{PREFIX}/login",
        data={"username": ADMIN[0], "password": ADMIN[1], "next": "/hello"},
        headers=CSRF,
    )
    assert elsewhere.headers["X-Rota-Redirect"] == f"{PREFIX}/"  # not outside Rota's pages

    bad = await http.post(
        f"{PREFIX}/login", data={"username": "x", "password": "y", "next": ""}, headers=CSRF
    )
    assert bad.status_code == 401
    assert outside_the_prefix(bad.text) == []


async def wait_for(what: str, check: Any, within: float = 20.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_job_runs_and_every_page_stays_under_the_prefix(
    http: httpx.AsyncClient,
) -> None:
    await signed_in(http)
    api = f"{PREFIX}/api/v1"
    token = (
        await http.post(f"{api}/auth/login", json={"username": ADMIN[0], "password": ADMIN[1]})
    ).json()["accessToken"]
    bearer = {"Authorization": f"Bearer {token}"}
    created = await http.post(
        f"{api}/jobs",
        json={"displayName": "greet", "jobType": "embedded.greet", "cronExpression": "0 0 1 1 *"},
        headers=bearer,
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert created.headers["location"] == f"{api}/jobs/{job_id}"
    fired = await http.post(f"{api}/jobs/{job_id}/trigger", json={}, headers=bearer)
    assert fired.status_code in (200, 201, 202), fired.text
    occurrence_id = fired.json()["id"]

    async def completed() -> bool:
        answer = await http.get(f"{api}/occurrences/{occurrence_id}", headers=bearer)
        return bool(answer.json().get("statusName") == "Completed")

    await wait_for("the job to complete in the embedded worker", completed)

    pages = ["/", "/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}/edit", "/jobs/new"]
    pages += [f"/executions/{occurrence_id}", "/executions", "/failed", "/workers", "/admin"]
    pages += ["/users", "/notifications", "/audit"]
    for page in pages:
        answer = await http.get(f"{PREFIX}{page}", headers=PAGE)
        assert answer.status_code == 200, (page, answer.status_code)
        assert outside_the_prefix(answer.text) == [], page
    overview = await http.get(f"{PREFIX}/", headers=PAGE)
    assert f'sse-connect="{api}/events' in overview.text
    assert f'src="{PREFIX}/static/vendor/htmx.min.js"' in overview.text
    script = await http.get(f"{PREFIX}/static/rota.js")
    assert script.status_code == 200
    assert "rota-root" in script.text

    docs = await http.get(f"{PREFIX}/docs")
    assert f"'{PREFIX}/openapi.json'" in docs.text or f'"{PREFIX}/openapi.json"' in docs.text
    assert f"{PREFIX}/docs/assets/swagger-ui-bundle.js" in docs.text
    described = await http.get(f"{PREFIX}/openapi.json")
    assert described.json()["servers"][0]["url"] == PREFIX  # "Try it out" calls /rota/api/v1

    out = await http.post(f"{PREFIX}/ui/session/logout", headers=CSRF)
    assert out.headers["X-Rota-Redirect"] == f"{PREFIX}/login"
    cleared = {(name, attrs["path"]) for name, value, attrs in set_cookies(out) if not value}
    assert {("rota_access", PREFIX), ("rota_refresh", f"{PREFIX}/ui/session")} <= cleared


async def lifespan_event(
    app: Any, messages: asyncio.Queue[dict[str, Any]], sent: list[str]
) -> None:
    async def receive() -> dict[str, Any]:
        return await messages.get()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)


async def test_served_alone_behind_a_proxy_that_strips_the_prefix(scheduler: rota.Rota) -> None:
    """``uvicorn module:app --root-path /rota`` on :meth:`Rota.asgi` itself: the server's
    lifespan starts and stops Rota, and the pages carry the root path."""
    app = scheduler.asgi()
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[str] = []
    lifespan = asyncio.create_task(lifespan_event(app, messages, sent))
    await messages.put({"type": "lifespan.startup"})
    await wait_for("the start", lambda: asyncio.sleep(0, "lifespan.startup.complete" in sent))
    assert scheduler.running
    # what uvicorn hands the app under --root-path: the full path, and the root path
    transport = httpx.ASGITransport(app=app, root_path=PREFIX)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        login = await http.get(f"{PREFIX}/login", headers=PAGE)
        assert login.status_code == 200
        assert outside_the_prefix(login.text) == []
    await messages.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, 30)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not scheduler.running


async def test_a_worker_of_its_own_needs_the_distributed_mode(scheduler: rota.Rota) -> None:
    with pytest.raises(rota.RotaError, match="distributed mode"):
        await scheduler.run_worker()


async def test_the_app_runs_a_job_through_an_in_process_client(
    http: httpx.AsyncClient, scheduler: rota.Rota
) -> None:
    """The host app's own code: a client on this Rota without a network hop, signed in with
    an API key; a typed definition creates its job and waits (on the event stream) for the
    result."""
    from tests.integration.embed_jobs import greet

    login = {"username": ADMIN[0], "password": ADMIN[1]}
    token = (await http.post(f"{PREFIX}/api/v1/auth/login", json=login)).json()["accessToken"]
    created = await http.post(
        f"{PREFIX}/api/v1/api-keys",
        json={"name": "my-app", "role": "Operator"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert created.status_code == 201, created.text
    async with scheduler.client(api_key=created.json()["key"]) as client:
        handle = await greet.now(client)
        assert await handle.result(timeout=20) == "greeted"
        runs = await client.list_occurrences(job_id=handle.job_id)
        assert [run.status_name for run in runs.items] == ["Completed"]
