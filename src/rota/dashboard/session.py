"""Who is looking at the dashboard: sign-in through the API's own auth endpoints.

The dashboard holds no credentials of its own. Its login form is handed to
``POST /api/v1/auth/login`` (in process, through ASGI, with the browser's address so throttling
and lockout apply per client); the tokens come back as two HttpOnly, SameSite=Strict cookies:
``rota_access`` (the access JWT, which the API also accepts from the cookie, together with the
``X-Rota-CSRF`` header on changes) and ``rota_refresh``. Each page asks ``GET /api/v1/auth/me``
who the token belongs to, refreshes an expired access token once, and otherwise sends the
browser to the login page.

Without the auth routes (a build of the API that has none) the dashboard says so on every page
and acts as an unnamed Admin, like the API itself.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import Request
from starlette.responses import Response

ACCESS_COOKIE = "rota_access"
REFRESH_COOKIE = "rota_refresh"
CSRF_HEADER = "X-Rota-CSRF"
AUTH_PREFIX = "/api/v1/auth"
REFRESH_GRACE_SECONDS = 30.0
"""How long the tokens a refresh gave are handed to other requests with the same refresh
token (see :class:`Refresher`)."""
REFRESH_MAX_AGE = 30 * 24 * 3600
"""Seconds the refresh cookie is kept; the server decides how long the token itself is good."""


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


@dataclass(slots=True)
class SessionState:
    """Cookies to set or clear on the response of the current request."""

    tokens: Tokens | None = None
    clear: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


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


class Refresher:
    """One refresh per refresh token in this process, its result shared for a short while.

    A page fires several requests at once (fragments, charts, the event stream); once the
    access token has expired each would refresh with the same refresh token, and the API takes
    the second use of a refresh token for a stolen one and ends the login. So concurrent and
    immediately following requests with the same refresh token get the first one's tokens.
    """

    def __init__(self, grace_seconds: float = REFRESH_GRACE_SECONDS) -> None:
        self._grace = grace_seconds
        self._locks: dict[str, asyncio.Lock] = {}
        self._done: dict[str, tuple[float, Tokens | None]] = {}

    async def refresh(
        self, token: str, call: Callable[[], Awaitable[Tokens | None]]
    ) -> Tokens | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        for old in [k for k, (at, _) in self._done.items() if now - at > self._grace]:
            del self._done[old]
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                if key in self._done:
                    return self._done[key][1]
                tokens = await call()
                self._done[key] = (time.monotonic(), tokens)
                return tokens
        finally:
            if not lock.locked():
                self._locks.pop(key, None)


def _refresher(request: Request) -> Refresher:
    refresher: Refresher | None = getattr(request.app.state, "rota_refresher", None)
    if refresher is None:
        refresher = Refresher()
        request.app.state.rota_refresher = refresher
    return refresher


async def refresh(request: Request) -> Tokens | None:
    """New tokens for the refresh cookie (``None``: it is missing or no longer good)."""
    token = request.cookies.get(REFRESH_COOKIE)
    if not token:
        return None

    async def call() -> Tokens | None:
        async with internal_client(request) as api:
            answer = await api.post(f"{AUTH_PREFIX}/refresh", json={"refreshToken": token})
        return _tokens(answer.json()) if answer.status_code == 200 else None

    return await _refresher(request).refresh(token, call)


async def current_user(request: Request) -> DashboardUser:
    """The signed-in user (refreshing the access token once if it has expired).

    Raises :class:`LoginRequired` when nobody is signed in. Cookies to set are left in
    ``request.state.rota_session`` for :func:`apply_cookies`.
    """
    state = session_state(request)
    access = _bearer(request) or request.cookies.get(ACCESS_COOKIE)
    async with internal_client(request) as api:
        if access:
            user = await _me(api, access)
            if user is not None:
                return user
    tokens = await refresh(request)
    if tokens is not None:
        async with internal_client(request) as api:
            user = await _me(api, tokens.access)
        if user is not None:
            state.tokens = tokens
            return user
    state.clear = True
    raise LoginRequired


def _bearer(request: Request) -> str | None:
    """A bearer token sent by a program (the dashboard itself uses the cookie)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def access_token(request: Request) -> str | None:
    """The access token of this request's user (a fresh one if this request refreshed it)."""
    state: SessionState | None = getattr(request.state, "rota_session", None)
    if state is not None and state.tokens is not None:
        return state.tokens.access
    return _bearer(request) or request.cookies.get(ACCESS_COOKIE)


def session_state(request: Request) -> SessionState:
    state = getattr(request.state, "rota_session", None)
    if state is None:
        state = SessionState()
        request.state.rota_session = state
    return state


def set_cookies(request: Request, response: Response, tokens: Tokens) -> None:
    secure = request.url.scheme == "https"
    response.set_cookie(
        ACCESS_COOKIE,
        tokens.access,
        max_age=tokens.expires_in,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
    )
    if tokens.refresh:
        response.set_cookie(
            REFRESH_COOKIE,
            tokens.refresh,
            max_age=REFRESH_MAX_AGE,
            httponly=True,
            samesite="strict",
            secure=secure,
            path="/",
        )


def clear_cookies(response: Response) -> None:
    response.delete_cookie(ACCESS_COOKIE, path="/", httponly=True, samesite="strict")
    response.delete_cookie(REFRESH_COOKIE, path="/", httponly=True, samesite="strict")


def apply_cookies(request: Request, response: Response) -> Response:
    """Set the cookies a refresh produced (or clear them) on ``response``."""
    state = getattr(request.state, "rota_session", None)
    if state is None:
        return response
    if state.tokens is not None:
        set_cookies(request, response, state.tokens)
    elif state.clear:
        clear_cookies(response)
    return response


def safe_next(value: str | None) -> str:
    """A local path to go to after signing in (never another site)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value
