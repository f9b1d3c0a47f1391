"""Who is looking at the dashboard: sign-in through the API's own auth endpoints.

The dashboard holds no credentials of its own. Its login form is handed to
``POST /api/v1/auth/login`` (in process, through ASGI, with the browser's address so throttling
and lockout apply per client); the tokens come back as two HttpOnly, SameSite=Strict cookies,
``Secure`` by the API's own rule (:attr:`rota.app.settings.Settings.cookies_secure`):

- ``rota_access`` (path ``/``, for the access token's lifetime): the access JWT, which the API
  also accepts from the cookie, together with the ``X-Rota-CSRF`` header on changes;
- ``rota_refresh`` (path :data:`SESSION_PATH` only, for the API's refresh-token lifetime): sent
  only to the dashboard's session routes (refresh, sign-out, resume), never with a page.

Each page asks ``GET /api/v1/auth/me`` who the access token belongs to. A page whose access
token has expired does not refresh it: it sends the browser to ``/ui/session/resume``, whose
script refreshes (``POST /ui/session/refresh``, one at a time across the browser's tabs) and
comes back. Every state-changing dashboard route needs the ``X-Rota-CSRF: 1`` header (see
:func:`require_csrf`).

A refresh token works once. The dashboard never hands a used one a second life: a request
presenting a token whose refresh is under way gets 409 and no tokens (the browser's cookies
are being renewed by the other request), and one presenting it afterwards reaches the API,
which takes it for a stolen token and ends the login.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
from fastapi import Request
from starlette.responses import Response

from rota.api.deps import get_runtime
from rota.api.paths import app_url, cookie_path
from rota.api.security import ACCESS_COOKIE, CSRF_HEADER, REFRESH_COOKIE, SAFE_METHODS
from rota.core.errors import PermissionDeniedError

__all__ = ["ACCESS_COOKIE", "CSRF_HEADER", "REFRESH_COOKIE"]  # the API's names, used by pages too

AUTH_PREFIX: Final = "/api/v1/auth"
SESSION_PATH: Final = "/ui/session"
"""The path of the dashboard's session routes, and of its refresh cookie."""


class Role(enum.IntEnum):
    """The API's roles, in order of what they may do."""

    VIEWER = 0
    OPERATOR = 1
    ADMIN = 2

    @classmethod
    def parse(cls, value: object) -> Role:
        text = str(getattr(value, "value", value)).strip().lower()
        for role in cls:
            if role.name.lower() == text:
                return role
        return cls.VIEWER

    @property
    def label(self) -> str:
        return self.name.title()


@dataclass(frozen=True, slots=True)
class DashboardUser:
    username: str
    role: Role

    @property
    def can_operate(self) -> bool:
        """Jobs, trigger, cancel, resolve, dispatcher control."""
        return self.role >= Role.OPERATOR

    @property
    def is_admin(self) -> bool:
        return self.role >= Role.ADMIN


class LoginRequired(Exception):
    """The page needs a signed-in user; the handler sends the browser to the login page."""


@dataclass(slots=True)
class Tokens:
    access: str
    refresh: str | None
    expires_in: int | None


def require_csrf(request: Request) -> None:
    """A dependency of every dashboard route: a change (any method but GET, HEAD, OPTIONS)
    must carry ``X-Rota-CSRF: 1``, which a cross-site form, link or image cannot send."""
    if request.method not in SAFE_METHODS and request.headers.get(CSRF_HEADER) != "1":
        raise PermissionDeniedError(f"a dashboard change must send the header {CSRF_HEADER}: 1")


def api_paths(request: Request) -> frozenset[str]:
    """The paths the API of this app offers (from its OpenAPI document, read once)."""
    cached: frozenset[str] | None = getattr(request.app.state, "rota_api_paths", None)
    if cached is None:
        cached = frozenset(request.app.openapi().get("paths", {}))
        request.app.state.rota_api_paths = cached
    return cached


def internal_client(request: Request) -> httpx.AsyncClient:
    """A client on this very app, in process, carrying the browser's address."""
    host = request.client.host if request.client else "127.0.0.1"
    port = request.client.port if request.client else 0
    transport = httpx.ASGITransport(app=request.app, client=(host, port))
    return httpx.AsyncClient(transport=transport, base_url="http://rota.internal", timeout=10)


def _tokens(body: dict[str, Any]) -> Tokens:
    expires = body.get("expiresIn")
    return Tokens(
        access=str(body["accessToken"]),
        refresh=body.get("refreshToken"),
        expires_in=int(expires) if isinstance(expires, int | float) else None,
    )


async def login(request: Request, username: str, password: str) -> Tokens | str:
    """The tokens, or the text of the refusal."""
    async with internal_client(request) as api:
        answer = await api.post(
            f"{AUTH_PREFIX}/login", json={"username": username, "password": password}
        )
    if answer.status_code == 200:
        return _tokens(answer.json())
    if answer.status_code in (400, 401, 422):
        return "Wrong username or password."
    try:
        detail = answer.json().get("detail") or answer.json().get("title")
    except ValueError:
        detail = None
    return str(detail or f"Sign-in failed ({answer.status_code}).")


async def logout(request: Request) -> None:
    """Revoke the refresh token's login (with a fresh access token if the cookie's expired)."""
    access = request.cookies.get(ACCESS_COOKIE)
    refresh_token = request.cookies.get(REFRESH_COOKIE)
    if not refresh_token:
        return
    async with internal_client(request) as api:
        answer = await _logout(api, access, refresh_token)
        if answer.status_code == 401:
            renewed = await api.post(f"{AUTH_PREFIX}/refresh", json={"refreshToken": refresh_token})
            if renewed.status_code == 200:
                tokens = _tokens(renewed.json())
                await _logout(api, tokens.access, tokens.refresh)


