"""The dashboard's session: the API's cookie settings, the CSRF header on every change, and a
refresh that never gives a used refresh token a second life (through ASGI, no browser)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit
from uuid import uuid4

import httpx
import pytest
from fastapi import FastAPI

from rota.api.security import SAFE_METHODS, api_routes
from rota.dashboard.session import (
    ACCESS_COOKIE,
    REFRESH_COOKIE,
    SESSION_PATH,
    SUPERSEDED,
    Refresher,
    Tokens,
)
from tests.api_client import PASSWORD, api_client, ensure_user, username_of
from tests.api_runtime import MiniRuntime, sqlite_runtime
from tests.integration.test_dashboard_pages import (
    CSRF,
    PAGE,
    cookies_of,
    jar,
    set_cookies,
    sign_in,
)

NEXT = urlencode({"next": "/executions?status=Failed"}, safe="/")
REFRESH = f"{SESSION_PATH}/refresh"
LOGOUT = f"{SESSION_PATH}/logout"
RESUME = f"{SESSION_PATH}/resume"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[MiniRuntime]:
    async with sqlite_runtime(tmp_path) as made:
        for role in ("viewer", "operator"):
            await ensure_user(made.auth, role)
        yield made


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that keeps no cookies: each request names its own (``jar``)."""
    async with api_client(app, role=None) as http:
        yield http


def cookie_attrs(answer: httpx.Response) -> dict[str, dict[str, str]]:
    """name -> attributes of the cookies an answer sets to a value (not the cleared ones)."""
    return {name: attrs for name, value, attrs in set_cookies(answer) if value}


# --- cookies -----------------------------------------------------------------------------------


