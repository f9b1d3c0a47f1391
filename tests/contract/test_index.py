"""Contract of :class:`~rota.core.ports.ScheduleIndex`, run against every adapter.

To add an adapter: add its name and factory to ``parametrize_adapters`` below (see
``tests/contract/adapters.py``); the factory pushes the index's close on the exit stack it is
given after its other clean-ups (the close runs first).
"""

from __future__ import annotations

import random
import uuid
from contextlib import AsyncExitStack

import pytest

from rota.core.ports import ScheduleIndex
from rota.core.records import IndexEntry
from rota.indexes.memory import MemoryScheduleIndex
from rota.indexes.redis import RedisScheduleIndex
from tests.contract.adapters import parametrize_adapters
from tests.contract.redis_fixtures import redis_scope


async def _memory(stack: AsyncExitStack, request: pytest.FixtureRequest) -> ScheduleIndex:
    index = MemoryScheduleIndex()
    stack.push_async_callback(index.close)
    return index


async def _redis(stack: AsyncExitStack, request: pytest.FixtureRequest) -> ScheduleIndex:
    client, prefix = await redis_scope(stack)
    index = RedisScheduleIndex(client, prefix=prefix)
    stack.push_async_callback(index.close)  # before redis_scope's clean-ups
    return index


adapter, index = parametrize_adapters({"memory": _memory, "redis": _redis})


def uid(n: int) -> uuid.UUID:
    """Ids whose order is the order of ``n``."""
    return uuid.UUID(int=n)


def entry(n: int, due: float, bucket: int = 0) -> IndexEntry:
    return IndexEntry(uid(n), bucket, due)


T0 = 1_800_000_000.0


async def test_empty_index(index: ScheduleIndex) -> None:
    assert await index.due([0, 1], T0 + 1e6, 10) == []
    assert await index.earliest([0, 1]) is None
    assert await index.size([0, 1]) == 0


async def test_due_returns_earliest_first_up_to_until(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0 + 30), entry(2, T0 + 10), entry(3, T0 + 20), entry(4, T0 + 40)])
    found = await index.due([0], T0 + 30, 10)
    assert [e.job_id for e in found] == [uid(2), uid(3), uid(1)]
    assert [e.due for e in found] == [T0 + 10, T0 + 20, T0 + 30]
    assert all(e.bucket == 0 for e in found)


async def test_ties_come_in_job_id_order(index: ScheduleIndex) -> None:
    ids = [uuid.uuid4() for _ in range(20)]
    await index.upsert([IndexEntry(i, 0, T0) for i in ids])
    found = await index.due([0], T0, 100)
    assert [e.job_id for e in found] == sorted(ids)
    assert [e.job_id for e in found] == sorted(ids, key=str)  # same as string order


async def test_ties_across_buckets_come_in_job_id_order(index: ScheduleIndex) -> None:
    """Ids that differ in one byte only, at each of the 16 positions, and random ones, spread
    over buckets at one instant: merged in job id order, and a limit cuts that order."""
    rng = random.Random(34)
    ids = [uuid.uuid4() for _ in range(40)]
    for position in range(16):
        base = bytearray(rng.randbytes(16))
        for value in (0x00, 0x7F, 0x80, 0xFF):
            base[position] = value
            ids.append(uuid.UUID(bytes=bytes(base)))
    entries = [IndexEntry(job_id, n % 5, T0) for n, job_id in enumerate(ids)]
    await index.upsert(entries)
    ordered = sorted(entries, key=lambda e: e.job_id)
    assert await index.due(range(5), T0, 1000) == ordered
    assert await index.due([4, 0, 2, 1, 3], T0, 37) == ordered[:37]
    assert await index.due([3, 1], T0, 1000) == [e for e in ordered if e.bucket in (1, 3)]


async def test_many_buckets_merge_in_due_then_job_id_order(index: ScheduleIndex) -> None:
    """Sixteen buckets of uneven sizes, ties and distinct due times mixed: every read is a
    prefix of the (due, job id) order, across pages refilled within a read."""
    rng = random.Random(1601)
    entries = [
        IndexEntry(
            uuid.uuid4(),
            rng.choice((0, 0, 1, 3, 5, 8, 13, 15)),
            T0 + rng.choice((0, 0, 1, 2)) + rng.random() * (n % 3 == 0),
        )
        for n in range(900)
    ]
    await index.upsert(entries)
    ordered = sorted(entries, key=lambda e: (e.due, e.job_id))
    for limit in (1, 17, 300, 899, 2000):
        assert await index.due(range(16), T0 + 10, limit) == ordered[:limit]
    assert await index.due(range(16), T0 + 1, 2000) == [e for e in ordered if e.due <= T0 + 1]


async def test_limit_is_honoured(index: ScheduleIndex) -> None:
    await index.upsert([entry(n, T0 + n) for n in range(50)])
    found = await index.due([0], T0 + 100, 7)
    assert [e.job_id for e in found] == [uid(n) for n in range(7)]
    assert await index.due([0], T0 + 100, 0) == []


async def test_reading_does_not_remove(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0), entry(2, T0 + 1)])
    first = await index.due([0], T0 + 5, 10)
    second = await index.due([0], T0 + 5, 10)
    assert first == second
    assert len(first) == 2
    assert await index.size([0]) == 2


