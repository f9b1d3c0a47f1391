"""Redis for the contract suites: the local server (``ROTA_TEST_REDIS_URL``, default
``redis://127.0.0.1:6379/0``, shared with other tests), a unique key prefix per test, and
deletion of that prefix's keys afterwards (SCAN + UNLINK, never FLUSHALL)."""

from __future__ import annotations

import functools
import os
import uuid
from contextlib import AsyncExitStack

import pytest
import redis
from redis.asyncio import Redis

from rota.redis.client import connect, delete_prefix
from rota.redis.keys import RedisKeys

REDIS_URL = os.environ.get("ROTA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@functools.cache
def _redis_error() -> str | None:
    """``None`` when Redis answers, else why not (asked once per session)."""
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def require_redis() -> None:
    """Skip the test when Redis is unreachable (fail it under CI)."""
    error = _redis_error()
    if error is None:
        return
    message = f"Redis unreachable at {REDIS_URL}: {error}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


async def redis_scope(stack: AsyncExitStack) -> tuple[Redis, str]:
    """A client and a fresh key prefix; the prefix's keys are deleted and the client closed
    when ``stack`` unwinds."""
    require_redis()
    prefix = f"rota-test-{uuid.uuid4().hex}"
    client = connect(REDIS_URL, socket_timeout=5.0)
    stack.push_async_callback(client.aclose)
    stack.push_async_callback(delete_prefix, client, RedisKeys(prefix))
    return client, prefix
