"""Redis-specific behaviour of the worker registry that the shared contract cannot express."""

from __future__ import annotations

from contextlib import AsyncExitStack

from rota.coordination.redis import RedisCoordination
from rota.core.models import WorkerInfo
from rota.redis_keys import RedisKeys

from .redis_fixtures import redis_scope


async def test_a_malformed_registration_hides_no_other_worker() -> None:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        coordination = RedisCoordination(client, prefix=prefix)
        good = WorkerInfo(
            instance_id="good-1", worker_id="g", host="h", pid=1, job_types={}, concurrency=1
        )
        await coordination.register_worker(good, ttl=30)
        keys = RedisKeys(prefix)
        # A worker written in another language that got the format wrong:
        await client.set(keys.worker("bad-1"), b'{"instanceId": "bad-1"}', px=30_000)
        await client.sadd(keys.workers, "bad-1")
        await client.set(keys.worker("bad-2"), b"not json", px=30_000)
        await client.sadd(keys.workers, "bad-2")
        assert [w.instance_id for w in await coordination.workers()] == ["good-1"]
        await coordination.close()
