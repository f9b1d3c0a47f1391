"""A scheduler instance on a real Redis that loses its data (FLUSHALL, a restart without
persistence; here the test's key prefix is deleted): the bucket owner is granted its leases
again and, since the schedule index went with them, the loader rebuilds the index from the
store at once instead of a loader interval later (15 s by default: every fire of the
instance's buckets would have waited that long)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

from rota.coordination.redis import RedisCoordination
from rota.core.ids import bucket_of, new_id
from rota.core.models import Job
from rota.indexes.redis import RedisScheduleIndex
from rota.redis.client import delete_prefix
from rota.redis.keys import RedisKeys
from rota.services.buckets import BucketOwner
from rota.services.loader import Loader
from rota.stores.sql import SqlStore
from tests.contract.redis_fixtures import redis_scope

COUNT = 16
LEASE = 30.0
"""Long: no lease runs out by itself here."""


def job_due_in(seconds: float) -> Job:
    at = datetime.now(UTC) + timedelta(seconds=seconds)
    job_id = new_id()
    return Job(
        id=job_id, job_type="report", execute_at=at, next_run_at=at, bucket=bucket_of(job_id, COUNT)
    )


async def test_the_index_is_rebuilt_as_soon_as_the_leases_are_granted_again(
    store: SqlStore,
) -> None:
    jobs = [job_due_in(30 + n) for n in range(40)]
    await store.create_jobs(jobs)
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        coordination = RedisCoordination(client, prefix=prefix)
        stack.push_async_callback(coordination.close)
        index = RedisScheduleIndex(client, prefix=prefix)
        synced = asyncio.Event()
        owner = BucketOwner(
            coordination,
            "server-a",
            bucket_count=COUNT,
            lease_seconds=LEASE,
            on_gained=lambda _buckets: loader.kick(),
        )
        # The interval is far longer than the test: only a kick makes the loader sync again.
        loader = Loader(
            store,
            index,
            lambda: owner.buckets,
            window_seconds=120,
            interval_seconds=600,
            on_loaded=lambda _due: synced.set(),
        )
        assert await owner.tick() == list(range(COUNT))
        running = asyncio.create_task(loader.run())
        try:
            await asyncio.wait_for(synced.wait(), 5)
            assert await index.size(range(COUNT)) == len(jobs)
            synced.clear()

            await delete_prefix(client, RedisKeys(prefix))  # Redis lost everything
            assert await index.size(range(COUNT)) == 0
            assert await owner.tick() == list(range(COUNT))  # the same leases, granted anew

            await asyncio.wait_for(synced.wait(), 5)
            assert await index.size(range(COUNT)) == len(jobs)
        finally:
            loader.stop()
            await running


async def test_after_a_loss_every_bucket_is_reported_gained_by_its_new_holder(
    store: SqlStore,
) -> None:
    """Two instances: the first to tick after the loss sees itself alone and claims every
    bucket, then gives its surplus back to the other. Each bucket, whoever holds it in the
    end, was reported gained to its holder after the loss (its loader was kicked)."""
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        gained: dict[str, list[int]] = {"a": [], "b": []}
        owners = {}
        for name in gained:
            coordination = RedisCoordination(client, prefix=prefix)
            stack.push_async_callback(coordination.close)
            owners[name] = BucketOwner(
                coordination,
                name,
                bucket_count=COUNT,
                lease_seconds=LEASE,
                on_gained=gained[name].extend,
            )
        a, b = owners["a"], owners["b"]
        await a.tick()
        await b.tick()
        await a.tick()  # gives its surplus back
        await b.tick()
        before = {"a": a.buckets, "b": b.buckets}
        assert sorted(before["a"] + before["b"]) == list(range(COUNT))
        for reported in gained.values():
            reported.clear()

        await delete_prefix(client, RedisKeys(prefix))
        assert await a.tick() == list(range(COUNT))  # alone in the emptied registry
        assert await b.tick() == []
        await a.tick()
        await b.tick()

        assert sorted(a.buckets + b.buckets) == list(range(COUNT))
        assert set(a.buckets) <= set(gained["a"])
        assert set(b.buckets) <= set(gained["b"])
