"""The SQL store's :class:`~rota.core.ports.sessions.SessionStore` slice: a user changed and
its sessions ended in one transaction (SQLite and PostgreSQL)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import case, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.security import User
from rota.stores.schema import refresh_tokens, users
from rota.stores.sql.security import _at, _to_user


class SessionQueries:
    """Ends a user's sessions: ``users.tokens_valid_after`` (migration 0027) and the refresh
    tokens."""

    if TYPE_CHECKING:

        def _write(self) -> AbstractAsyncContextManager[AsyncConnection]: ...

        async def _update_user(self, conn: AsyncConnection, user: User) -> User: ...

    async def update_user_ending_sessions(self, user: User, at: datetime) -> User:
        u, t = users.c, refresh_tokens.c
        async with self._write() as conn:
            await self._update_user(conn, user)
            later = case(
                (u.tokens_valid_after.is_(None), _at(at)),
                (u.tokens_valid_after < _at(at), _at(at)),
                else_=u.tokens_valid_after,
            )
            await conn.execute(
                update(users).where(u.id == user.id).values(tokens_valid_after=later)
            )
            await conn.execute(
                update(refresh_tokens)
                .where(t.user_id == user.id, t.revoked_at.is_(None), t.used_at.is_(None))
                .values(revoked_at=at)
            )
            row = (await conn.execute(select(users).where(u.id == user.id))).one()
        return _to_user(row)


__all__ = ("SessionQueries",)
