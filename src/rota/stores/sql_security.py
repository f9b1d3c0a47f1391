"""The SQL store's security part: users, refresh tokens and the audit log (SQLite and
PostgreSQL). A mixin of :class:`rota.stores.sql.SqlStore`, kept apart from the scheduler's
hot paths."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import ColumnElement, Row, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.errors import ConflictError, NotFoundError, ValidationError
from rota.core.ports import Page
from rota.core.security import (
    AuditEntry,
    AuditQuery,
    RefreshOutcome,
    RefreshStatus,
    RefreshToken,
    Role,
    User,
)
from rota.stores.schema import audit_entries, refresh_tokens, users

EXPIRED_KEPT = timedelta(days=1)
"""Refresh tokens expired longer ago than this are deleted when tokens are revoked."""


def _to_user(row: Row[Any]) -> User:
    return User(
        id=row.id,
        username=row.username,
        password_hash=row.password_hash,
        role=Role(row.role),
        is_active=row.is_active,
        failed_logins=row.failed_logins,
        locked_until=row.locked_until,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _user_row(user: User) -> dict[str, Any]:
    return {
        "id": user.id,
        "username": user.username,
        "password_hash": user.password_hash,
        "role": user.role.value,
        "is_active": user.is_active,
        "failed_logins": user.failed_logins,
        "locked_until": user.locked_until,
        "created_at": user.created_at,
        "updated_at": user.updated_at,
    }


def _token_row(token: RefreshToken) -> dict[str, Any]:
    return {
        "token_hash": token.token_hash,
        "family_id": token.family_id,
        "user_id": token.user_id,
        "issued_at": token.issued_at,
        "expires_at": token.expires_at,
        "used_at": token.used_at,
        "revoked_at": token.revoked_at,
    }


def _to_audit(row: Row[Any]) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        at=row.at,
        actor=row.actor,
        action=row.action,
        resource_type=row.resource_type,
        resource_id=row.resource_id,
        before=row.before,
        after=row.after,
    )


def _cursor_id(cursor: str) -> UUID:
    try:
        return UUID(hex=cursor)
    except ValueError:
        raise ValidationError("invalid cursor", field="cursor") from None


def _is_admin(user: User) -> bool:
    return user.is_active and user.role is Role.ADMIN


class SecurityQueries:
    """Users, refresh tokens and audit entries of the :class:`~rota.core.ports.Store` port."""

    if TYPE_CHECKING:

        def _read(self) -> AbstractAsyncContextManager[AsyncConnection]: ...

        def _write(self) -> AbstractAsyncContextManager[AsyncConnection]: ...

    # --- users ------------------------------------------------------------------------------

    async def create_user(self, user: User) -> None:
        async with self._write() as conn:
            taken = await conn.execute(select(users.c.id).where(users.c.username == user.username))
            if taken.first() is not None:
                raise ConflictError(f"the username {user.username!r} is taken")
            try:
                await conn.execute(insert(users), [_user_row(user)])
            except IntegrityError as exc:
                raise ConflictError(f"the username {user.username!r} is taken") from exc

    async def get_user(self, user_id: UUID) -> User:
        async with self._read() as conn:
            row = (await conn.execute(select(users).where(users.c.id == user_id))).first()
        if row is None:
            raise NotFoundError("user", user_id)
        return _to_user(row)

    async def find_user(self, username: str) -> User | None:
        async with self._read() as conn:
            row = (await conn.execute(select(users).where(users.c.username == username))).first()
        return None if row is None else _to_user(row)

    async def list_users(self, limit: int = 50, cursor: str | None = None) -> Page[User]:
        stmt = select(users).order_by(users.c.id).limit(limit + 1)
        if cursor:
            stmt = stmt.where(users.c.id > _cursor_id(cursor))
        async with self._read() as conn:
            items = [_to_user(row) for row in await conn.execute(stmt)]
        if len(items) > limit:
            items = items[:limit]
            return Page(items=items, next_cursor=items[-1].id.hex)
        return Page(items=items)

    async def count_admins(self) -> int:
        async with self._read() as conn:
            return await self._count_admins(conn)

    @staticmethod
    async def _count_admins(conn: AsyncConnection, *, lock: bool = False) -> int:
        """Active admins; with ``lock``, their rows are locked (PostgreSQL) so that two
        concurrent demotions cannot each leave the other as the last one."""
        stmt = select(users.c.id).where(users.c.role == Role.ADMIN.value, users.c.is_active)
        if lock:
            stmt = stmt.with_for_update()
        return len((await conn.execute(stmt)).all())

    async def _locked_user(self, conn: AsyncConnection, user_id: UUID) -> User:
        row = (
            await conn.execute(select(users).where(users.c.id == user_id).with_for_update())
        ).first()
        if row is None:
            raise NotFoundError("user", user_id)
        return _to_user(row)

    async def update_user(self, user: User) -> User:
        async with self._write() as conn:
            admins = await self._count_admins(conn, lock=True)
            stored = await self._locked_user(conn, user.id)
            if _is_admin(stored) and not _is_admin(user) and admins <= 1:
                raise ConflictError(f"{stored.username} is the last active Admin")
            if user.username != stored.username:
                taken = await conn.execute(
                    select(users.c.id).where(users.c.username == user.username)
                )
                if taken.first() is not None:
                    raise ConflictError(f"the username {user.username!r} is taken")
            values = _user_row(user)
            del values["id"], values["created_at"]
            await conn.execute(update(users).where(users.c.id == user.id).values(values))
            row = (await conn.execute(select(users).where(users.c.id == user.id))).one()
        return _to_user(row)

    async def delete_user(self, user_id: UUID) -> User:
        async with self._write() as conn:
            admins = await self._count_admins(conn, lock=True)
            stored = await self._locked_user(conn, user_id)
            if _is_admin(stored) and admins <= 1:
                raise ConflictError(f"{stored.username} is the last active Admin")
            await conn.execute(delete(refresh_tokens).where(refresh_tokens.c.user_id == user_id))
            await conn.execute(delete(users).where(users.c.id == user_id))
        return stored

    async def record_login_failure(
        self, user_id: UUID, *, max_failures: int, lock_until: datetime
    ) -> User:
        c = users.c
        async with self._write() as conn:
            stored = await self._locked_user(conn, user_id)
            failures = stored.failed_logins + 1
            values: dict[str, Any] = {"failed_logins": failures}
            if failures >= max_failures:
                values = {"failed_logins": 0, "locked_until": lock_until}
            await conn.execute(update(users).where(c.id == user_id).values(values))
            row = (await conn.execute(select(users).where(c.id == user_id))).one()
        return _to_user(row)

    async def record_login_success(self, user_id: UUID) -> None:
        c = users.c
        stmt = (
            update(users)
            .where(c.id == user_id, (c.failed_logins != 0) | c.locked_until.is_not(None))
            .values(failed_logins=0, locked_until=None)
        )
        async with self._write() as conn:
            await conn.execute(stmt)

    # --- refresh tokens -----------------------------------------------------------------------

    async def add_refresh_token(self, token: RefreshToken) -> None:
        async with self._write() as conn:
            await conn.execute(insert(refresh_tokens), [_token_row(token)])

    async def rotate_refresh_token(
        self, token_hash: str, successor: RefreshToken, now: datetime
    ) -> RefreshOutcome:
        t = refresh_tokens.c
        async with self._write() as conn:
            stmt = select(refresh_tokens).where(t.token_hash == token_hash).with_for_update()
            row = (await conn.execute(stmt)).first()
            if row is None or row.expires_at <= now:
                return RefreshOutcome(RefreshStatus.INVALID)
            if row.used_at is not None or row.revoked_at is not None:
                await conn.execute(
                    update(refresh_tokens)
                    .where(t.family_id == row.family_id, t.revoked_at.is_(None))
                    .values(revoked_at=now)
                )
                return RefreshOutcome(RefreshStatus.REUSED, row.user_id)
            await conn.execute(
                update(refresh_tokens).where(t.token_hash == token_hash).values(used_at=now)
            )
            values = _token_row(successor)
            values.update(family_id=row.family_id, user_id=row.user_id)
            await conn.execute(insert(refresh_tokens), [values])
        return RefreshOutcome(RefreshStatus.ROTATED, row.user_id)

    async def revoke_refresh_tokens(
        self,
        now: datetime,
        *,
        token_hash: str | None = None,
        user_id: UUID | None = None,
    ) -> int:
        t = refresh_tokens.c
        revoked = 0
        async with self._write() as conn:
            conditions: list[ColumnElement[bool]] = []
            if token_hash is not None:
                family = select(t.family_id).where(t.token_hash == token_hash).scalar_subquery()
                conditions.append(t.family_id == family)
            if user_id is not None:
                conditions.append(t.user_id == user_id)
            for condition in conditions:
                result = await conn.execute(
                    update(refresh_tokens)
                    .where(condition, t.revoked_at.is_(None), t.used_at.is_(None))
                    .values(revoked_at=now)
                )
                revoked += result.rowcount
            await conn.execute(delete(refresh_tokens).where(t.expires_at < now - EXPIRED_KEPT))
        return revoked

    # --- audit --------------------------------------------------------------------------------

    async def append_audit(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        rows = [
            {
                "id": e.id,
                "at": e.at,
                "actor": e.actor,
                "action": e.action,
                "resource_type": e.resource_type,
                "resource_id": e.resource_id,
                "before": e.before,
                "after": e.after,
            }
            for e in entries
        ]
        async with self._write() as conn:
            await conn.execute(insert(audit_entries), rows)

    async def list_audit(self, query: AuditQuery) -> Page[AuditEntry]:
        a = audit_entries.c
        stmt = select(audit_entries).order_by(a.id.desc()).limit(query.limit + 1)
        filters = {
            a.actor: query.actor,
            a.action: query.action,
            a.resource_type: query.resource_type,
            a.resource_id: query.resource_id,
        }
        for column, value in filters.items():
            if value is not None:
                stmt = stmt.where(column == value)
        if query.after is not None:
            stmt = stmt.where(a.at >= query.after)
        if query.before is not None:
            stmt = stmt.where(a.at < query.before)
        if query.cursor:
            stmt = stmt.where(a.id < _cursor_id(query.cursor))
        async with self._read() as conn:
            items = [_to_audit(row) for row in await conn.execute(stmt)]
        if len(items) > query.limit:
            items = items[: query.limit]
            return Page(items=items, next_cursor=items[-1].id.hex)
        return Page(items=items)


__all__ = ("SecurityQueries",)