async def test_the_dashboards_cookies_follow_the_apis_settings(
    browser: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    body = {"username": username_of("viewer"), "password": PASSWORD}
    api = await browser.post("/api/v1/auth/login", json=body)
    # a request that says it came over plain HTTP through a proxy (the app is not told to
    # believe proxies): the setting decides, not the scheme
    forwarded = {"X-Forwarded-Proto": "http", **CSRF}
    dashboard = await browser.post("/login", data=body, headers=forwarded)
    assert dashboard.status_code == 204
    ours, theirs = cookie_attrs(dashboard), cookie_attrs(api)
    refresh_seconds = int(runtime.auth.config.refresh_ttl.total_seconds())
    assert ours[REFRESH_COOKIE]["max-age"] == theirs[REFRESH_COOKIE]["max-age"]
    assert ours[REFRESH_COOKIE]["max-age"] == str(refresh_seconds)
    assert ours[ACCESS_COOKIE]["max-age"] == theirs[ACCESS_COOKIE]["max-age"]
    assert ours[REFRESH_COOKIE]["path"] == SESSION_PATH  # the session routes only
    dropped = {(name, attrs["path"]) for name, value, attrs in set_cookies(dashboard) if not value}
    assert dropped == {(REFRESH_COOKIE, "/")}  # where an earlier version kept it, for every page
    assert ours[ACCESS_COOKIE]["path"] == "/"
    for name in (ACCESS_COOKIE, REFRESH_COOKIE):
        assert "secure" in ours[name]
        assert "secure" in theirs[name]
    # development (rota dev, plain HTTP) and cookie_secure off: neither is Secure
    for change in ({"environment": "development"}, {"cookie_secure": False}):
        settings = runtime.settings
        if "environment" in change:
            settings.environment = "development"
        else:
            settings.environment = "production"
            settings.auth.cookie_secure = False
        again = await browser.post("/login", data=body, headers=CSRF)
        api_again = await browser.post("/api/v1/auth/login", json=body)
        for attrs in (*cookie_attrs(again).values(), *cookie_attrs(api_again).values()):
            assert "secure" not in attrs, change


# --- the CSRF header ---------------------------------------------------------------------------


async def test_every_state_changing_dashboard_route_needs_the_csrf_header(
    app: FastAPI, browser: httpx.AsyncClient
) -> None:
    """Walks the app's routes: a dashboard route added later is covered without a change here."""
    operator = jar(await sign_in(browser, "operator"))
    changes = sorted(
        (method, route.path)
        for route in api_routes(app)
        if not route.path.startswith("/api/")
        for method in route.methods or ()
        if method not in SAFE_METHODS
    )
    assert {("POST", "/login"), ("POST", LOGOUT), ("POST", REFRESH)} <= set(changes)
    for method, path in changes:
        url = path.format_map({p: str(uuid4()) for p in _params(path)})
        refused = await browser.request(method, url, headers=operator, data={"x": "1"})
        assert refused.status_code == 403, (method, path, refused.text)
        assert "X-Rota-CSRF" in refused.json()["detail"]
    # the session is untouched by the refused requests
    assert (await browser.get("/jobs", headers={**PAGE, **operator})).status_code == 200


def _params(path: str) -> list[str]:
    return [part[1:-1].split(":")[0] for part in path.split("/") if part.startswith("{")]


async def test_a_cross_site_form_cannot_sign_in_or_out(browser: httpx.AsyncClient) -> None:
    body = {"username": username_of("viewer"), "password": PASSWORD}
    assert (await browser.post("/login", data=body)).status_code == 403
    cookies = await sign_in(browser, "viewer")
    assert (await browser.post(LOGOUT, headers=jar(cookies))).status_code == 403
    # still signed in: the refresh token still works
    assert (await browser.post(REFRESH, headers={**CSRF, **jar(cookies)})).status_code == 204


# --- sign-in, sign-out, resuming -------------------------------------------------------------


async def test_sign_in_and_sign_out(browser: httpx.AsyncClient) -> None:
    outside = await browser.get("/executions", params={"status": "Failed"}, headers=PAGE)
    assert outside.status_code == 303
    assert outside.headers["location"] == f"{RESUME}?{NEXT}"
    gone = await browser.get(outside.headers["location"])  # no refresh cookie: sign in
    assert gone.status_code == 303
    assert gone.headers["location"] == f"/login?{NEXT}"
    wrong = await browser.post(
        "/login", data={"username": "test-viewer", "password": "nope"}, headers=CSRF
    )
    assert wrong.status_code == 401
    assert "Wrong username or password" in wrong.text
    cookies = await sign_in(browser, "viewer")
    page = await browser.get("/jobs", headers={**PAGE, **jar(cookies)})
    assert page.status_code == 200
    assert "test-viewer" in page.text
    out = await browser.post(LOGOUT, headers={**CSRF, **jar(cookies)})
    assert out.status_code == 204
    assert out.headers["X-Rota-Redirect"] == "/login"
    assert set(cookies_of(out).values()) == {""}
    cleared = {(name, attrs["path"]) for name, _, attrs in set_cookies(out)}
    assert {(ACCESS_COOKIE, "/"), (REFRESH_COOKIE, SESSION_PATH)} <= cleared
    reused = await browser.post(
        "/api/v1/auth/refresh", json={"refreshToken": cookies[REFRESH_COOKIE]}
    )
    assert reused.status_code == 401
    # signing out with an expired access token still ends the login
    again = await sign_in(browser, "viewer")
    expired = {ACCESS_COOKIE: "expired", REFRESH_COOKIE: again[REFRESH_COOKIE]}
    assert (await browser.post(LOGOUT, headers={**CSRF, **jar(expired)})).status_code == 204
    after = await browser.post(REFRESH, headers={**CSRF, **jar(expired)})
    assert after.status_code == 401  # the refresh token no longer works


async def test_a_page_with_an_expired_access_token_sends_the_browser_to_resume(
    browser: httpx.AsyncClient,
) -> None:
    cookies = await sign_in(browser, "viewer")
    stale = {ACCESS_COOKIE: "expired.or.forged", REFRESH_COOKIE: cookies[REFRESH_COOKIE]}
    query = {"tag": "a+b c", "state": "active"}
    page = await browser.get("/jobs", params=query, headers={**PAGE, **jar(stale)})
    assert page.status_code == 303
    location = page.headers["location"]
    assert location.startswith(f"{RESUME}?next=")
    assert parse_qs(urlsplit(location).query) == {"next": [f"/jobs?{urlencode(query)}"]}
    assert set_cookies(page) == []  # a page never refreshes, nor drops the refresh cookie
    fragment = await browser.get(
        "/jobs", params={"fragment": "jobs_table"}, headers={"HX-Request": "true", **jar(stale)}
    )
    assert fragment.status_code == 401
    assert fragment.headers["X-Rota-Session"] == "expired"
    data = await browser.get("/ui/series.json", headers=jar(stale))
    assert data.status_code == 401
    resume = await browser.get(location, headers=jar(stale))
    assert resume.status_code == 200
    assert "data-session-resume" in resume.text
    assert 'data-next="/jobs?tag=a%2Bb+c&amp;state=active"' in resume.text
    # the refresh token was not used by any of them
    renewed = await browser.post(REFRESH, headers={**CSRF, **jar(stale)})
    assert renewed.status_code == 204
    fresh = cookies_of(renewed)
    assert fresh[ACCESS_COOKIE] not in ("", stale[ACCESS_COOKIE])
    assert fresh[REFRESH_COOKIE] not in ("", stale[REFRESH_COOKIE])
    assert (await browser.get("/jobs", headers={**PAGE, **jar(fresh)})).status_code == 200


async def test_resume_only_goes_to_this_site(browser: httpx.AsyncClient) -> None:
    cookies = await sign_in(browser, "viewer")
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil"):
        answer = await browser.get(RESUME, params={"next": target}, headers=jar(cookies))
        assert 'data-next="/"' in answer.text, target


# --- refresh: no second life -------------------------------------------------------------------


async def test_a_used_refresh_token_gets_no_second_life(browser: httpx.AsyncClient) -> None:
    cookies = await sign_in(browser, "viewer")
    first = await browser.post(REFRESH, headers={**CSRF, **jar(cookies)})
    assert first.status_code == 204
    renewed = cookies_of(first)
    # the used token again, right after (where a cached answer would have handed it tokens)
    replay = await browser.post(REFRESH, headers={**CSRF, **jar(cookies)})
    assert replay.status_code == 401
    assert set(cookies_of(replay).values()) == {""}
    # fail closed: the replay ended the login, the successor does not work either
    successor = await browser.post(REFRESH, headers={**CSRF, **jar(renewed)})
    assert successor.status_code == 401


async def test_parallel_page_loads_of_one_browser_keep_the_login(
    browser: httpx.AsyncClient,
) -> None:
    """Four pages load at once after the access token expired: none uses the refresh token,
    and the refreshes their scripts make in turn (one per browser at a time: a Web Lock) each
    send the cookie the one before brought."""
    cookies = await sign_in(browser, "viewer")
    stale = jar({ACCESS_COOKIE: "expired", REFRESH_COOKIE: cookies[REFRESH_COOKIE]})
    pages = await asyncio.gather(
        *(browser.get(path, headers={**PAGE, **stale}) for path in ("/", "/jobs", "/failed", "/"))
    )
    assert [p.status_code for p in pages] == [303] * 4
    current = dict(cookies)
    for _tab in range(4):
        turn = await browser.post(REFRESH, headers={**CSRF, **jar(current)})
        assert turn.status_code == 204
        current.update(cookies_of(turn))
    assert (await browser.get("/jobs", headers={**PAGE, **jar(current)})).status_code == 200


async def test_refreshes_racing_with_one_token_get_no_tokens_but_the_first() -> None:
    refresher = Refresher()
    started, release = asyncio.Event(), asyncio.Event()
    calls = 0

    async def call() -> Tokens | None:
        nonlocal calls
        calls += 1
        started.set()
        await release.wait()
        return Tokens(access="a2", refresh="r2", expires_in=900)

    first = asyncio.create_task(refresher.refresh("r1", call))
    await started.wait()
    # while the first is under way: the same token gets nothing, and is not sent on
    assert await refresher.refresh("r1", call) is SUPERSEDED
    assert await refresher.refresh("r1", call) is SUPERSEDED
    assert calls == 1
    release.set()
    tokens = await first
    assert isinstance(tokens, Tokens)
    assert tokens.refresh == "r2"
    # afterwards nothing is remembered: the used token goes to the API (which refuses it)
    refused = await refresher.refresh("r1", _refused)
    assert refused is None


async def _refused() -> Tokens | None:
    return None
