"""Idempotent creation: a request repeated with the same ``Idempotency-Key`` gets the first
one's answer instead of creating again (docs/api.md#idempotent-creation).

A key is scoped to its caller and its operation (``jobs.create``, ``jobs.bulk``): two users,
or one key used for a single and a bulk create, never meet. The first request claims the
scope in the store and, once it succeeds, leaves its answer there for :data:`TTL`; a repeat
within that time is answered from the store (the same status, body and headers). A repeat
while the first is still being handled is refused (409: retry it shortly); a repeat whose
body differs from the first's is refused (422): the key was reused for another request by
mistake. A request that fails leaves nothing: its key may be used again.
"""

from __future__ import annotations

import contextlib
import hashlib
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.core.errors import ConflictError, ValidationError
from rota.core.models import utcnow
from rota.core.ports import IdempotencyStore

__all__ = ["HEADER", "MAX_KEY", "PENDING", "TTL", "Answer", "Idempotency", "kept_headers"]

HEADER = "Idempotency-Key"
MAX_KEY = 255
"""The longest key accepted (characters)."""
TTL = timedelta(hours=24)
"""How long an answer is kept for repeats."""
PENDING = timedelta(minutes=5)
"""How long a claim whose request has not answered holds its key (a server that died while
handling it leaves it): then the key may be used again."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A request's answer as it is kept and repeated."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    replayed: bool = False
    """Whether this is a kept answer (the request was a repeat)."""


def _check(key: str) -> None:
    if not 0 < len(key) <= MAX_KEY or not all(" " < c <= "~" for c in key):
        raise ValidationError(
            f"{HEADER} must be 1 to {MAX_KEY} visible ASCII characters (e.g. a UUID)",
            field=HEADER,
        )


def _digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


class Idempotency:
    """Answers repeated requests from the store (see the module)."""

    def __init__(
        self, store: IdempotencyStore, clock: Callable[[], datetime] = utcnow, ttl: timedelta = TTL
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl

    async def answer(
        self,
        key: str | None,
        caller: str,
        operation: str,
        request: bytes,
        handle: Callable[[], Awaitable[Answer]],
    ) -> Answer:
        """The answer to a request: ``handle()``'s, kept for repeats when ``key`` is given; a
        repeat's kept answer (``replayed``) without calling ``handle``. ``request`` is the
        request's body in a canonical form (its fingerprint is compared)."""
        if key is None:
            return await handle()
        _check(key)
        scope = _digest(caller.encode(), operation.encode(), key.encode())
        fingerprint = _digest(request)
        now = self._clock()
        kept = await self._store.claim_idempotency_key(scope, fingerprint, now, now + PENDING)
        if kept is not None:
            if kept.fingerprint != fingerprint:
                raise ValidationError(
                    f"this {HEADER} was used {_ago(now, kept.created_at)} for a request with "
                    "another body: use a new key for a new request",
                    field=HEADER,
                )
            if kept.status is None or kept.body is None:
                raise ConflictError(
                    f"a request with this {HEADER} is still being handled: repeat it shortly"
                )
            body = zlib.decompress(kept.body)
            return Answer(kept.status, body, kept.headers, replayed=True)
        try:
            answer = await handle()
        except BaseException:
            with contextlib.suppress(Exception):  # else it expires after PENDING
                await self._store.release_idempotency_key(scope)
            raise
        # kept compressed: a bulk create's answer is some MB of JSON
        packed = zlib.compress(answer.body, 1)
        await self._store.complete_idempotency_key(
            scope, answer.status, packed, answer.headers, now + self._ttl
        )
        return answer


def _ago(now: datetime, then: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    return f"{seconds // 60} min ago"


def kept_headers(headers: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The headers of an answer that are kept with it (where the created job is, its tag)."""
    return tuple((k, v) for k, v in headers if k.lower() in ("location", "etag"))
