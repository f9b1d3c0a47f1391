"""Connecting to Redis (the ``rota[redis]`` extra), imported lazily.

:func:`connect` builds a ``redis.asyncio.Redis`` client with bytes replies, the hiredis parser
when installed, socket timeouts on every operation, TCP keep-alive, periodic health checks and
one retry on a dropped connection. :func:`unavailable` turns the driver's connection and
timeout errors into :class:`~rota.core.errors.BackendUnavailableError`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rota.core.errors import BackendUnavailableError, ConfigurationError
from rota.core.redact import mask_urls
from rota.redis.keys import RedisKeys

if TYPE_CHECKING:
    from redis.asyncio import Redis

DEFAULT_SOCKET_TIMEOUT = 5.0
"""Seconds any single Redis operation may take (connect, send, read) before it fails."""

_MISSING = "Redis support is not installed: pip install 'rota[redis]'"


def _require_redis() -> None:
    try:
        importlib.import_module("redis.asyncio")
    except ImportError as exc:
        raise ConfigurationError(_MISSING) from exc


def connect(
    url: str,
    *,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    health_check_interval: int = 15,
    max_connections: int | None = None,
) -> Redis:
    """A client for ``url`` (``redis://host:6379/0``, ``rediss://…``, ``unix://…``).

    Connections are opened on first use. Every connect, send and read is bounded by
    ``socket_timeout``; a command that fails on a dropped connection is retried once on a new
    one. Raises ``ConfigurationError`` if redis-py is missing or the URL is not a Redis URL.
    """
    _require_redis()
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    try:
        return Redis.from_url(
            url,
            decode_responses=False,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            socket_keepalive=True,
            health_check_interval=health_check_interval,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=1),
            max_connections=max_connections,
        )
    except ValueError as exc:
        raise ConfigurationError(mask_urls(f"invalid Redis URL {url!r}: {exc}")) from exc


def _transient_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


@contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Raise the driver's connection and timeout errors as ``BackendUnavailableError``."""
    try:
        yield
    except BackendUnavailableError:
        raise
    except Exception as exc:
        if isinstance(exc, _transient_errors()):
            raise BackendUnavailableError(f"{what}: Redis unavailable: {exc}") from exc
        raise


async def delete_prefix(redis: Redis, keys: RedisKeys) -> int:
    """Delete every key under ``keys.prefix`` (SCAN + UNLINK, never FLUSHALL). Returns how
    many were deleted."""
    deleted = 0
    with unavailable("delete keys"):
        batch: list[bytes] = []
        async for key in redis.scan_iter(match=keys.pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += await redis.unlink(*batch)
                batch = []
        if batch:
            deleted += await redis.unlink(*batch)
    return deleted
