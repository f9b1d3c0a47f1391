"""Security over HTTP on the embedded runtime: the role x route matrix, bad tokens, login,
lockout, refresh rotation and reuse, cookies with the CSRF header, and the OpenAPI roles."""

from __future__ import annotations

import base64
import inspect
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI

from rota.api.app import API_PREFIX, PUBLIC_PATHS, create_app
from rota.api.scopes import SCOPED_ROUTES
from rota.api.security import ACCESS_COOKIE, REFRESH_COOKIE, route_role
from rota.api.security import api_routes as served_routes
from rota.app.runtime import Runtime
from rota.app.server import prepare
from rota.core.ids import new_id
from rota.core.security import Role
from tests.api_client import (
    PASSWORD,
    access_token,
    api_client,
    api_key_client,
    ensure_user,
    username_of,
)
from tests.helpers import RuntimeFactory, settings_for

PROBLEM = "application/problem+json"
ROLES: list[Role | None] = [None, Role.VIEWER, Role.OPERATOR, Role.ADMIN]
SELF_SERVICE = {("POST", "/api/v1/auth/logout"), ("PUT", "/api/v1/auth/password")}
"""Changes any signed-in user may make (to their own session or password)."""


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory({"auth.max_failed_logins": 2}, grace=1)


def api_routes(app: FastAPI) -> list[Any]:
    return [r for r in served_routes(app) if r.path.startswith(API_PREFIX)]


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


def assert_unauthorized(response: httpx.Response) -> None:
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith('Bearer realm="rota"')


# --- every route has a role ----------------------------------------------------------------------


def test_every_api_route_checks_a_role_but_login_refresh_and_health(app: FastAPI) -> None:
    public = set()
    for route in api_routes(app):
        if route_role(route) is None:
            public.add(route.path)
    assert public == PUBLIC_PATHS, "routes without a role (add requires(Role.…))"


def test_changes_need_at_least_operator(app: FastAPI) -> None:
    for route in api_routes(app):
        role = route_role(route)
        for method in route.methods - {"GET", "HEAD", "OPTIONS"}:
            if route.path in PUBLIC_PATHS or (method, route.path) in SELF_SERVICE:
                continue
            assert role is not None, route.path
            assert role.allows(Role.OPERATOR), f"{method} {route.path} only needs {role}"


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("GET", "/api/v1/jobs", Role.VIEWER),
        ("POST", "/api/v1/jobs", Role.OPERATOR),
        ("PUT", "/api/v1/jobs/job", Role.OPERATOR),
        ("POST", "/api/v1/jobs/{job_id}/trigger", Role.OPERATOR),
        ("DELETE", "/api/v1/jobs/{job_id}", Role.OPERATOR),
        ("POST", "/api/v1/occurrences/{occurrence_id}/cancel", Role.OPERATOR),
        ("PUT", "/api/v1/failed-occurrences/{failed_id}", Role.OPERATOR),
        ("POST", "/api/v1/failed-occurrences/{failed_id}/retry", Role.OPERATOR),
        ("GET", "/api/v1/workers", Role.VIEWER),
        ("GET", "/api/v1/workers/{worker_id}", Role.VIEWER),
        ("GET", "/api/v1/auth/me", Role.VIEWER),
        ("POST", "/api/v1/jobs/bulk", Role.OPERATOR),
        ("GET", "/api/v1/tags", Role.VIEWER),
        ("GET", "/api/v1/events", Role.VIEWER),
        ("GET", "/api/v1/stats/overview", Role.VIEWER),
        ("GET", "/api/v1/stats/throughput", Role.VIEWER),
        ("GET", "/api/v1/admin/queues", Role.VIEWER),
        ("GET", "/api/v1/admin/dispatcher", Role.VIEWER),
        ("POST", "/api/v1/admin/dispatcher/stop", Role.OPERATOR),
        ("POST", "/api/v1/admin/dispatcher/resume", Role.OPERATOR),
        ("GET", "/api/v1/admin/config", Role.ADMIN),
        ("GET", "/api/v1/limits", Role.VIEWER),
        ("PUT", "/api/v1/limits", Role.ADMIN),
        ("PUT", "/api/v1/limits/{job_type}", Role.ADMIN),
        ("DELETE", "/api/v1/limits/{job_type}", Role.ADMIN),
    ],
)
def test_known_routes_have_their_roles(app: FastAPI, method: str, path: str, role: Role) -> None:
    found = [r for r in api_routes(app) if r.path == path and method in r.methods]
    assert len(found) == 1
    assert route_role(found[0]) is role


