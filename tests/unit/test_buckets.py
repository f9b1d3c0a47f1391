"""Bucket ownership and the bucket overview, on the in-memory coordination and index with a
fixed clock."""

from __future__ import annotations

from uuid import uuid4

from rota.coordination.memory import MemoryCoordination
from rota.core.records import IndexEntry
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.buckets import BucketOwner, bucket_overview

NOW = 1_800_000_000.0
TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.value = NOW

    def __call__(self) -> float:
        return self.value


def owner(coordination: MemoryCoordination, instance_id: str, count: int = 4) -> BucketOwner:
    return BucketOwner(coordination, instance_id, bucket_count=count, lease_seconds=TTL)


async def test_overview_states_lag_and_index() -> None:
    clock = Clock()
    coordination = MemoryCoordination(clock=clock)
    index = MemoryScheduleIndex()
    await coordination.heartbeat_instance("a", {}, TTL)
    await coordination.heartbeat_instance("b", {"state": "stopping"}, TTL)
    await coordination.acquire_buckets("a", [0], TTL)
    await coordination.acquire_buckets("b", [1], TTL)
    await coordination.acquire_buckets("ghost", [2], TTL)  # its heartbeat is gone
    await index.upsert(
        [
            IndexEntry(uuid4(), 0, NOW - 4.5),
            IndexEntry(uuid4(), 0, NOW + 30),
            IndexEntry(uuid4(), 1, NOW + 30),
            IndexEntry(uuid4(), 3, NOW - 1),
        ]
    )
    overview = await bucket_overview(coordination, index, 4, now=NOW)

    assert overview.bucket_count == 4
    rows = [(b.bucket, b.owner, b.state, b.lag, b.indexed) for b in overview.buckets]
    assert rows == [
        (0, "a", "Active", 4.5, 2),
        (1, "b", "Completing", 0.0, 1),
        (2, "ghost", "Lost", 0.0, 0),
        (3, None, "Lost", 1.0, 1),
    ]
    assert overview.buckets[0].lease_expires_at == NOW + TTL
    assert overview.buckets[3].lease_expires_at is None
    assert [(i.instance_id, i.state, i.buckets) for i in overview.instances] == [
        ("a", "Active", [0]),
        ("b", "Stopping", [1]),
    ]


async def test_instances_share_the_buckets_fairly() -> None:
    coordination = MemoryCoordination(clock=Clock())
    a, b = owner(coordination, "a"), owner(coordination, "b")
    assert await a.tick() == [0, 1, 2, 3]
    assert await b.tick() == []  # nothing free yet
    assert await a.tick() == [0, 1]  # gives back its surplus
    assert await b.tick() == [2, 3]


async def test_a_stopping_instance_dispatches_nothing_and_its_buckets_are_completing() -> None:
    coordination = MemoryCoordination(clock=Clock())
    index = MemoryScheduleIndex()
    a, b = owner(coordination, "a"), owner(coordination, "b")
    await a.tick()
    await b.tick()
    await a.tick()
    await b.tick()

    await a.begin_release()
    assert a.buckets == []
    states = {s.bucket: s.state for s in (await bucket_overview(coordination, index, 4)).buckets}
    assert states == {0: "Completing", 1: "Completing", 2: "Active", 3: "Active"}
    # While completing it keeps its leases but takes nothing new.
    assert await a.tick() == []
    assert set(await coordination.leases()) == {0, 1, 2, 3}
    assert await b.tick() == [2, 3]  # its share no longer counts the stopping instance ...

    await a.release()
    assert await b.tick() == [0, 1, 2, 3]  # ... so it takes the released buckets at once
    assert {lease.owner for lease in (await coordination.leases()).values()} == {"b"}


async def test_a_crashed_instance_buckets_are_lost_then_taken_over() -> None:
    clock = Clock()
    coordination = MemoryCoordination(clock=clock)
    index = MemoryScheduleIndex()
    a, b = owner(coordination, "a", 2), owner(coordination, "b", 2)
    await a.tick()
    await b.tick()
    await a.tick()
    await b.tick()
    clock.value += TTL * 0.6
    await b.tick()  # a stops heartbeating from now on
    clock.value += TTL * 0.6
    states = [s.state for s in (await bucket_overview(coordination, index, 2)).buckets]
    assert states == ["Lost", "Active"]
    assert await b.tick() == [0, 1]