async def _logout(
    api: httpx.AsyncClient, access: str | None, refresh_token: str | None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {access}"} if access else {}
    return await api.post(
        f"{AUTH_PREFIX}/logout", json={"refreshToken": refresh_token}, headers=headers
    )


async def _me(api: httpx.AsyncClient, access: str) -> DashboardUser | None:
    answer = await api.get(f"{AUTH_PREFIX}/me", headers={"Authorization": f"Bearer {access}"})
    if answer.status_code != 200:
        return None
    body = answer.json()
    return DashboardUser(username=str(body.get("username", "")), role=Role.parse(body.get("role")))


class Superseded(enum.Enum):
    """The refresh token is being used by another request right now."""

    TOKEN = "superseded"


SUPERSEDED: Final = Superseded.TOKEN


class Refresher:
    """At most one refresh per refresh token at a time in this process, its result shared
    with nobody.

    Parallel requests of one page (or of two tabs) that present the same refresh token while
    it is being used get :data:`SUPERSEDED` and no tokens: the first request's answer renews
    the browser's cookies, and the page's script waits for it (one refresh at a time per
    browser) before trying again. Nothing is remembered afterwards: a used token presented
    later goes to the API, which refuses it and ends its login (a stolen token)."""

    def __init__(self) -> None:
        self._in_flight: set[str] = set()

    async def refresh(
        self, token: str, call: Callable[[], Awaitable[Tokens | None]]
    ) -> Tokens | Superseded | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        if key in self._in_flight:
            return SUPERSEDED
        self._in_flight.add(key)
        try:
            return await call()
        finally:
            self._in_flight.discard(key)


def _refresher(request: Request) -> Refresher:
    refresher: Refresher | None = getattr(request.app.state, "rota_refresher", None)
    if refresher is None:
        refresher = Refresher()
        request.app.state.rota_refresher = refresher
    return refresher


async def refresh(request: Request) -> Tokens | Superseded | None:
    """New tokens for the refresh cookie (``None``: it is missing or no longer good;
    :data:`SUPERSEDED`: another request is using it right now)."""
    token = request.cookies.get(REFRESH_COOKIE)
    if not token:
        return None

    async def call() -> Tokens | None:
        async with internal_client(request) as api:
            answer = await api.post(f"{AUTH_PREFIX}/refresh", json={"refreshToken": token})
        return _tokens(answer.json()) if answer.status_code == 200 else None

    return await _refresher(request).refresh(token, call)


async def current_user(request: Request) -> DashboardUser:
    """The signed-in user of the access token (a bearer header or the cookie).

    Raises :class:`LoginRequired` when there is none or it is no longer good (expired,
    revoked): the handler sends the browser to resume its session or sign in."""
    access = _bearer(request) or request.cookies.get(ACCESS_COOKIE)
    if access:
        async with internal_client(request) as api:
            user = await _me(api, access)
        if user is not None:
            return user
    raise LoginRequired


def _bearer(request: Request) -> str | None:
    """A bearer token sent by a program (the dashboard itself uses the cookie)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def access_token(request: Request) -> str | None:
    """The access token of this request's user."""
    return _bearer(request) or request.cookies.get(ACCESS_COOKIE)


def set_cookies(request: Request, response: Response, tokens: Tokens) -> None:
    """The session's cookies, as the API sets its own: ``Secure`` by the same setting, the
    refresh token's for the API's refresh-token lifetime, on the session routes only."""
    runtime = get_runtime(request)
    secure = runtime.settings.cookies_secure
    response.set_cookie(
        ACCESS_COOKIE,
        tokens.access,
        max_age=tokens.expires_in,
        httponly=True,
        samesite="strict",
        secure=secure,
        path=cookie_path(request),
    )
    if tokens.refresh:
        response.set_cookie(
            REFRESH_COOKIE,
            tokens.refresh,
            max_age=int(runtime.auth.config.refresh_ttl.total_seconds()),
            httponly=True,
            samesite="strict",
            secure=secure,
            path=cookie_path(request, SESSION_PATH),
        )
        _drop_legacy_refresh(request, response, secure)


def _drop_legacy_refresh(request: Request, response: Response, secure: bool) -> None:
    """Earlier versions kept the refresh cookie at ``/`` (sent with every page)."""
    response.delete_cookie(
        REFRESH_COOKIE, path=cookie_path(request), httponly=True, samesite="strict", secure=secure
    )


def clear_cookies(request: Request, response: Response) -> None:
    """Remove the session's cookies (and a refresh cookie an earlier version kept at ``/``)."""
    secure = get_runtime(request).settings.cookies_secure
    for name, path in ((ACCESS_COOKIE, "/"), (REFRESH_COOKIE, SESSION_PATH)):
        response.delete_cookie(
            name, path=cookie_path(request, path), httponly=True, samesite="strict", secure=secure
        )
    _drop_legacy_refresh(request, response, secure)


def safe_next(value: str | None, home: str = "/") -> str:
    """A path of the dashboard to go to after signing in (never another site, nor another
    part of the site the app is mounted in); ``home`` (the dashboard's overview, with the
    app's mount prefix) when there is none."""
    if not value or not value.startswith(home) or value.startswith("//") or "\\" in value:
        return home
    return value


def home(request: Request) -> str:
    """The dashboard's overview, as the browser asks for it (the mount prefix in front)."""
    return app_url(request, "/")