def _call_path(route: Any) -> str:
    return re.sub(r"\{[^}]+\}", str(new_id()), route.path)


def _streams(route: Any) -> bool:
    """An endpoint that streams (SSE) never ends: only its refusals are checked."""
    return inspect.isasyncgenfunction(route.endpoint) or route.path.endswith("/events")


async def test_the_role_matrix(app: FastAPI) -> None:
    """Every route x {anonymous, Viewer, Operator, Admin}: 401 without a token, 403 below the
    route's role, neither at or above it."""
    clients = {}
    for role in ROLES:
        clients[role] = api_client(app, role)
    opened = {role: await cm.__aenter__() for role, cm in clients.items()}
    checked = 0
    try:
        for route in api_routes(app):
            needed = route_role(route)
            path = _call_path(route)
            for method in sorted(route.methods):
                for role in ROLES:
                    allowed = needed is None or (role is not None and role.allows(needed))
                    if allowed and _streams(route):
                        continue
                    body = None if method in ("GET", "DELETE") else {}
                    response = await opened[role].request(method, path, json=body)
                    where = f"{method} {route.path} as {role}: {response.text[:200]}"
                    if needed is None:  # public; refresh without a token is a 401
                        assert response.status_code < 500, where
                    elif allowed:
                        assert response.status_code not in (401, 403), where
                    elif role is None:
                        assert response.status_code == 401, where
                        assert "www-authenticate" in response.headers, where
                    else:
                        assert response.status_code == 403, where
                        assert response.headers["content-type"].startswith(PROBLEM), where
                    checked += 1
    finally:
        for cm in clients.values():
            await cm.__aexit__(None, None, None)
    assert checked >= 4 * 20


KEY_ROLES: list[Role] = [Role.VIEWER, Role.OPERATOR, Role.ADMIN]


def _judge(response: httpx.Response, who: str, needed: Role | None, allowed: bool) -> None:
    """A public route never fails on the server; an allowed call is not refused; any other is
    a 403 problem."""
    where = f"{who}: {response.text[:200]}"
    if needed is None:
        assert response.status_code < 500, where
    elif allowed:
        assert response.status_code not in (401, 403), where
    else:
        assert_problem(response, 403)


async def test_the_role_matrix_with_api_keys(app: FastAPI) -> None:
    """Every route x an API key of each role, and a scoped Operator key: a key is the role it
    was given (403 below the route's role, neither 401 nor 403 at or above it), no key may use
    the session routes (/auth/...), and a scoped key may call only the routes of its jobs
    (docs/security.md#scopes: 403 elsewhere)."""
    clients = {role: api_key_client(app, role) for role in KEY_ROLES}
    scoped_cm = api_key_client(app, Role.OPERATOR, job_types=("billing.sync",))
    opened = {role: await cm.__aenter__() for role, cm in clients.items()}
    scoped = await scoped_cm.__aenter__()
    checked = 0
    try:
        for route in api_routes(app):
            needed = route_role(route)
            path = _call_path(route)
            for method in sorted(route.methods):
                body = None if method in ("GET", "DELETE") else {}
                session = route.path.startswith(f"{API_PREFIX}/auth/") and needed is not None
                for role in KEY_ROLES:
                    allowed = needed is None or (role.allows(needed) and not session)
                    if allowed and _streams(route):
                        continue
                    response = await opened[role].request(method, path, json=body)
                    _judge(response, f"{method} {route.path} as a {role} key", needed, allowed)
                    checked += 1
                may = needed is None or (
                    Role.OPERATOR.allows(needed) and (method, route.path) in SCOPED_ROUTES
                )
                if may and _streams(route):
                    continue
                response = await scoped.request(method, path, json=body)
                _judge(response, f"{method} {route.path} as a scoped key", needed, may)
                checked += 1
    finally:
        for cm in clients.values():
            await cm.__aexit__(None, None, None)
        await scoped_cm.__aexit__(None, None, None)
    assert checked >= 4 * 60


# --- bad tokens --------------------------------------------------------------------------------


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


