"""An httpx client on a Rota ASGI app, for the API tests.

Every API test builds its client here: the client is signed in as a user of ``role``
(``test-admin``, ``test-operator``, ``test-viewer``, created in the app's store on first use)
with a bearer access token; ``role=None`` gives an anonymous client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import httpx
from fastapi import FastAPI

from rota.core.errors import ConflictError
from rota.core.ids import new_id
from rota.core.security import Principal, Role, User
from rota.services.auth import AuthService

PASSWORD: Final = "correct horse battery staple"
"""The password of every test user (it passes the policy)."""

_hashes: dict[str, str] = {}


def username_of(role: str | Role) -> str:
    return f"test-{Role.parse(str(role)).value.lower()}"


async def ensure_user(auth: AuthService, role: str | Role) -> User:
    """The test user of ``role`` in the app's store (created if absent; the password is
    hashed once per test session)."""
    name = username_of(role)
    user = await auth.find_user(name)
    if user is not None:
        return user
    if PASSWORD not in _hashes:
        _hashes[PASSWORD] = await auth.hash_password(PASSWORD)
    now = auth.now()
    user = User(
        id=new_id(),
        username=name,
        password_hash=_hashes[PASSWORD],
        role=Role.parse(str(role)),
        created_at=now,
        updated_at=now,
    )
    try:
        await auth.store.create_user(user)
    except ConflictError:
        found = await auth.find_user(name)
        assert found is not None
        return found
    return user


async def access_token(app: FastAPI, role: str | Role) -> str:
    """A fresh access token of the test user of ``role``."""
    auth: AuthService = app.state.runtime.auth
    return auth.access_token_for(await ensure_user(auth, role))


@asynccontextmanager
async def api_client(
    app: FastAPI, role: str | Role | None = "admin"
) -> AsyncIterator[httpx.AsyncClient]:
    """A client on ``app`` (base URL ``http://rota``) signed in with ``role`` (``None``:
    anonymous)."""
    headers = {}
    if role is not None:
        headers["Authorization"] = f"Bearer {await access_token(app, role)}"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://rota", headers=headers
    ) as http:
        yield http


async def api_key(
    app: FastAPI,
    role: str | Role,
    *,
    job_types: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
    name: str | None = None,
) -> str:
    """A new API key of ``role`` (with a scope if ``job_types`` or ``tags``), created by the
    test Admin through the service: its token, ``rota_<id>_<secret>``."""
    runtime = app.state.runtime
    admin = await ensure_user(runtime.auth, Role.ADMIN)
    by = Principal(admin.id, admin.username, admin.role)
    _, token = await runtime.api_keys.create(
        by,
        name=name or f"test-key-{new_id().hex[:12]}",
        role=Role.parse(str(role)),
        job_types=job_types,
        tags=tags,
    )
    token_: str = token
    return token_


@asynccontextmanager
async def api_key_client(
    app: FastAPI,
    role: str | Role = "admin",
    *,
    job_types: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
    header: str = "Authorization",
) -> AsyncIterator[httpx.AsyncClient]:
    """A client on ``app`` that sends a new API key of ``role`` (``Authorization: Bearer``,
    or ``X-API-Key`` with ``header="X-API-Key"``)."""
    token = await api_key(app, role, job_types=job_types, tags=tags)
    value = f"Bearer {token}" if header == "Authorization" else token
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://rota", headers={header: value}
    ) as http:
        yield http
