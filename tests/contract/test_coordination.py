"""Contract of :class:`~rota.core.ports.Coordination`, run against every adapter.

To add an adapter: append its name to ``ADAPTERS`` and a factory to ``_FACTORIES`` returning a
:class:`Harness`: the adapter plus ``advance(seconds)``, which lets that much time pass (the
memory adapter moves its clock; a server-side adapter sleeps, so TTLs here stay short). A
factory may push clean-ups (run after the adapter is closed) on the exit stack it is given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from rota.coordination.memory import MemoryCoordination
from rota.coordination.redis import RedisCoordination
from rota.core.errors import ValidationError
from rota.core.events import Event, parse_event_id
from rota.core.ids import new_id
from rota.core.models import WorkerInfo
from rota.core.ports import Coordination
from tests.contract.redis_fixtures import redis_scope

ADAPTERS = ["memory", "redis"]

WAIT = 5.0
QUIET = 0.2
TTL = 0.5


@dataclass
class Harness:
    coordination: Coordination
    advance: Callable[[float], Awaitable[None]]
    now: Callable[[], float]
    """The adapter's notion of the current epoch time."""


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.value = start

    def __call__(self) -> float:
        return self.value


async def _memory(stack: AsyncExitStack) -> Harness:
    clock = FakeClock()

    async def advance(seconds: float) -> None:
        clock.value += seconds

    return Harness(MemoryCoordination(clock=clock), advance, clock)


async def _redis(stack: AsyncExitStack) -> Harness:
    """Real time: ``advance`` sleeps (the server expires leases and keys by its own clock,
    which is this machine's)."""
    client, prefix = await redis_scope(stack)
    return Harness(RedisCoordination(client, prefix=prefix), asyncio.sleep, time.time)


_FACTORIES: dict[str, Callable[[AsyncExitStack], Awaitable[Harness]]] = {
    "memory": _memory,
    "redis": _redis,
}


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def harness(adapter: str) -> AsyncIterator[Harness]:
    async with AsyncExitStack() as stack:  # the factory's clean-ups run after close()
        made = await _FACTORIES[adapter](stack)
        yield made
        await made.coordination.close()


@pytest.fixture
def coord(harness: Harness) -> Coordination:
    return harness.coordination


def worker(instance_id: str, group: str = "reports") -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance_id,
        worker_id=group,
        host="host-1",
        pid=42,
        job_types={"GenerateReport": {"schema": None, "maxRetries": 3}},
        concurrency=8,
    )


# --- bucket leases --------------------------------------------------------------------------


async def test_two_instances_racing_for_a_bucket_one_wins(coord: Coordination) -> None:
    results = await asyncio.gather(
        coord.acquire_buckets("a", [3], TTL), coord.acquire_buckets("b", [3], TTL)
    )
    winners = [r for r in results if 3 in r]
    assert len(winners) == 1
    lease = winners[0][3]
    assert lease.owner in {"a", "b"}
    assert [r for r in results if 3 not in r] == [{}]
    assert await coord.leases() == {3: lease}


async def test_lease_fields_and_partial_acquire(coord: Coordination, harness: Harness) -> None:
    before = harness.now()
    held_a = await coord.acquire_buckets("a", [0, 1], TTL)
    held_b = await coord.acquire_buckets("b", [1, 2], TTL)
    assert set(held_a) == {0, 1}
    assert set(held_b) == {2}
    lease = held_a[0]
    assert (lease.bucket, lease.owner) == (0, "a")
    assert before + TTL <= lease.expires_at <= harness.now() + TTL + 1
    assert {b: lease.owner for b, lease in (await coord.leases()).items()} == {
        0: "a",
        1: "a",
        2: "b",
    }