async def _bad_tokens(app: FastAPI, runtime: Runtime) -> dict[str, str]:
    auth = runtime.auth
    user = await ensure_user(auth, Role.VIEWER)
    now = auth.now()
    claims: dict[str, Any] = {"sub": str(user.id), "name": user.username, "role": "Viewer"}
    valid = await access_token(app, Role.VIEWER)
    header, payload, signature = valid.split(".")
    elevated = json.loads(base64.urlsafe_b64decode(payload + "=="))
    elevated["role"] = "Admin"
    base = {
        "iss": auth.config.issuer,
        "aud": auth.config.audience,
        "jti": "x",
        "iat": now,
        "nbf": now,
        "exp": now + timedelta(minutes=5),
        **claims,
    }
    return {
        "expired": auth.encode_access_token(
            {
                **claims,
                "iat": now - timedelta(minutes=20),
                "nbf": now - timedelta(minutes=20),
                "exp": now - timedelta(minutes=5),
            }
        ),
        "not yet valid": auth.encode_access_token(
            {
                **claims,
                "iat": now,
                "nbf": now + timedelta(minutes=5),
                "exp": now + timedelta(minutes=10),
            }
        ),
        "alg none": jwt.encode(base, None, algorithm="none"),
        "wrongly signed": jwt.encode(base, "another secret of at least 32 bytes!", "HS256"),
        "another algorithm": jwt.encode(base, auth.config.secret, algorithm="HS512"),
        "tampered": f"{header}.{_b64(elevated)}.{signature}",
        "wrong audience": jwt.encode({**base, "aud": "other"}, auth.config.secret, "HS256"),
        "wrong issuer": jwt.encode({**base, "iss": "other"}, auth.config.secret, "HS256"),
        "no exp": jwt.encode(
            {k: v for k, v in base.items() if k != "exp"}, auth.config.secret, "HS256"
        ),
        "unknown user": jwt.encode({**base, "sub": str(new_id())}, auth.config.secret, "HS256"),
        "too long-lived": jwt.encode(
            {**base, "exp": now + timedelta(hours=1)}, auth.config.secret, "HS256"
        ),
        "garbage": "not.a.token",
    }


async def test_bad_tokens_are_refused_with_401(app: FastAPI, runtime: Runtime) -> None:
    tokens = await _bad_tokens(app, runtime)
    async with api_client(app, None) as http:
        for name, token in tokens.items():
            response = await http.get(
                "/api/v1/auth/me", headers={"Authorization": f"Bearer {token}"}
            )
            assert response.status_code == 401, f"{name}: {response.text}"
            assert_unauthorized(response)
            assert "invalid_token" in response.headers["www-authenticate"], name
        for header in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer   "):
            response = await http.get("/api/v1/auth/me", headers={"Authorization": header})
            assert_unauthorized(response)
        good = await access_token(app, Role.VIEWER)
        me = await http.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {good}"})
        assert me.status_code == 200
        assert me.json()["role"] == "Viewer"


# --- login, lockout, refresh, logout ----------------------------------------------------------


async def test_login_me_and_the_token_shape(app: FastAPI, runtime: Runtime) -> None:
    await ensure_user(runtime.auth, Role.OPERATOR)
    async with api_client(app, None) as http:
        response = await http.post(
            "/api/v1/auth/login",
            json={"username": username_of(Role.OPERATOR), "password": PASSWORD},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"accessToken", "refreshToken", "tokenType", "expiresIn"}
        assert body["tokenType"] == "Bearer"
        assert body["expiresIn"] == 900
        assert response.headers["cache-control"] == "no-store"
        header = jwt.get_unverified_header(body["accessToken"])
        assert header["alg"] == "HS256"
        claims = jwt.decode(body["accessToken"], options={"verify_signature": False})
        assert {"iss", "aud", "exp", "nbf", "iat", "sub", "role", "jti"} <= set(claims)
        assert claims["exp"] - claims["iat"] <= 900
        me = await http.get(
            "/api/v1/auth/me", headers={"Authorization": f"Bearer {body['accessToken']}"}
        )
        assert me.status_code == 200
        assert me.json()["username"] == username_of(Role.OPERATOR)
        assert me.json()["role"] == "Operator"
        assert "passwordHash" not in me.json()


