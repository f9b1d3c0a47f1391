"""The SQL store's idempotency keys: the answers of creation requests made with an
``Idempotency-Key`` header, kept until they expire."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from rota.core.errors import BackendUnavailableError
from rota.core.records import IdempotentResult
from rota.core.sealing import SealError, idempotency_aad
from rota.stores.schema import idempotency_keys
from rota.stores.sql.engine import SqlParts

_t = idempotency_keys.c


class IdempotencyQueries(SqlParts):
    """The :class:`~rota.core.ports.IdempotencyStore` slice of the store."""

    async def claim_idempotency_key(
        self, scope: str, fingerprint: str, now: datetime, expires_at: datetime
    ) -> IdempotentResult | None:
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        row = {
            "scope": scope,
            "fingerprint": fingerprint,
            "created_at": now,
            "expires_at": expires_at,
        }
        async with self._write() as conn:
            # An expired entry is taken over as if it were not there (one statement: two
            # requests racing for it find one winner).
            stmt = dialect.insert(idempotency_keys).values(row)
            stmt = stmt.on_conflict_do_update(
                index_elements=[_t.scope],
                set_={**{k: stmt.excluded[k] for k in row}, "status": None, "body": None},
                where=_t.expires_at <= now,
            ).returning(_t.scope)
            if (await conn.execute(stmt)).first() is not None:
                return None
            found = (
                await conn.execute(
                    select(_t.fingerprint, _t.created_at, _t.status, _t.body, _t.headers).where(
                        _t.scope == scope
                    )
                )
            ).one()
        return IdempotentResult(
            fingerprint=found.fingerprint,
            created_at=found.created_at,
            status=found.status,
            body=None if found.body is None else self._opened_body(scope, bytes(found.body)),
            headers=tuple((str(k), str(v)) for k, v in (found.headers or [])),
        )

    async def complete_idempotency_key(
        self,
        scope: str,
        status: int,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        expires_at: datetime,
    ) -> None:
        if self._seal is not None:  # the answer holds the job's data: sealed at rest too
            body = self._seal.seal_bytes(body, idempotency_aad(scope))
        values = {
            "status": status,
            "body": body,
            "headers": [list(h) for h in headers],
            "expires_at": expires_at,
        }
        async with self._write() as conn:
            await conn.execute(update(idempotency_keys).where(_t.scope == scope).values(values))

    def _opened_body(self, scope: str, body: bytes) -> bytes:
        if self._seal is None:
            return body
        try:
            return self._seal.open_bytes(body, idempotency_aad(scope))
        except SealError as exc:
            raise BackendUnavailableError(
                f"a kept idempotent answer cannot be opened: {exc}"
            ) from None

    async def release_idempotency_key(self, scope: str) -> None:
        stmt = delete(idempotency_keys).where(_t.scope == scope, _t.status.is_(None))
        async with self._write() as conn:
            await conn.execute(stmt)

    async def purge_idempotency_keys(self, before: datetime, limit: int) -> int:
        oldest = select(_t.scope).where(_t.expires_at < before).order_by(_t.expires_at).limit(limit)
        async with self._write() as conn:
            result = await conn.execute(delete(idempotency_keys).where(_t.scope.in_(oldest)))
        return int(result.rowcount or 0)