async def test_renewal_keeps_the_fence_and_extends(coord: Coordination, harness: Harness) -> None:
    first = (await coord.acquire_buckets("a", [5], TTL))[5]
    await harness.advance(TTL * 0.6)
    renewed = (await coord.acquire_buckets("a", [5], TTL))[5]
    assert renewed.fence == first.fence
    assert renewed.expires_at > first.expires_at
    await harness.advance(TTL * 0.6)  # past the first expiry, within the renewed one
    assert await coord.acquire_buckets("b", [5], TTL) == {}
    assert (await coord.leases())[5].owner == "a"


async def test_expired_lease_goes_to_another_with_a_higher_fence(
    coord: Coordination, harness: Harness
) -> None:
    first = (await coord.acquire_buckets("a", [7], TTL))[7]
    await harness.advance(TTL * 1.5)
    assert await coord.leases() == {}  # expired leases are not listed
    taken = (await coord.acquire_buckets("b", [7], TTL))[7]
    assert taken.owner == "b"
    assert taken.fence > first.fence
    assert await coord.acquire_buckets("a", [7], TTL) == {}  # the old owner cannot renew


async def test_release_frees_only_own_leases(coord: Coordination) -> None:
    a = await coord.acquire_buckets("a", [1, 2], TTL)
    await coord.release_buckets("b", [1, 2])  # not b's: untouched
    assert set(await coord.leases()) == {1, 2}
    await coord.release_buckets("a", [1])
    assert set(await coord.leases()) == {2}
    taken = (await coord.acquire_buckets("b", [1], TTL))[1]
    assert taken.fence > a[1].fence
    await coord.release_buckets("a", [1, 9])  # now b's, and one never leased
    assert (await coord.leases())[1].owner == "b"


async def test_fence_grows_every_time_the_bucket_changes_hands(coord: Coordination) -> None:
    fences = []
    for owner in ["a", "b", "a", "c"]:
        fences.append((await coord.acquire_buckets(owner, [4], TTL))[4].fence)
        await coord.release_buckets(owner, [4])
    assert fences == sorted(set(fences))
    assert len(fences) == 4


# --- instances and workers ------------------------------------------------------------------


async def test_instance_heartbeats_expire(coord: Coordination, harness: Harness) -> None:
    await coord.heartbeat_instance("s1", {"host": "h1"}, TTL)
    await coord.heartbeat_instance("s2", {"host": "h2"}, TTL * 3)
    assert await coord.instances() == {"s1": {"host": "h1"}, "s2": {"host": "h2"}}
    await harness.advance(TTL * 1.5)
    assert await coord.instances() == {"s2": {"host": "h2"}}
    await coord.heartbeat_instance("s1", {"host": "h1b"}, TTL)  # back again
    assert (await coord.instances())["s1"] == {"host": "h1b"}


async def test_worker_registry_with_ttl(coord: Coordination, harness: Harness) -> None:
    await coord.register_worker(worker("w-b"), TTL)
    w_a = worker("w-a", "email")
    await coord.register_worker(w_a, TTL)
    await coord.register_worker(worker("w-c"), TTL * 3)
    assert [w.instance_id for w in await coord.workers()] == ["w-a", "w-b", "w-c"]
    listed = {w.instance_id: w for w in await coord.workers()}
    assert listed["w-a"] == w_a  # every field kept

    await harness.advance(TTL * 0.6)
    await coord.register_worker(worker("w-b"), TTL)  # refreshed: lives on
    await harness.advance(TTL * 0.6)
    assert [w.instance_id for w in await coord.workers()] == ["w-b", "w-c"]

    await coord.unregister_worker("w-c")
    await coord.unregister_worker("w-unknown")
    assert [w.instance_id for w in await coord.workers()] == ["w-b"]
    await harness.advance(TTL * 1.5)
    assert await coord.workers() == []


# --- wake-ups -------------------------------------------------------------------------------


async def _next(it: AsyncIterator[Any]) -> Any:
    return await asyncio.wait_for(anext(it), WAIT)