async def test_bad_credentials_and_lockout_never_tell_who_exists(
    app: FastAPI, runtime: Runtime
) -> None:
    await ensure_user(runtime.auth, Role.VIEWER)
    known = username_of(Role.VIEWER)
    async with api_client(app, None) as http:
        answers = {}
        for name in (known, "nobody-here"):
            bodies = []
            for _ in range(2):  # max_failed_logins = 2 in this file
                r = await http.post(
                    "/api/v1/auth/login", json={"username": name, "password": "wrong password!"}
                )
                bodies.append(assert_problem(r, 401)["detail"])
            locked = await http.post(
                "/api/v1/auth/login", json={"username": name, "password": PASSWORD}
            )
            problem = assert_problem(locked, 429)
            assert problem["type"] == "urn:rota:problem:locked"
            assert 0 < int(locked.headers["retry-after"]) <= 15 * 60
            answers[name] = (bodies, locked.status_code)
        assert answers[known] == answers["nobody-here"]


async def test_refresh_rotates_and_reuse_revokes_the_family(app: FastAPI, runtime: Runtime) -> None:
    await ensure_user(runtime.auth, Role.VIEWER)
    login = {"username": username_of(Role.VIEWER), "password": PASSWORD}
    async with api_client(app, None) as http:
        first = (await http.post("/api/v1/auth/login", json=login)).json()
        second = await http.post(
            "/api/v1/auth/refresh", json={"refreshToken": first["refreshToken"]}
        )
        assert second.status_code == 200, second.text
        rotated = second.json()
        assert rotated["refreshToken"] != first["refreshToken"]
        me = await http.get(
            "/api/v1/auth/me", headers={"Authorization": f"Bearer {rotated['accessToken']}"}
        )
        assert me.status_code == 200
        reuse = await http.post(
            "/api/v1/auth/refresh", json={"refreshToken": first["refreshToken"]}
        )
        assert_unauthorized(reuse)
        revoked = await http.post(
            "/api/v1/auth/refresh", json={"refreshToken": rotated["refreshToken"]}
        )
        assert_unauthorized(revoked)
        missing = await http.post("/api/v1/auth/refresh", json={})
        assert_unauthorized(missing)


async def test_logout_revokes_the_refresh_token(app: FastAPI, runtime: Runtime) -> None:
    await ensure_user(runtime.auth, Role.VIEWER)
    login = {"username": username_of(Role.VIEWER), "password": PASSWORD}
    async with api_client(app, None) as http:
        tokens = (await http.post("/api/v1/auth/login", json=login)).json()
        bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
        out = await http.post(
            "/api/v1/auth/logout", json={"refreshToken": tokens["refreshToken"]}, headers=bearer
        )
        assert out.status_code == 204
        refused = await http.post(
            "/api/v1/auth/refresh", json={"refreshToken": tokens["refreshToken"]}
        )
        assert_unauthorized(refused)


async def test_change_password_over_http(app: FastAPI, runtime: Runtime) -> None:
    await ensure_user(runtime.auth, Role.OPERATOR)
    async with api_client(app, Role.OPERATOR) as http:
        wrong = await http.put(
            "/api/v1/auth/password",
            json={"currentPassword": "not it at all", "newPassword": "a new passphrase 42"},
        )
        assert assert_problem(wrong, 422)["errors"][0]["field"] == "currentPassword"
        weak = await http.put(
            "/api/v1/auth/password",
            json={"currentPassword": PASSWORD, "newPassword": "short"},
        )
        assert assert_problem(weak, 422)["errors"][0]["field"] == "newPassword"
        common = await http.put(
            "/api/v1/auth/password",
            json={"currentPassword": PASSWORD, "newPassword": "Qwertyuiop2026!"},
        )
        problem = assert_problem(common, 422)
        assert problem["errors"][0]["field"] == "newPassword"
        assert "too easy to guess" in problem["detail"], problem
        ok = await http.put(
            "/api/v1/auth/password",
            json={"currentPassword": PASSWORD, "newPassword": "a new passphrase 42"},
        )
        assert ok.status_code == 204, ok.text
        login = await http.post(
            "/api/v1/auth/login",
            json={"username": username_of(Role.OPERATOR), "password": "a new passphrase 42"},
        )
        assert login.status_code == 200


