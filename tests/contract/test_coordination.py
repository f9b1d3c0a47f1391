"""Contract of :class:`~rota.core.ports.Coordination`, run against every adapter.

To add an adapter: add its name and factory to ``parametrize_adapters`` below (see
``tests/contract/adapters.py``); the factory returns a :class:`Harness`: the adapter plus
``advance(seconds)``, which lets that much time pass (the memory adapter moves its clock; a
server-side adapter sleeps, so TTLs here stay short), and pushes the adapter's close on the
exit stack it is given after its other clean-ups (the close runs first).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from rota.coordination.memory import MemoryCoordination
from rota.coordination.redis import RedisCoordination
from rota.core.errors import ValidationError
from rota.core.events import (
    Event,
    occurrence_changed,
    occurrence_created,
    occurrence_updated,
    parse_event_id,
)
from rota.core.ids import new_id
from rota.core.models import Job, OccurrenceStatus, WorkerInfo
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.ports import Coordination
from rota.core.records import AppliedChange, Cancellation, ClaimOutcome, ClaimRequest
from rota.redis.client import delete_prefix
from rota.redis.keys import RedisKeys
from tests.contract.adapters import parametrize_adapters
from tests.contract.redis_fixtures import redis_scope

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


async def _memory(stack: AsyncExitStack, request: pytest.FixtureRequest) -> Harness:
    clock = FakeClock()

    async def advance(seconds: float) -> None:
        clock.value += seconds

    coordination = MemoryCoordination(clock=clock)
    stack.push_async_callback(coordination.close)
    return Harness(coordination, advance, clock)


async def _redis(stack: AsyncExitStack, request: pytest.FixtureRequest) -> Harness:
    """Real time: ``advance`` sleeps (the server expires leases and keys by its own clock,
    which is this machine's)."""
    client, prefix = await redis_scope(stack)
    coordination = RedisCoordination(client, prefix=prefix)
    stack.push_async_callback(coordination.close)  # before redis_scope's clean-ups
    return Harness(coordination, asyncio.sleep, time.time)


adapter, harness = parametrize_adapters({"memory": _memory, "redis": _redis})


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


async def test_announcements_reach_every_subscriber_and_are_not_wakeups(
    coord: Coordination,
) -> None:
    one, two, wakeups = coord.announcements(), coord.announcements(), coord.wakeups()
    await coord.announce("dependencies")
    for sub in (one, two):
        assert await _next(sub) == "dependencies"
    await _quiet(wakeups)  # an announcement is no wake-up ...
    await coord.wake(1_800_000_000.0)
    await _quiet(one)  # ... nor a wake-up an announcement
    assert await _next(wakeups) == 1_800_000_000.0
    for sub in (one, two, wakeups):
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
    await coord.cancel([first, second], "cancelled: wrong data")
    late = coord.cancellations()
    for sub in workers:
        assert [await _next(sub), await _next(sub)] == [
            Cancellation(first, "cancelled: wrong data"),
            Cancellation(second, "cancelled: wrong data"),
        ]
    await _quiet(late)  # subscribed after that cancel
    await _quiet(wakeups)  # cancellations are not wake-ups ...
    await coord.wake(1_800_000_000.0)
    assert await _next(wakeups) == 1_800_000_000.0
    for sub in workers:
        await _quiet(sub)  # ... nor the other way round
    third = new_id()
    await coord.cancel([third])
    assert await _next(late) == Cancellation(third)  # no reason given
    fourth = new_id()
    await coord.cancel([fourth], "edited", superseded_below=3)  # a superseded copy
    assert await _next(late) == Cancellation(fourth, "edited", 3)
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


def _run_events() -> list[Event]:
    """A run's events, each kind: packed by the feed, they come back with the same payload."""
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    job = Job(id=new_id(), job_type="report", worker_id="reports", execute_at=at)
    occurrence = new_occurrence(job, at, at, PlanSettings())
    change = AppliedChange(
        occurrence_id=occurrence.id,
        job_id=job.id,
        from_status=OccurrenceStatus.RUNNING,
        to_status=OccurrenceStatus.TIMED_OUT,
        attempt=2,
        job_type="report",
        worker_id="reports",
        instance_id="reports-1",
    )
    updated = occurrence_updated(
        occurrence_id=occurrence.id,
        job_id=job.id,
        job_type="report",
        worker_id=None,
        instance_id=None,
        from_status=None,
        status=OccurrenceStatus.QUEUED,
        attempt=1,
    )
    return [occurrence_created(occurrence), occurrence_changed(change), updated]


async def test_run_events_come_back_with_their_payload(coord: Coordination) -> None:
    sub = coord.events()
    await sub.ready()  # type: ignore[attr-defined]
    sent = _run_events()
    await coord.publish_events(sent)
    expected = [(e.type, dict(e.data)) for e in sent]
    replayed = [e for _, e in await coord.replay(None)]
    followed = [(await _next(sub))[1] for _ in sent]
    assert [(e.type, dict(e.data)) for e in replayed] == expected
    assert [(e.type, dict(e.data)) for e in followed] == expected
    assert replayed[1].data["statusName"] == "TimedOut"
    assert replayed[2].data["fromStatus"] is None
    await _close(sub)


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


async def test_a_subscriber_once_ready_gets_every_event_published_after(
    coord: Coordination,
) -> None:
    sub = coord.events()
    await sub.ready()  # type: ignore[attr-defined]  # what the events route awaits
    await coord.publish_events([_ev(7)])
    assert (await _next(sub))[1].data["n"] == 7
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


# --- attempt claims -------------------------------------------------------------------------

CLAIM_TTL = 60.0


def _attempt(careful: bool = False, attempt: int = 1) -> ClaimRequest:
    return ClaimRequest(new_id(), attempt, careful)


async def test_one_of_two_instances_racing_for_an_attempt_claims_it(
    coord: Coordination, harness: Harness
) -> None:
    request = _attempt()
    before = harness.now()
    a, b = await asyncio.gather(
        coord.claim_attempts("a", [request], CLAIM_TTL),
        coord.claim_attempts("b", [request], CLAIM_TTL),
    )
    outcomes = sorted([a.claims[0].outcome, b.claims[0].outcome])
    assert outcomes == [ClaimOutcome.CLAIMED, ClaimOutcome.TAKEN]
    winner = a.claims[0] if a.claims[0].outcome is ClaimOutcome.CLAIMED else b.claims[0]
    loser = b.claims[0] if winner is a.claims[0] else a.claims[0]
    assert loser.owner == winner.owner
    assert loser.claimed_at == winner.claimed_at
    assert before - 1 <= winner.claimed_at <= harness.now() + 1
    assert a.epoch == b.epoch
    assert a.uncertain_until is None


async def test_the_owner_renews_its_claim_and_others_keep_seeing_it(
    coord: Coordination, harness: Harness
) -> None:
    first, second = _attempt(), _attempt(attempt=2)
    got = await coord.claim_attempts("a", [first], CLAIM_TTL)
    (claim,) = got.claims
    assert (claim.outcome, claim.owner) == (ClaimOutcome.CLAIMED, "a")
    again = await coord.claim_attempts("a", [first, second], CLAIM_TTL)
    assert [(c.outcome, c.owner) for c in again.claims] == [
        (ClaimOutcome.OWNED, "a"),
        (ClaimOutcome.CLAIMED, "a"),  # another attempt of the same occurrence: its own key
    ]
    assert again.claims[0].claimed_at == claim.claimed_at
    other = await coord.claim_attempts("b", [first, second, _attempt(careful=True)], CLAIM_TTL)
    assert [(c.outcome, c.owner) for c in other.claims] == [
        (ClaimOutcome.TAKEN, "a"),
        (ClaimOutcome.TAKEN, "a"),
        (ClaimOutcome.CLAIMED, "b"),  # careful, but the memory was never lost
    ]


async def test_released_claims_of_the_owner_can_be_claimed_by_another(
    coord: Coordination, harness: Harness
) -> None:
    mine, theirs, nobodys = _attempt(), _attempt(), _attempt()
    await coord.claim_attempts("a", [mine], CLAIM_TTL)
    await coord.claim_attempts("b", [theirs], CLAIM_TTL)
    await coord.release_attempts("a", [])  # nothing to give up: no call needed
    await coord.release_attempts(
        "a", [(r.occurrence_id, r.attempt) for r in (mine, theirs, nobodys)]
    )
    after = await coord.claim_attempts("c", [mine, theirs, nobodys], CLAIM_TTL)
    assert [(c.outcome, c.owner) for c in after.claims] == [
        (ClaimOutcome.CLAIMED, "c"),  # a's claim given up
        (ClaimOutcome.TAKEN, "b"),  # another's claim left alone
        (ClaimOutcome.CLAIMED, "c"),
    ]


async def test_a_claim_expires_after_its_ttl(coord: Coordination, harness: Harness) -> None:
    request = _attempt()
    await coord.claim_attempts("a", [request], TTL)
    await harness.advance(TTL * 0.5)
    renewed = await coord.claim_attempts("a", [request], TTL)  # renews it for another TTL
    assert renewed.claims[0].outcome is ClaimOutcome.OWNED
    await harness.advance(TTL * 0.7)
    held = await coord.claim_attempts("b", [request], TTL)
    assert (held.claims[0].outcome, held.claims[0].owner) == (ClaimOutcome.TAKEN, "a")
    await harness.advance(TTL * 1.5)
    taken = await coord.claim_attempts("b", [request], TTL)
    assert (taken.claims[0].outcome, taken.claims[0].owner) == (ClaimOutcome.CLAIMED, "b")


async def test_a_caller_that_knew_an_older_epoch_marks_the_memory_lost(
    coord: Coordination, harness: Harness
) -> None:
    """A worker that saw another epoch token before (the memory was lost since): for the TTL
    after the loss, careful requests of attempts nobody holds are marked taken by an unknown
    owner; others are granted; held claims are unaffected."""
    held = _attempt()
    first = await coord.claim_attempts("a", [held], CLAIM_TTL)
    assert first.uncertain_until is None
    same = await coord.claim_attempts("a", [], CLAIM_TTL, known_epoch=first.epoch)
    assert same.uncertain_until is None  # its own token: nothing was lost

    careful, plain = _attempt(careful=True), _attempt()
    batch = await coord.claim_attempts(
        "b", [careful, plain, ClaimRequest(held.occurrence_id, 1, True)], CLAIM_TTL,
        known_epoch="an-older-token",
    )  # fmt: skip
    assert [(c.outcome, c.owner) for c in batch.claims] == [
        (ClaimOutcome.UNCERTAIN, None),
        (ClaimOutcome.CLAIMED, "b"),
        (ClaimOutcome.TAKEN, "a"),
    ]
    assert batch.uncertain_until is not None
    assert harness.now() < batch.uncertain_until <= harness.now() + CLAIM_TTL + 1
    # The attempt marked uncertain stays taken (by nobody known), for everyone.
    later = await coord.claim_attempts("c", [_attempt(), ClaimRequest(careful.occurrence_id, 1)],
                                       CLAIM_TTL, known_epoch=batch.epoch)  # fmt: skip
    assert [(c.outcome, c.owner) for c in later.claims] == [
        (ClaimOutcome.CLAIMED, "c"),
        (ClaimOutcome.TAKEN, None),
    ]
    assert later.uncertain_until == batch.uncertain_until  # the loss is remembered


async def test_the_uncertain_window_ends_after_the_ttl(
    coord: Coordination, harness: Harness
) -> None:
    lost = await coord.claim_attempts("a", [], TTL, known_epoch="an-older-token")
    assert lost.uncertain_until is not None
    assert (await coord.claim_attempts("a", [_attempt(True)], TTL)).claims[0].outcome is (
        ClaimOutcome.UNCERTAIN
    )
    await harness.advance(TTL * 1.5)
    after = await coord.claim_attempts("a", [_attempt(True)], TTL)
    assert after.claims[0].outcome is ClaimOutcome.CLAIMED


async def test_a_flushed_redis_is_noticed_by_a_worker_that_knew_its_epoch() -> None:
    """Redis loses every key (FLUSHALL, a restart without persistence): the claims are gone
    and the epoch is new; the first caller that knew the old epoch marks the loss, also when
    a caller that knew nothing (a new worker) recreated the epoch first."""
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        coord = RedisCoordination(client, prefix=prefix)
        stack.push_async_callback(coord.close)
        held = _attempt()
        before = await coord.claim_attempts("a", [held], CLAIM_TTL)
        await delete_prefix(client, RedisKeys(prefix))  # the flush

        fresh = await coord.claim_attempts("new-worker", [], CLAIM_TTL)
        assert fresh.epoch != before.epoch
        assert fresh.uncertain_until is None
        copy = ClaimRequest(held.occurrence_id, 1, careful=True)
        noticed = await coord.claim_attempts("b", [copy], CLAIM_TTL, known_epoch=before.epoch)
        assert noticed.epoch == fresh.epoch
        assert noticed.uncertain_until is not None
        assert [(c.outcome, c.owner) for c in noticed.claims] == [(ClaimOutcome.UNCERTAIN, None)]
        first = await coord.claim_attempts("b", [_attempt()], CLAIM_TTL, known_epoch=before.epoch)
        assert first.claims[0].outcome is ClaimOutcome.CLAIMED  # a first delivery still runs
        ttl_ms = await client.pttl(RedisKeys(prefix).claim(held.occurrence_id, 1))
        assert 0 < ttl_ms <= CLAIM_TTL * 1000


async def test_a_read_cut_short_by_its_readers_cancellation_leaves_no_error_unretrieved() -> None:
    """A stream reader cancelled while it waits in ``XREAD``: the read it cancels may end in
    the Redis driver's own error instead of a cancellation (redis-py's pool, told of a
    connection it no longer holds, raises ``KeyError``: seen at a server's shutdown). That
    error is taken, not left for asyncio to log as "never retrieved" on every shutdown."""
    import gc

    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        coord = RedisCoordination(client, prefix=prefix)
        stack.push_async_callback(coord.close)
        stream = coord.wakeups()
        stack.push_async_callback(stream.aclose)
        await stream.ready()
        reading = asyncio.Event()

        async def fill() -> None:  # the driver's read, ending as redis-py's did
            reading.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                raise KeyError("a connection the pool no longer holds") from None

        stream._fill = fill  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        unretrieved: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
        try:
            reader = asyncio.create_task(anext(stream))
            await reading.wait()
            cut = stream._reading  # the read under way
            assert cut is not None
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            await asyncio.wait({cut})  # it ends with its error (its callbacks have run)
            assert not cut.cancelled()  # its error ended it (``exception()`` would take it)
            del reader, cut
            gc.collect()  # a task whose error nobody took reports it when it is collected
        finally:
            loop.set_exception_handler(None)
        assert unretrieved == []
