"""The SQL store's security part: users, refresh tokens and the audit log (SQLite and
PostgreSQL). A mixin of :class:`rota.stores.sql.SqlStore`, kept apart from the scheduler's
hot paths."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    Row,
    and_,
    case,
    delete,
    insert,
    literal,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.errors import ConflictError, NotFoundError, ValidationError
from rota.core.records import Page
from rota.core.security import (
    AuditEntry,
    AuditQuery,
    LoginGate,
    LoginReservation,
    RefreshOutcome,
    RefreshStatus,
    RefreshToken,
    Role,
    User,
)
from rota.stores.schema import (
    UtcDateTime,
    audit_entries,
    login_throttles,
    refresh_tokens,
    users,
)
from rota.stores.sql.sealing import Sealing

EXPIRED_KEPT = timedelta(days=1)
"""Refresh tokens expired longer ago than this are deleted when tokens are revoked."""
THROTTLE_IDLE_KEPT = timedelta(days=1)
"""The failed logins of a name that is no user, untouched for this long (and not locked),
are forgotten."""
THROTTLE_PRUNE_BATCH = 100
"""At most this many such rows are deleted by one attempt (bounded work per sign-in)."""


def _at(when: datetime) -> ColumnElement[datetime]:
    """A time as a typed SQL value (inside CASE, where SQLAlchemy cannot infer the type)."""
    return literal(when, UtcDateTime())


def _free(
    locked_until: ColumnElement[datetime], check_until: ColumnElement[datetime], now: datetime
) -> ColumnElement[bool]:
    """Neither locked nor being checked at ``now``."""
    return and_(
        or_(locked_until.is_(None), locked_until <= now),
        or_(check_until.is_(None), check_until <= now),
    )


def _refused(
    user: User | None, locked_until: datetime | None, check_until: datetime | None, now: datetime
) -> LoginReservation:
    if locked_until is not None and locked_until > now:
        return LoginReservation(gate=LoginGate.LOCKED, user=user, until=locked_until)
    return LoginReservation(gate=LoginGate.BUSY, user=user, until=check_until)


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
        tokens_valid_after=row.tokens_valid_after,
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


class SecurityQueries(Sealing):
    """Users, refresh tokens and audit entries of the :class:`~rota.core.ports.Store` port
    (a job's audit entries with their job data sealed at rest: :class:`Sealing`)."""

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
            return await self._update_user(conn, user)

    async def _update_user(self, conn: AsyncConnection, user: User) -> User:
        """``update_user`` in the caller's transaction (``tokens_valid_after`` is left as it
        is: :class:`~rota.stores.sql.sessions.SessionQueries` alone moves it)."""
        admins = await self._count_admins(conn, lock=True)
        stored = await self._locked_user(conn, user.id)
        if _is_admin(stored) and not _is_admin(user) and admins <= 1:
            raise ConflictError(f"{stored.username} is the last active Admin")
        if user.username != stored.username:
            taken = await conn.execute(select(users.c.id).where(users.c.username == user.username))
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

    async def reserve_login(
        self,
        username: str,
        *,
        now: datetime,
        max_failures: int,
        lock_until: datetime,
        check_until: datetime,
    ) -> LoginReservation:
        u = users.c
        reach = u.failed_logins + 1 >= max_failures
        claim = (
            update(users)
            .where(u.username == username, _free(u.locked_until, u.login_check_until, now))
            .values(
                failed_logins=case((reach, 0), else_=u.failed_logins + 1),
                locked_until=case((reach, _at(lock_until)), else_=null()),
                login_check_until=check_until,
            )
            .returning(*users.c)
        )
        async with self._write() as conn:
            row = (await conn.execute(claim)).first()
            if row is not None:
                user = _to_user(row)
                return LoginReservation(
                    gate=LoginGate.GRANTED,
                    user=user,
                    until=user.locked_until,
                    locks=user.locked_until is not None,
                )
            row = (await conn.execute(select(users).where(u.username == username))).first()
            if row is not None:
                return _refused(_to_user(row), row.locked_until, row.login_check_until, now)
            return await self._reserve_name(
                conn, username, now, max_failures, lock_until, check_until
            )

    async def _reserve_name(
        self,
        conn: AsyncConnection,
        name: str,
        now: datetime,
        max_failures: int,
        lock_until: datetime,
        check_until: datetime,
    ) -> LoginReservation:
        """``reserve_login`` of a name that is no user: an upsert into ``login_throttles``
        whose update happens only when the name is neither locked nor being checked."""
        t = login_throttles.c
        idle = (
            select(t.name)
            .where(
                t.updated_at < now - THROTTLE_IDLE_KEPT,
                or_(t.locked_until.is_(None), t.locked_until <= now),
            )
            .limit(THROTTLE_PRUNE_BATCH)
            .with_for_update(skip_locked=True)  # never wait for (or deadlock with) another
        )
        await conn.execute(delete(login_throttles).where(t.name.in_(idle.scalar_subquery())))
        first_locks = max_failures <= 1
        values = {
            "name": name,
            "failed_logins": 0 if first_locks else 1,
            "locked_until": lock_until if first_locks else None,
            "check_until": check_until,
            "updated_at": now,
        }
        reach = t.failed_logins + 1 >= max_failures
        insert_ = (
            postgresql.insert(login_throttles)
            if conn.dialect.name == "postgresql"
            else sqlite.insert(login_throttles)
        )
        stmt = (
            insert_.values(values)
            .on_conflict_do_update(
                index_elements=[t.name],
                set_={
                    "failed_logins": case((reach, 0), else_=t.failed_logins + 1),
                    "locked_until": case((reach, _at(lock_until)), else_=null()),
                    "check_until": _at(check_until),
                    "updated_at": _at(now),
                },
                where=_free(t.locked_until, t.check_until, now),
            )
            .returning(t.locked_until)
        )
        row = (await conn.execute(stmt)).first()
        if row is not None:
            return LoginReservation(
                gate=LoginGate.GRANTED, until=row.locked_until, locks=row.locked_until is not None
            )
        row = (await conn.execute(select(login_throttles).where(t.name == name))).one()
        return _refused(None, row.locked_until, row.check_until, now)

    async def end_login_check(
        self, username: str, *, check_until: datetime, succeeded: bool
    ) -> None:
        u, t = users.c, login_throttles.c
        values: dict[str, Any] = {"login_check_until": None}
        if succeeded:
            values.update(failed_logins=0, locked_until=None)
            mine = u.username == username
        else:
            mine = and_(u.username == username, u.login_check_until == check_until)
        async with self._write() as conn:
            done = await conn.execute(update(users).where(mine).values(values))
            if done.rowcount == 0 and not succeeded:
                await conn.execute(
                    update(login_throttles)
                    .where(t.name == username, t.check_until == check_until)
                    .values(check_until=None)
                )

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
        async with self._write() as conn:
            await insert_audit(conn, self._sealed_audit(entries))

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
            items = [self._open_audit(_to_audit(row)) for row in await conn.execute(stmt)]
        if len(items) > query.limit:
            items = items[: query.limit]
            return Page(items=items, next_cursor=items[-1].id.hex)
        return Page(items=items)


__all__ = ("SecurityQueries",)


async def insert_audit(conn: AsyncConnection, entries: Sequence[AuditEntry]) -> None:
    """Insert audit entries in the caller's transaction (also the one of the change they
    describe: :meth:`~rota.stores.sql.jobs.JobQueries.create_linked_jobs`)."""
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
    await conn.execute(insert(audit_entries), rows)