# --- cookies -----------------------------------------------------------------------------------


async def test_cookie_sign_in_needs_the_csrf_header_for_changes(
    app: FastAPI, runtime: Runtime
) -> None:
    await ensure_user(runtime.auth, Role.OPERATOR)
    login = {"username": username_of(Role.OPERATOR), "password": PASSWORD}
    async with api_client(app, None) as http:
        response = await http.post("/api/v1/auth/login", json=login)
        set_cookies = response.headers.get_list("set-cookie")
        access = next(c for c in set_cookies if c.startswith(f"{ACCESS_COOKIE}="))
        refresh = next(c for c in set_cookies if c.startswith(f"{REFRESH_COOKIE}="))
        for cookie in (access, refresh):
            assert "HttpOnly" in cookie
            assert "SameSite=strict" in cookie
            assert "Secure" in cookie  # outside development
        assert "Path=/api/v1/auth" in refresh
        token = response.json()["accessToken"]
        cookies = {"Cookie": f"{ACCESS_COOKIE}={token}"}
        me = await http.get("/api/v1/auth/me", headers=cookies)
        assert me.status_code == 200
        job = {"jobType": "report", "cronExpression": "0 0 1 1 *"}
        refused = await http.post("/api/v1/jobs", json=job, headers=cookies)
        assert "X-Rota-CSRF" in assert_problem(refused, 403)["detail"]
        created = await http.post("/api/v1/jobs", json=job, headers={**cookies, "X-Rota-CSRF": "1"})
        assert created.status_code == 201, created.text
        bad_cookie = await http.get("/api/v1/auth/me", headers={"Cookie": f"{ACCESS_COOKIE}=x"})
        assert_unauthorized(bad_cookie)


