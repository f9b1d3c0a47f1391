"""``rota user …``: user administration straight on the store (no server needed)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rota.app.settings import Settings
from rota.core.errors import NotFoundError
from rota.core.models import utcnow
from rota.core.security import Role, User
from rota.services.auth import AuthConfig, AuthService


@asynccontextmanager
async def _auth(settings: Settings) -> AsyncIterator[AuthService]:
    """An :class:`AuthService` on the settings' store, migrated first if it is SQLite. It
    issues no tokens, so any key will do."""
    from rota.app.adapters import make_store, upgrade_schema

    url = settings.effective_database_url
    if url.startswith("sqlite"):
        await upgrade_schema(url)  # creates the file (0600) and its directory (0700)
    store = make_store(url)
    await store.open()
    auth = AuthService(store, AuthConfig(secret=secrets.token_bytes(32)), utcnow)
    try:
        yield auth
    finally:
        auth.close()
        await store.close()


async def create_user(settings: Settings, name: str, password: str, role: Role) -> User:
    async with _auth(settings) as auth:
        return await auth.create_user(name, password, role)


async def reset_password(settings: Settings, name: str, password: str) -> User:
    async with _auth(settings) as auth:
        user = await auth.find_user(name)
        if user is None:
            raise NotFoundError("user", name)
        return await auth.update_user(user.id, password=password, is_active=True)


async def list_users(settings: Settings) -> list[User]:
    async with _auth(settings) as auth:
        users: list[User] = []
        cursor: str | None = None
        while True:
            page = await auth.list_users(limit=1000, cursor=cursor)
            users += page.items
            cursor = page.next_cursor
            if cursor is None:
                return users
