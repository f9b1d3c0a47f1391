"""Redis-specific behaviour of the worker registry that the shared contract cannot express."""

from __future__ import annotations

from contextlib import AsyncExitStack

import orjson

from rota.coordination.redis import RedisCoordination
from rota.core.models import WorkerInfo
from rota.redis.keys import RedisKeys
from tests.contract.redis_fixtures import redis_scope


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
        # Job types declared nested deeper than the API could answer with (it was a 500 of
        # GET /workers): left out like any malformed registration.
        deep = orjson.loads(await client.get(keys.worker("good-1")))
        deep.update(instanceId="bad-3", jobTypes={"t": "__nested__"})
        nested = orjson.dumps(deep).replace(b'"__nested__"', b"[" * 300 + b"]" * 300)
        await client.set(keys.worker("bad-3"), nested, px=30_000)
        await client.sadd(keys.workers, "bad-3")
        assert [w.instance_id for w in await coordination.workers()] == ["good-1"]
        await coordination.close()
