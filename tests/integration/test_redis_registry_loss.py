"""The Redis worker registry when Redis loses its data (FLUSHALL, a restart without
persistence): registrations read before the loss stay live until their own TTL runs out, so
that every group does not look gone (its running work taken for a dead worker's) until the
workers' next heartbeats. A graceful unregistration, with no loss, removes a worker at once."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from rota.coordination.redis import RedisCoordination
from rota.core.models import WorkerInfo
from rota.redis.client import delete_prefix
from rota.redis.keys import RedisKeys
from tests.contract.redis_fixtures import redis_scope


def _worker(instance_id: str) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance_id, worker_id="g", host="h", pid=1, job_types={}, concurrency=1
    )


async def _ids(coordination: RedisCoordination) -> list[str]:
    return [w.instance_id for w in await coordination.workers()]


async def test_registrations_outlive_a_lost_registry_until_their_ttl() -> None:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        scheduler = RedisCoordination(client, prefix=prefix)
        other = RedisCoordination(client, prefix=prefix)  # a second server
        stack.push_async_callback(scheduler.close)
        stack.push_async_callback(other.close)
        await scheduler.register_worker(_worker("long-1"), ttl=30)
        await scheduler.register_worker(_worker("short-1"), ttl=0.5)
        assert await _ids(scheduler) == ["long-1", "short-1"]
        assert await _ids(other) == ["long-1", "short-1"]

        await delete_prefix(client, RedisKeys(prefix))  # Redis forgot everything

        assert await _ids(scheduler) == ["long-1", "short-1"]
        assert await _ids(other) == ["long-1", "short-1"]
        await asyncio.sleep(0.6)  # the short registration's own TTL runs out
        assert await _ids(scheduler) == ["long-1"]
        # The worker registers again: it is live through Redis once more, and a later
        # graceful stop removes it at once.
        await scheduler.register_worker(_worker("long-1"), ttl=30)
        assert await _ids(scheduler) == ["long-1"]
        await scheduler.unregister_worker("long-1")
        assert await _ids(scheduler) == []


async def test_without_a_loss_an_unregistered_worker_is_gone_at_once() -> None:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        scheduler = RedisCoordination(client, prefix=prefix)
        stack.push_async_callback(scheduler.close)
        await scheduler.register_worker(_worker("w-1"), ttl=30)
        await scheduler.register_worker(_worker("w-2"), ttl=30)
        assert await _ids(scheduler) == ["w-1", "w-2"]
        await scheduler.unregister_worker("w-1")
        assert await _ids(scheduler) == ["w-2"]


async def test_a_fresh_instance_knows_nothing_to_keep() -> None:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        first = RedisCoordination(client, prefix=prefix)
        stack.push_async_callback(first.close)
        await first.register_worker(_worker("w-1"), ttl=30)
        await delete_prefix(client, RedisKeys(prefix))
        late = RedisCoordination(client, prefix=prefix)  # started after the loss
        stack.push_async_callback(late.close)
        assert await _ids(late) == []


async def test_a_second_loss_before_the_workers_registered_again_keeps_them_too() -> None:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        scheduler = RedisCoordination(client, prefix=prefix)
        stack.push_async_callback(scheduler.close)
        await scheduler.register_worker(_worker("w-1"), ttl=30)
        assert await _ids(scheduler) == ["w-1"]
        for _ in range(2):  # flushed, then flushed again before w-1's next heartbeat
            await delete_prefix(client, RedisKeys(prefix))
            assert await _ids(scheduler) == ["w-1"]
