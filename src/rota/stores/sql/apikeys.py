"""The SQL store's API keys (the ``ApiKeyStore`` slice): SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Row, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from rota.core.apikeys import ApiKey, KeyScope
from rota.core.errors import ConflictError, NotFoundError
from rota.core.security import Role
from rota.stores.schema import api_keys
from rota.stores.sql.engine import SqlParts

_k = api_keys.c


def _key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "name": key.name,
        "role": key.role.value,
        "job_types": list(key.scope.job_types) or None,
        "tags": list(key.scope.tags) or None,
        "secret_hash": key.secret_hash,
        "created_at": key.created_at,
        "created_by": key.created_by,
        "expires_at": key.expires_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
        "revoked_by": key.revoked_by,
    }


def _to_key(row: Row[Any]) -> ApiKey:
    return ApiKey(
        id=row.id,
        name=row.name,
        role=Role(row.role),
        scope=KeyScope(job_types=tuple(row.job_types or ()), tags=tuple(row.tags or ())),
        secret_hash=row.secret_hash,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by,
    )


class ApiKeyQueries(SqlParts):
    """The :class:`~rota.core.ports.ApiKeyStore` slice of the store."""

    async def create_api_key(self, key: ApiKey) -> None:
        taken = f"an API key named {key.name!r} exists (revoke it first, or pick another name)"
        async with self._write() as conn:
            live = select(_k.id).where(_k.name == key.name, _k.revoked_at.is_(None))
            if (await conn.execute(live)).first() is not None:
                raise ConflictError(taken)
            try:
                await conn.execute(insert(api_keys), [_key_row(key)])
            except IntegrityError as exc:
                raise ConflictError(taken) from exc

    async def get_api_key(self, key_id: UUID) -> ApiKey | None:
        async with self._read() as conn:
            row = (await conn.execute(select(api_keys).where(_k.id == key_id))).first()
        return None if row is None else _to_key(row)

    async def list_api_keys(self) -> list[ApiKey]:
        async with self._read() as conn:
            rows = await conn.execute(select(api_keys).order_by(_k.id.desc()))
            return [_to_key(row) for row in rows]

    async def revoke_api_key(self, key_id: UUID, at: datetime, by: str) -> ApiKey:
        async with self._write() as conn:
            await conn.execute(
                update(api_keys)
                .where(_k.id == key_id, _k.revoked_at.is_(None))
                .values(revoked_at=at, revoked_by=by)
            )
            row = (await conn.execute(select(api_keys).where(_k.id == key_id))).first()
        if row is None:
            raise NotFoundError("API key", key_id)
        return _to_key(row)

    async def touch_api_key(self, key_id: UUID, at: datetime, older_than: datetime) -> bool:
        async with self._write() as conn:
            result = await conn.execute(
                update(api_keys)
                .where(
                    _k.id == key_id,
                    or_(_k.last_used_at.is_(None), _k.last_used_at < older_than),
                )
                .values(last_used_at=at)
            )
        return bool(result.rowcount)