async def test_refresh_by_cookie(app: FastAPI, runtime: Runtime) -> None:
    await ensure_user(runtime.auth, Role.VIEWER)
    login = {"username": username_of(Role.VIEWER), "password": PASSWORD}
    async with api_client(app, None) as http:
        tokens = (await http.post("/api/v1/auth/login", json=login)).json()
        cookie = {"Cookie": f"{REFRESH_COOKIE}={tokens['refreshToken']}"}
        no_csrf = await http.post("/api/v1/auth/refresh", headers=cookie)
        assert_problem(no_csrf, 403)
        ok = await http.post("/api/v1/auth/refresh", headers={**cookie, "X-Rota-CSRF": "1"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["refreshToken"] != tokens["refreshToken"]


# --- OpenAPI -----------------------------------------------------------------------------------


async def test_openapi_names_each_operations_role_and_its_401_403(app: FastAPI) -> None:
    async with api_client(app, None) as http:
        spec = (await http.get("/openapi.json")).json()
    assert {"bearer", "cookie"} <= set(spec["components"]["securitySchemes"])
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            role = operation["x-rota-role"]
            assert operation["description"].startswith("**Role:**"), (method, path)
            if path in PUBLIC_PATHS:
                assert role == "public"
                assert operation["security"] == []
                continue
            assert role in {"Viewer", "Operator", "Admin"}, (method, path)
            assert {"401", "403"} <= set(operation["responses"]), (method, path)
            assert PROBLEM in operation["responses"]["401"]["content"]
    create = spec["paths"]["/api/v1/jobs"]["post"]
    assert create["x-rota-role"] == "Operator"
    assert "Operator or higher" in create["description"]


# --- sign-in limits (issue 14) -------------------------------------------------------------------


@asynccontextmanager
async def limited_app(tmp_path: Path, **auth: Any) -> AsyncIterator[FastAPI]:
    settings = settings_for(tmp_path)
    for name, value in auth.items():
        setattr(settings.auth, name, value)
    rt = await prepare(settings, [])
    await rt.start()
    try:
        yield create_app(rt)
    finally:
        await rt.stop(grace=1)


def client_at(app: FastAPI, address: str) -> httpx.AsyncClient:
    """An anonymous client on ``app`` calling from ``address``."""
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://rota")


def assert_too_many(response: httpx.Response, seconds: int) -> None:
    """A 429 rate-limit problem whose Retry-After is ``seconds`` (less the few seconds a slow
    machine may have taken since the bucket ran dry)."""
    problem = assert_problem(response, 429)
    assert problem["type"] == "urn:rota:problem:rate-limited"
    assert seconds - 5 <= int(response.headers["retry-after"]) <= seconds


async def test_logins_past_the_limits_are_429_with_retry_after(tmp_path: Path) -> None:
    limits = {
        "login_client_burst": 2,
        "login_per_client_per_minute": 1,
        "login_burst": 3,
        "login_per_second": 0.01,
    }
    async with limited_app(tmp_path, **limits) as app:
        await ensure_user(app.state.runtime.auth, Role.VIEWER)
        login = {"username": username_of(Role.VIEWER), "password": PASSWORD}
        async with client_at(app, "10.0.0.1") as one, client_at(app, "10.0.0.2") as two:
            for _ in range(2):
                assert (await one.post("/api/v1/auth/login", json=login)).status_code == 200
            refused = await one.post("/api/v1/auth/login", json=login)
            assert_too_many(refused, 60)
            assert "from this address" in refused.json()["detail"]
            assert (await two.post("/api/v1/auth/login", json=login)).status_code == 200
            overall = await two.post("/api/v1/auth/login", json=login)  # 3 in all: the burst
            assert_too_many(overall, 100)
            assert "from this address" not in overall.json()["detail"]


async def test_refreshes_past_the_limit_are_429_with_retry_after(tmp_path: Path) -> None:
    limits = {"refresh_client_burst": 1, "refresh_per_client_per_minute": 2}
    async with limited_app(tmp_path, **limits) as app:
        await ensure_user(app.state.runtime.auth, Role.VIEWER)
        login = {"username": username_of(Role.VIEWER), "password": PASSWORD}
        async with client_at(app, "10.0.0.1") as http:
            tokens = (await http.post("/api/v1/auth/login", json=login)).json()
            first = await http.post(
                "/api/v1/auth/refresh", json={"refreshToken": tokens["refreshToken"]}
            )
            assert first.status_code == 200
            again = await http.post(
                "/api/v1/auth/refresh", json={"refreshToken": first.json()["refreshToken"]}
            )
            assert_too_many(again, 30)


async def test_a_full_hashing_pool_is_503_with_retry_after(tmp_path: Path) -> None:
    async with limited_app(tmp_path, hash_threads=1, hash_queue=0) as app:
        auth = app.state.runtime.auth
        await ensure_user(auth, Role.VIEWER)
        login = {"username": username_of(Role.VIEWER), "password": PASSWORD}
        async with client_at(app, "10.0.0.1") as http:
            with auth.hashing.ticket():  # the one hashing thread is taken
                busy = await http.post("/api/v1/auth/login", json=login)
                problem = assert_problem(busy, 503)
                assert problem["type"] == "urn:rota:problem:overloaded"
                assert busy.headers["retry-after"] == "1"
            assert (await http.post("/api/v1/auth/login", json=login)).status_code == 200


async def test_lockouts_and_refresh_reuse_are_in_the_audit_log(
    app: FastAPI, runtime: Runtime
) -> None:
    await ensure_user(runtime.auth, Role.VIEWER)
    name = username_of(Role.VIEWER)
    async with client_at(app, "10.7.7.7") as http:
        tokens = (
            await http.post("/api/v1/auth/login", json={"username": name, "password": PASSWORD})
        ).json()
        refresh = {"refreshToken": tokens["refreshToken"]}
        assert (await http.post("/api/v1/auth/refresh", json=refresh)).status_code == 200
        assert (await http.post("/api/v1/auth/refresh", json=refresh)).status_code == 401
        for _ in range(2):  # max_failed_logins = 2 in this file
            wrong = {"username": name, "password": "wrong password!"}
            assert (await http.post("/api/v1/auth/login", json=wrong)).status_code == 401
    async with api_client(app, Role.ADMIN) as admin:
        locked = await admin.get("/api/v1/audit", params={"action": "login.locked"})
        reused = await admin.get("/api/v1/audit", params={"action": "refresh.reused"})
    assert locked.status_code == reused.status_code == 200, locked.text
    (lock,) = locked.json()["items"]
    assert (lock["actor"], lock["after"]["client"]) == (name, "10.7.7.7")
    (reuse,) = reused.json()["items"]
    assert (reuse["actor"], reuse["after"]["client"]) == (name, "10.7.7.7")