async def _quiet(it: AsyncIterator[Any]) -> None:
    task = asyncio.ensure_future(anext(it))
    done, _ = await asyncio.wait({task}, timeout=QUIET)
    assert not done, f"unexpected wake-up: {task.result()!r}"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _close(it: AsyncIterator[Any]) -> None:
    aclose = getattr(it, "aclose", None)
    assert aclose is not None, "wake-up iterators must be closable"
    await aclose()


async def test_wakeups_fan_out_to_every_subscriber(coord: Coordination) -> None:
    one, two = coord.wakeups(), coord.wakeups()
    await coord.wake(1_800_000_010.5)
    await coord.wake(1_800_000_005.0)
    late = coord.wakeups()
    for sub in (one, two):
        assert await _next(sub) == 1_800_000_010.5
        assert await _next(sub) == 1_800_000_005.0
    await _quiet(late)  # subscribed after those wakes

    await _close(one)
    await coord.wake(1_800_000_020.0)
    assert await _next(two) == 1_800_000_020.0
    assert await _next(late) == 1_800_000_020.0
    with pytest.raises(StopAsyncIteration):
        await _next(one)
    for sub in (two, late):
        await _close(sub)


async def test_close_ends_wakeup_iterators(coord: Coordination) -> None:
    sub = coord.wakeups()
    waiting = asyncio.ensure_future(anext(sub))
    done, _ = await asyncio.wait({waiting}, timeout=QUIET)
    assert not done
    await coord.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, WAIT)


async def test_wakeups_across_many_subscribers_are_independent(coord: Coordination) -> None:
    subs = [coord.wakeups() for _ in range(5)]
    dues = [1_800_000_000.0 + n for n in range(10)]
    for due in dues:
        await coord.wake(due)
    for sub in subs:
        assert [await _next(sub) for _ in dues] == dues
        await _close(sub)


# --- cancellation channel -----------------------------------------------------------------------


async def test_cancellations_reach_every_subscriber_and_only_them(coord: Coordination) -> None:
    first, second = new_id(), new_id()
    workers = [coord.cancellations(), coord.cancellations()]
    wakeups = coord.wakeups()
    await coord.cancel([first, second])
    late = coord.cancellations()
    for sub in workers:
        assert [await _next(sub), await _next(sub)] == [first, second]
    await _quiet(late)  # subscribed after that cancel
    await _quiet(wakeups)  # cancellations are not wake-ups ...
    await coord.wake(1_800_000_000.0)
    assert await _next(wakeups) == 1_800_000_000.0
    for sub in workers:
        await _quiet(sub)  # ... nor the other way round
    third = new_id()
    await coord.cancel([third])
    assert await _next(late) == third
    await coord.cancel([])  # nothing to send is fine
    for sub in [*workers, late, wakeups]:
        await _close(sub)


async def test_close_ends_cancellation_iterators(coord: Coordination) -> None:
    sub = coord.cancellations()
    waiting = asyncio.ensure_future(anext(sub))
    done, _ = await asyncio.wait({waiting}, timeout=QUIET)
    assert not done
    await coord.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, WAIT)


# --- change events ------------------------------------------------------------------------------


def _ev(n: int, kind: str = "job.updated") -> Event:
    return Event(kind, {"jobId": f"job-{n}", "n": n, "nested": {"ok": True}})


async def test_published_events_replay_in_order_with_increasing_ids(coord: Coordination) -> None:
    assert await coord.replay(None) == []
    await coord.publish_events([_ev(0), _ev(1, "occurrence.updated")])
    await coord.publish_events([])  # nothing to publish is fine
    await coord.publish_events([_ev(2)])
    replayed = await coord.replay(None)
    assert [e for _, e in replayed] == [_ev(0), _ev(1, "occurrence.updated"), _ev(2)]
    ids = [parse_event_id(i) for i, _ in replayed]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3


