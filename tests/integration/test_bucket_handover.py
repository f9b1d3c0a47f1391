"""Two scheduler instances' bucket owners on one real Redis: a graceful stop shows the
stopping instance's buckets as Completing to the other, and once released the other takes
them over on its very next tick (no waiting for a lease to run out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from rota.coordination.redis import RedisCoordination
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.buckets import BucketOwner, bucket_overview
from tests.contract.redis_fixtures import redis_scope

COUNT = 16
LEASE = 30.0
"""Long: nothing may change hands here by expiry."""


@pytest.fixture
async def coordinations() -> AsyncIterator[tuple[RedisCoordination, RedisCoordination]]:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        first = RedisCoordination(client, prefix=prefix)
        second = RedisCoordination(client, prefix=prefix)
        yield first, second
        await first.close()
        await second.close()


async def test_released_buckets_are_taken_over_within_one_tick(
    coordinations: tuple[RedisCoordination, RedisCoordination],
) -> None:
    coord_a, coord_b = coordinations
    a = BucketOwner(coord_a, "server-a", bucket_count=COUNT, lease_seconds=LEASE)
    b = BucketOwner(coord_b, "server-b", bucket_count=COUNT, lease_seconds=LEASE)
    assert await a.tick() == list(range(COUNT))
    await b.tick()
    await a.tick()
    mine_b = await b.tick()
    mine_a = a.buckets
    assert len(mine_a) == len(mine_b) == COUNT // 2
    assert set(mine_a).isdisjoint(mine_b)

    await a.begin_release()
    assert a.buckets == []
    seen_by_b = await bucket_overview(coord_b, MemoryScheduleIndex(), COUNT)
    states = {s.bucket: (s.owner, s.state) for s in seen_by_b.buckets}
    assert states == {
        **{n: ("server-a", "Completing") for n in mine_a},
        **{n: ("server-b", "Active") for n in mine_b},
    }
    assert {i.instance_id: i.state for i in seen_by_b.instances} == {
        "server-a": "Stopping",
        "server-b": "Active",
    }

    await a.release()
    assert await b.tick() == list(range(COUNT))
    leases = await coord_b.leases()
    assert {lease.owner for lease in leases.values()} == {"server-b"}
    assert set(leases) == set(range(COUNT))
