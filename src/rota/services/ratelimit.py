"""Rate limits in this process: token buckets per client and one for everyone.

A bucket holds up to ``burst`` tokens and gains ``per_second`` tokens a second; a request
takes one. Each server keeps its own buckets (they protect the server's own CPU and memory;
the lockout of an account, which must hold across servers, is in the store).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from rota.core.errors import RateLimitedError

CLIENTS_KEPT: Final = 10_000
"""Client buckets kept (least recently used dropped first; a dropped client starts full)."""


@dataclass(frozen=True, slots=True)
class Rate:
    per_second: float
    burst: float

    def __post_init__(self) -> None:
        if self.per_second <= 0 or self.burst < 1:
            raise ValueError("a rate needs per_second > 0 and burst >= 1")


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at

    def fill(self, rate: Rate, now: float) -> None:
        self.tokens = min(rate.burst, self.tokens + (now - self.at) * rate.per_second)
        self.at = now

    def wait(self, rate: Rate) -> int:
        """Whole seconds until a token is there (at least 1)."""
        return max(1, math.ceil((1 - self.tokens) / rate.per_second))


class RateLimiter:
    """Limits one kind of request (``what``: "sign-in", "token refresh") per client and in
    all. :meth:`take` raises :class:`RateLimitedError` with the seconds to wait."""

    def __init__(
        self,
        what: str,
        *,
        per_client: Rate,
        overall: Rate,
        clock: Callable[[], float] = time.monotonic,
        clients_kept: int = CLIENTS_KEPT,
    ) -> None:
        self.what = what
        self.per_client = per_client
        self.overall = overall
        self._clock = clock
        self._kept = clients_kept
        self._clients: OrderedDict[str, _Bucket] = OrderedDict()
        self._all = _Bucket(overall.burst, clock())
        self.refused = 0
        """Requests refused so far."""

    def take(self, client: str | None) -> None:
        """Take a token for ``client`` (``None``: an unknown address, one shared bucket)."""
        now = self._clock()
        key = client or "?"
        bucket = self._clients.pop(key, None) or _Bucket(self.per_client.burst, now)
        self._clients[key] = bucket
        while len(self._clients) > self._kept:
            self._clients.popitem(last=False)
        bucket.fill(self.per_client, now)
        self._all.fill(self.overall, now)
        if bucket.tokens < 1:
            self.refused += 1
            seconds = bucket.wait(self.per_client)
            raise RateLimitedError(
                f"too many {self.what} requests from this address: try again in {seconds} seconds",
                retry_after=seconds,
            )
        if self._all.tokens < 1:
            self.refused += 1
            seconds = self._all.wait(self.overall)
            raise RateLimitedError(
                f"too many {self.what} requests: try again in {seconds} seconds",
                retry_after=seconds,
            )
        bucket.tokens -= 1
        self._all.tokens -= 1
