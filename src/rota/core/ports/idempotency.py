"""The store's slice for idempotent creation: the answers of requests made with an
``Idempotency-Key`` (:mod:`rota.services.idempotency`)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime

from rota.core.records import IdempotentResult


class IdempotencyStore(abc.ABC):
    """The answers of requests made with an ``Idempotency-Key``, by the key's scope (the
    caller, the operation and the key, hashed), kept until they expire."""

    @abc.abstractmethod
    async def claim_idempotency_key(
        self, scope: str, fingerprint: str, now: datetime, expires_at: datetime
    ) -> IdempotentResult | None:
        """Claim ``scope`` until ``expires_at`` for a request whose body has
        ``fingerprint``: ``None`` if it was free (or its entry expired, replaced), in one
        statement; else the entry there, as it is (still being handled, or answered)."""

    @abc.abstractmethod
    async def complete_idempotency_key(
        self,
        scope: str,
        status: int,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        expires_at: datetime,
    ) -> None:
        """Keep the answer of the request that claimed ``scope``, until ``expires_at``."""

    @abc.abstractmethod
    async def release_idempotency_key(self, scope: str) -> None:
        """Forget a claim whose request failed (the key may be used again)."""

    @abc.abstractmethod
    async def purge_idempotency_keys(self, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` entries that expired before ``before``; how many."""