async def test_upsert_moves_an_entry(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0 + 10), entry(2, T0 + 20)])
    await index.upsert([entry(1, T0 + 30)])
    assert await index.size([0]) == 2
    assert [e.job_id for e in await index.due([0], T0 + 25, 10)] == [uid(2)]
    assert await index.earliest([0]) == T0 + 20
    await index.upsert([entry(1, T0 + 5)])
    assert [(e.job_id, e.due) for e in await index.due([0], T0 + 100, 10)] == [
        (uid(1), T0 + 5),
        (uid(2), T0 + 20),
    ]


async def test_moving_back_to_an_old_due_time_leaves_one_entry(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0)])
    await index.upsert([entry(1, T0 + 5)])
    await index.upsert([entry(1, T0)])
    assert [e.due for e in await index.due([0], T0 + 10, 10)] == [T0]
    assert await index.size([0]) == 1


async def test_remove_is_idempotent_and_ignores_missing(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0), entry(2, T0 + 1)])
    await index.remove([(0, uid(1)), (0, uid(99)), (7, uid(2))])
    await index.remove([(0, uid(1))])
    assert [e.job_id for e in await index.due([0], T0 + 10, 10)] == [uid(2)]
    assert await index.earliest([0]) == T0 + 1
    assert await index.size([0]) == 1


async def test_buckets_are_separate_and_merge_in_order(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0 + 3, 0), entry(2, T0 + 1, 1), entry(3, T0 + 2, 2)])
    await index.upsert([entry(4, T0 + 0.5, 2)])
    assert [e.job_id for e in await index.due([0, 1], T0 + 10, 10)] == [uid(2), uid(1)]
    both = await index.due([1, 2], T0 + 10, 10)
    assert [(e.job_id, e.bucket) for e in both] == [(uid(4), 2), (uid(2), 1), (uid(3), 2)]
    assert await index.earliest([0, 1]) == T0 + 1
    assert await index.earliest([5]) is None
    assert await index.size([0, 2]) == 3
    assert await index.size([]) == 0
    # The same job id may be removed from one bucket without touching another.
    await index.remove([(1, uid(2))])
    assert await index.size([0, 1, 2]) == 3


async def test_replace_bucket(index: ScheduleIndex) -> None:
    await index.upsert([entry(1, T0, 0), entry(2, T0 + 1, 0), entry(3, T0, 1)])
    await index.replace_bucket(0, [entry(2, T0 + 7, 0), entry(4, T0 + 3, 0)])
    assert [(e.job_id, e.due) for e in await index.due([0], T0 + 100, 10)] == [
        (uid(4), T0 + 3),
        (uid(2), T0 + 7),
    ]
    assert await index.size([1]) == 1  # other buckets untouched
    await index.replace_bucket(0, [])
    assert await index.size([0]) == 0
    assert await index.earliest([0]) is None
    assert await index.earliest([0, 1]) == T0


async def test_matches_a_simple_model_under_random_operations(index: ScheduleIndex) -> None:
    """Many moves and removes (lazy deletion, compaction) never change what is read."""
    rng = random.Random(1234)
    model: dict[tuple[int, uuid.UUID], float] = {}
    for step in range(3000):
        n = rng.randrange(400)
        job, bucket = uid(n), n % 3  # a job lives in one bucket
        if rng.random() < 0.7:
            due = T0 + rng.randrange(100)
            await index.upsert([IndexEntry(job, bucket, due)])
            model[bucket, job] = due
        else:
            await index.remove([(bucket, job)])
            model.pop((bucket, job), None)
        if step % 150 == 0:
            await _check_model(index, model, rng)
    await _check_model(index, model, rng)


async def _check_model(
    index: ScheduleIndex, model: dict[tuple[int, uuid.UUID], float], rng: random.Random
) -> None:
    buckets = sorted(rng.sample(range(3), rng.randrange(1, 4)))
    until = T0 + rng.randrange(100)
    limit = rng.randrange(1, 200)
    rows = sorted(
        (due, job, bucket)
        for (bucket, job), due in model.items()
        if bucket in buckets and due <= until
    )
    expected = [IndexEntry(job, bucket, due) for due, job, bucket in rows[:limit]]
    assert await index.due(buckets, until, limit) == expected
    dues = [due for (bucket, _), due in model.items() if bucket in buckets]
    assert await index.earliest(buckets) == (min(dues) if dues else None)
    assert await index.size(buckets) == len(dues)


async def test_large_bucket(index: ScheduleIndex) -> None:
    entries = [IndexEntry(uuid.uuid4(), 0, T0 + n % 100) for n in range(100_000)]
    await index.upsert(entries)
    assert await index.size([0]) == 100_000
    found = await index.due([0], T0 + 0.5, 5000)
    assert len(found) == 1000
    assert found == sorted(found, key=lambda e: (e.due, e.job_id))
    assert all(e.due == T0 for e in found)
    await index.remove([(0, e.job_id) for e in found])
    assert await index.size([0]) == 99_000
    assert await index.earliest([0]) == T0 + 1
    assert len(await index.due([0], T0 + 1, 5000)) == 1000
