"""Contract of the limits' slice of the coordination
(:class:`~rota.core.ports.limits.LimitMemory`), on every adapter (memory and real Redis)."""

from __future__ import annotations

from rota.core.limits import JobLimit, LimitHold, LimitRequest, rate_window
from rota.core.ports import Coordination
from tests.contract import test_coordination as base
from tests.contract.test_coordination import TTL, Harness

# the shared fixtures, found by pytest under these names
adapter = base.adapter
harness = base.harness
coord = base.coord


def _slot(token: str, key: str = "sync", max_concurrent: int = 2) -> LimitRequest:
    return LimitRequest(token, slot_key=key, max_concurrent=max_concurrent, label=key)


async def test_limits_published_and_read(coord: Coordination) -> None:
    assert await coord.published_limits() is None
    limits = [JobLimit("sync", 2, "customerId"), JobLimit("mail", rate=5.0)]
    await coord.put_limits(limits)
    assert await coord.published_limits() == limits
    await coord.put_limits([])
    assert await coord.published_limits() == []


async def test_semaphore_grants_at_most_max(coord: Coordination) -> None:
    grants = await coord.acquire_limits("w1", [_slot(f"o{i}") for i in range(4)], 30.0, 10)
    assert [g.granted for g in grants] == [True, True, False, False]
    assert grants[2].holding == 2
    # a holder asking again keeps its slot; another key is its own semaphore
    again = await coord.acquire_limits("w2", [_slot("o1"), _slot("x", key="sync|k=1")], 30, 10)
    assert [g.granted for g in again] == [True, True]
    usage = await coord.limit_usage()
    assert usage.running == {"sync": 2, "sync|k=1": 1}
    assert sorted(w.token for w in usage.waiting) == ["o2", "o3"]
    assert {w.label for w in usage.waiting} == {"sync"}
    assert await coord.limit_waiting_for(["o1", "o2", "nobody"]) == {"o2": "sync"}
    assert await coord.limit_waiting_for([]) == {}


async def test_release_frees_a_slot_and_forgets_the_waiter(coord: Coordination) -> None:
    await coord.acquire_limits("w1", [_slot("a"), _slot("b"), _slot("c")], 30.0, 10)
    await coord.release_limits("w1", [LimitHold("sync", "a")])
    [grant] = await coord.acquire_limits("w2", [_slot("c")], 30.0, 10)
    assert grant.granted
    usage = await coord.limit_usage()
    assert usage.running == {"sync": 2}
    assert not usage.waiting
    await coord.release_limits("w1", [LimitHold("sync", "b"), LimitHold("sync", "c")])
    assert (await coord.limit_usage()).running == {}


async def test_room_caps_the_grants_of_one_call(coord: Coordination) -> None:
    grants = await coord.acquire_limits(
        "w1", [_slot(f"o{i}", max_concurrent=5) for i in range(4)], 30, 1
    )
    assert [g.granted for g in grants] == [True, False, False, False]


async def test_a_dead_holders_slot_is_free_after_its_lease(
    coord: Coordination, harness: Harness
) -> None:
    await coord.acquire_limits("dead", [_slot("a"), _slot("b")], TTL, 10)
    await coord.acquire_limits("live", [_slot("c")], 30.0, 10)  # refused, waits
    await harness.advance(TTL / 2)
    assert await coord.renew_limits("dead", [LimitHold("sync", "b")], TTL) == 1
    await harness.advance(TTL * 0.7)  # a's lease is over, b's renewed one is not
    [grant] = await coord.acquire_limits("live", [_slot("c")], 30.0, 10)
    assert grant.granted
    [refused] = await coord.acquire_limits("live", [_slot("d")], 30.0, 10)
    assert not refused.granted
    await harness.advance(TTL)
    assert (await coord.limit_usage()).running == {"sync": 1}  # c; b expired too
    assert await coord.renew_limits("dead", [LimitHold("sync", "b")], TTL) == 0


async def test_waiters_expire_unless_they_ask_again(coord: Coordination, harness: Harness) -> None:
    await coord.acquire_limits(
        "w", [_slot("a", max_concurrent=1), _slot("b", max_concurrent=1)], TTL, 10
    )
    first = (await coord.limit_usage()).waiting
    assert [w.token for w in first] == ["b"]
    await harness.advance(TTL / 2)
    await coord.acquire_limits("w", [_slot("b", max_concurrent=1)], TTL, 10)
    await harness.advance(TTL * 0.7)
    [still] = (await coord.limit_usage()).waiting
    assert still.since == first[0].since  # waiting since its first refusal
    await harness.advance(TTL)
    assert await coord.limit_waiting_for(["b"]) == {}
    assert not (await coord.limit_usage()).waiting


async def test_rate_allows_count_starts_per_window(coord: Coordination, harness: Harness) -> None:
    rate = 8.0
    count, window = rate_window(rate)
    assert (count, window) == (8, 1.0)
    assert rate_window(0.5) == (1, 2.0)
    assert rate_window(2.5) == (2, 0.8)

    def ask(token: str) -> LimitRequest:
        return LimitRequest(token, rate_key="mail", rate=rate, label="mail")

    grants = await coord.acquire_limits("w", [ask(f"s{i}") for i in range(count + 2)], 30.0, 100)
    assert sum(g.granted for g in grants) == count
    assert all(g.granted for g in grants[:count])
    assert 0 < grants[-1].wait <= window + 0.05
    await harness.advance(window + 0.05)
    grants = await coord.acquire_limits("w", [ask("t1"), ask("t2")], 30.0, 100)
    assert all(g.granted for g in grants)


async def test_slot_and_rate_are_taken_together(coord: Coordination) -> None:
    def ask(token: str) -> LimitRequest:
        return LimitRequest(token, "sync", 5, "sync", 1.0, "sync")

    grants = await coord.acquire_limits("w", [ask("a"), ask("b")], 30.0, 10)
    assert [g.granted for g in grants] == [True, False]
    # b was refused by the rate: it took no slot
    assert (await coord.limit_usage()).running == {"sync": 1}