async def test_replay_after_an_id_also_inside_one_batch(coord: Coordination) -> None:
    await coord.publish_events([_ev(n) for n in range(5)])
    await coord.publish_events([_ev(n) for n in range(5, 8)])
    everything = await coord.replay(None)
    ids = [i for i, _ in everything]
    assert [e.data["n"] for _, e in await coord.replay(ids[2])] == [3, 4, 5, 6, 7]
    assert [e.data["n"] for _, e in await coord.replay(ids[4])] == [5, 6, 7]
    assert await coord.replay(ids[-1]) == []
    assert [e.data["n"] for _, e in await coord.replay(ids[0], limit=2)] == [1, 2]
    assert [e.data["n"] for _, e in await coord.replay("0-0-0")] == list(range(8))


async def test_a_large_batch_keeps_its_order_and_distinct_ids(coord: Coordination) -> None:
    await coord.publish_events([_ev(n) for n in range(450)])
    replayed = await coord.replay(None, limit=1000)
    assert [e.data["n"] for _, e in replayed] == list(range(450))
    assert len({i for i, _ in replayed}) == 450
    middle = replayed[250][0]
    assert [e.data["n"] for _, e in await coord.replay(middle, limit=3)] == [251, 252, 253]


async def test_malformed_event_ids_are_refused(coord: Coordination) -> None:
    for bad in ("abc", "1-2", "1-2-x", "", "-1-0-0"):
        with pytest.raises(ValidationError) as caught:
            await coord.replay(bad)
        assert caught.value.field == "lastEventId"
        with pytest.raises(ValidationError):
            coord.events(bad)


async def test_live_events_reach_every_subscriber_from_when_it_subscribed(
    coord: Coordination,
) -> None:
    await coord.publish_events([_ev(0)])
    one, two = coord.events(), coord.events()
    await coord.publish_events([_ev(1), _ev(2)])
    late = coord.events()
    await coord.publish_events([_ev(3)])
    for sub in (one, two):
        got = [await _next(sub) for _ in range(3)]
        assert [e.data["n"] for _, e in got] == [1, 2, 3]
    assert [(await _next(late))[1].data["n"]] == [3]
    await _quiet(late)
    for sub in (one, two, late):
        await _close(sub)


async def test_events_after_an_id_replay_then_follow(coord: Coordination) -> None:
    await coord.publish_events([_ev(0), _ev(1), _ev(2)])
    first_id = (await coord.replay(None))[0][0]
    sub = coord.events(first_id)
    assert [(await _next(sub))[1].data["n"] for _ in range(2)] == [1, 2]
    await _quiet(sub)
    await coord.publish_events([_ev(3)])
    event_id, event = await _next(sub)
    assert event.data["n"] == 3
    assert event_id == (await coord.replay(None))[-1][0]
    await _close(sub)


async def test_close_ends_event_iterators(coord: Coordination) -> None:
    sub = coord.events()
    waiting = asyncio.ensure_future(anext(sub))
    done, _ = await asyncio.wait({waiting}, timeout=QUIET)
    assert not done
    await coord.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, WAIT)


async def test_the_feed_is_capped(adapter: str) -> None:
    async with AsyncExitStack() as stack:
        coord: Coordination
        if adapter == "memory":
            coord = MemoryCoordination(event_cap=50)
        else:
            client, prefix = await redis_scope(stack)
            coord = RedisCoordination(client, prefix=prefix, event_cap=50)
        for n in range(0, 1000, 2):  # 500 publishes of 2 events
            await coord.publish_events([_ev(n), _ev(n + 1)])
        kept = await coord.replay(None, limit=10_000)
        # Redis trims whole nodes of its stream (MAXLEN ~): about the cap, never everything.
        assert 50 <= len(kept) < 1000
        assert [e.data["n"] for _, e in kept] == list(range(1000 - len(kept), 1000))
        horizon = await coord.feed_horizon()
        assert horizon is not None
        assert parse_event_id(horizon) <= parse_event_id(kept[0][0])
        await coord.close()


async def test_the_horizon_is_none_until_something_is_dropped(coord: Coordination) -> None:
    assert await coord.feed_horizon() is None
    await coord.publish_events([_ev(n) for n in range(300)])
    assert await coord.feed_horizon() is None
