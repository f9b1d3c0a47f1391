"""Sessions end when they should (issue 33): a password change (both routes), an Admin's
reset, a role change, a deactivation and a deletion end every access token (bearer), dashboard
session (cookie) and refresh token of the user at once; changing one's own password needs the
current one on every route; the signing secret rotates without signing anyone out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from rota.app.runtime import Runtime
from rota.core.models import utcnow
from rota.dashboard.session import ACCESS_COOKIE, CSRF_HEADER
from tests.api_client import PASSWORD, api_client, ensure_user, username_of
from tests.helpers import RuntimeFactory

USERS = "/api/v1/users"
ADA_PASSWORD = "ada's long passphrase"
CSRF = {CSRF_HEADER: "1"}
HTML = {"Accept": "text/html"}
PREVIOUS = "an-old-signing-secret-that-was-rotated-out-0123456789"
UNLISTED = "a-signing-secret-nobody-configured-9876543210-abcdef"


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory({"auth.previous_secrets": SecretStr(PREVIOUS)}, grace=1)


@pytest.fixture
async def admin(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(app, "admin") as http:
        yield http


class Sessions:
    """One user's two sign-ins: the API's (bearer + refresh token) and the dashboard's
    (its cookies)."""

    def __init__(self, http: httpx.AsyncClient, username: str, password: str) -> None:
        self.http, self.username, self.password = http, username, password
        self.bearer: dict[str, str] = {}
        self.refresh = ""
        self.cookie: dict[str, str] = {}

    async def open(self) -> Sessions:
        login = {"username": self.username, "password": self.password}
        api = await self.http.post("/api/v1/auth/login", json=login)
        assert api.status_code == 200, api.text
        self.bearer = {"Authorization": f"Bearer {api.json()['accessToken']}"}
        self.refresh = api.json()["refreshToken"]
        page = await self.http.post("/login", data={**login, "next": "/jobs"}, headers=CSRF)
        assert page.status_code == 204, page.text
        self.cookie = {"Cookie": f"{ACCESS_COOKIE}={page.cookies[ACCESS_COOKIE]}"}
        self.http.cookies.clear()
        return self

    async def alive(self) -> dict[str, int]:
        """The status of each: the API by bearer, the API by cookie, a dashboard page by
        cookie, a refresh (which uses the refresh token up only when it works)."""
        me = await self.http.get("/api/v1/auth/me", headers=self.bearer)
        by_cookie = await self.http.get("/api/v1/auth/me", headers=self.cookie)
        page = await self.http.get("/jobs", headers={**self.cookie, **HTML})
        return {"bearer": me.status_code, "cookie": by_cookie.status_code, "page": page.status_code}

    async def refreshed(self) -> int:
        answer = await self.http.post("/api/v1/auth/refresh", json={"refreshToken": self.refresh})
        if answer.status_code == 200:
            self.refresh = answer.json()["refreshToken"]
        self.http.cookies.clear()
        return answer.status_code


ENDED = {"bearer": 401, "cookie": 401, "page": 303}
LIVE = {"bearer": 200, "cookie": 200, "page": 200}


async def _user(admin: httpx.AsyncClient, role: str = "Viewer") -> dict[str, Any]:
    body = {"username": "ada", "password": ADA_PASSWORD, "role": role}
    created = await admin.post(USERS, json=body)
    assert created.status_code == 201, created.text
    user: dict[str, Any] = created.json()
    return user


Event = Callable[[httpx.AsyncClient, dict[str, Any], Sessions], Awaitable[httpx.Response]]


async def _own_change(admin: httpx.AsyncClient, user: dict[str, Any], ada: Sessions) -> Any:
    body = {"currentPassword": ADA_PASSWORD, "newPassword": "ada's next passphrase"}
    return await ada.http.put("/api/v1/auth/password", json=body, headers=ada.bearer)


async def _reset(admin: httpx.AsyncClient, user: dict[str, Any], ada: Sessions) -> Any:
    return await admin.patch(f"{USERS}/{user['id']}", json={"password": "an admin's reset phrase"})


async def _role(admin: httpx.AsyncClient, user: dict[str, Any], ada: Sessions) -> Any:
    return await admin.patch(f"{USERS}/{user['id']}", json={"role": "Operator"})


async def _deactivate(admin: httpx.AsyncClient, user: dict[str, Any], ada: Sessions) -> Any:
    return await admin.patch(f"{USERS}/{user['id']}", json={"isActive": False})


async def _delete(admin: httpx.AsyncClient, user: dict[str, Any], ada: Sessions) -> Any:
    return await admin.delete(f"{USERS}/{user['id']}")


@pytest.mark.parametrize(
    "event",
    [_own_change, _reset, _role, _deactivate, _delete],
    ids=["own-password", "admin-reset", "role-change", "deactivation", "deletion"],
)
async def test_each_event_ends_every_session_of_the_user_at_once(
    app: FastAPI, admin: httpx.AsyncClient, event: Event
) -> None:
    user = await _user(admin)
    async with api_client(app, None) as anon:
        first = await Sessions(anon, "ada", ADA_PASSWORD).open()
        second = await Sessions(anon, "ada", ADA_PASSWORD).open()
        assert await first.alive() == LIVE
        assert await second.refreshed() == 200
        done = await event(admin, user, first)
        assert done.status_code in (200, 204), done.text
        assert await first.alive() == ENDED
        assert await second.alive() == ENDED
        assert await first.refreshed() == 401
        assert await second.refreshed() == 401
    # Other users' sessions go on.
    assert (await admin.get("/api/v1/auth/me")).status_code == 200


async def test_a_change_that_changes_nothing_ends_nothing(
    app: FastAPI, admin: httpx.AsyncClient
) -> None:
    user = await _user(admin)
    async with api_client(app, None) as anon:
        sessions = await Sessions(anon, "ada", ADA_PASSWORD).open()
        for change in ({"role": "Viewer"}, {"isActive": True}):
            assert (await admin.patch(f"{USERS}/{user['id']}", json=change)).status_code == 200
        assert await sessions.alive() == LIVE
        assert await sessions.refreshed() == 200


async def test_an_admin_setting_its_own_password_needs_the_current_one(
    app: FastAPI, runtime: Runtime
) -> None:
    me = await ensure_user(runtime.auth, "admin")
    new = {"password": "the admin's new passphrase"}
    async with api_client(app, "admin") as http:
        missing = await http.patch(f"{USERS}/{me.id}", json=new)
        assert missing.status_code == 422, missing.text
        assert missing.json()["errors"][0]["field"] == "currentPassword"
        wrong = await http.patch(
            f"{USERS}/{me.id}", json={**new, "currentPassword": "not it at all"}
        )
        assert wrong.status_code == 422, wrong.text
        assert wrong.json()["errors"][0]["field"] == "currentPassword"
        # Nothing changed: the old password still signs in, the session goes on.
        assert (await http.get("/api/v1/auth/me")).status_code == 200
        right = await http.patch(f"{USERS}/{me.id}", json={**new, "currentPassword": PASSWORD})
        assert right.status_code == 200, right.text
        # Its own sessions end too (this one included).
        assert (await http.get("/api/v1/auth/me")).status_code == 401
    async with api_client(app, None) as anon:
        login = {"username": username_of("admin"), "password": new["password"]}
        assert (await anon.post("/api/v1/auth/login", json=login)).status_code == 200
        # The audit entry holds neither password.
        token = (await anon.post("/api/v1/auth/login", json=login)).json()["accessToken"]
        entries = await anon.get(
            "/api/v1/audit",
            params={"resourceId": str(me.id)},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert PASSWORD not in entries.text
    assert new["password"] not in entries.text


# --- the signing secret rotates -------------------------------------------------------------


def _signed(runtime: Runtime, user_id: str, secret: str) -> str:
    now = utcnow()
    claims = {
        "iss": runtime.auth.config.issuer,
        "aud": runtime.auth.config.audience,
        "jti": "rotated",
        "sub": user_id,
        "name": "test-operator",
        "role": "Operator",
        "iat": now,
        "nbf": now,
        "exp": now + timedelta(minutes=5),
    }
    return jwt.encode(claims, secret, algorithm="HS256")


async def test_a_token_signed_with_a_previous_secret_is_accepted_an_unlisted_one_is_not(
    app: FastAPI, runtime: Runtime
) -> None:
    user = await ensure_user(runtime.auth, "operator")
    assert runtime.auth.config.previous_secrets == (PREVIOUS.encode(),)
    old = _signed(runtime, str(user.id), PREVIOUS)
    stranger = _signed(runtime, str(user.id), UNLISTED)
    async with api_client(app, None) as anon:
        me = await anon.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {old}"})
        assert me.status_code == 200, me.text
        assert me.json()["username"] == "test-operator"
        # The dashboard's session cookie is the same token: accepted the same way.
        page = await anon.get("/jobs", headers={"Cookie": f"{ACCESS_COOKIE}={old}", **HTML})
        assert page.status_code == 200
        refused = await anon.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {stranger}"})
        assert refused.status_code == 401
        page = await anon.get("/jobs", headers={"Cookie": f"{ACCESS_COOKIE}={stranger}", **HTML})
        assert page.status_code == 303
        # What is signed now is signed with the current secret, not a previous one.
        login = {"username": "test-operator", "password": PASSWORD}
        fresh = (await anon.post("/api/v1/auth/login", json=login)).json()["accessToken"]
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(fresh, PREVIOUS, algorithms=["HS256"], audience=runtime.auth.config.audience)
