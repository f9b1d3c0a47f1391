"""The sign-in limits' parts: token buckets per client and in all, and the bounded hashing
pool."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from rota.core.errors import OverloadedError, RateLimitedError
from rota.services.hashing import HashingPool
from rota.services.ratelimit import Rate, RateLimiter


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    ticks = Ticks()
    limits = RateLimiter("sign-in", per_client=Rate(0.5, 2), overall=Rate(100, 100), clock=ticks)
    limits.take("a")
    limits.take("a")
    with pytest.raises(RateLimitedError) as refused:
        limits.take("a")
    assert refused.value.retry_after == 2
    ticks.now += 1  # half a token
    with pytest.raises(RateLimitedError) as still:
        limits.take("a")
    assert still.value.retry_after == 1
    ticks.now += 100  # full again, but never above the burst
    limits.take("a")
    limits.take("a")
    with pytest.raises(RateLimitedError):
        limits.take("a")
    assert limits.refused == 3


def test_a_refused_request_takes_no_token_from_the_other_bucket() -> None:
    ticks = Ticks()
    limits = RateLimiter("sign-in", per_client=Rate(1, 1), overall=Rate(1, 2), clock=ticks)
    limits.take("a")
    with pytest.raises(RateLimitedError):
        limits.take("a")  # refused per client: the global bucket keeps its token
    limits.take("b")
    with pytest.raises(RateLimitedError, match="try again"):
        limits.take("c")  # global: empty now


def test_clients_beyond_the_kept_number_are_forgotten_oldest_first() -> None:
    limits = RateLimiter(
        "sign-in", per_client=Rate(0.001, 1), overall=Rate(100, 100), clock=Ticks(), clients_kept=2
    )
    limits.take("a")
    limits.take("b")
    limits.take("c")  # forgets a
    limits.take("a")  # a starts full again
    with pytest.raises(RateLimitedError):
        limits.take("c")


def test_rates_must_make_sense() -> None:
    with pytest.raises(ValueError, match="per_second"):
        Rate(0, 1)
    with pytest.raises(ValueError, match="burst"):
        Rate(1, 0.5)


def cheap() -> PasswordHash:
    return PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))


async def test_the_pool_admits_threads_plus_queue_and_refuses_the_rest() -> None:
    pool = HashingPool(cheap(), threads=1, queue=2)
    with pool.ticket(), pool.ticket(), pool.ticket():
        assert pool.in_flight == 3
        with pytest.raises(OverloadedError) as refused:
            pool.ticket()
        assert refused.value.retry_after == 1
        with pytest.raises(OverloadedError):
            await pool.hash("a passphrase")
    assert (pool.in_flight, pool.refused) == (0, 2)
    hashed = await pool.hash("a passphrase")
    assert (await pool.verify_and_update("a passphrase", hashed))[0]
    assert pool.in_flight == 0
    pool.close()


async def test_a_check_whose_caller_left_keeps_its_room_until_its_thread_is_done() -> None:
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "done"

    pool = HashingPool(cheap(), threads=1, queue=0)
    ticket = pool.ticket()
    waiting = asyncio.create_task(ticket.run(slow))
    assert await asyncio.to_thread(started.wait, 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    with pytest.raises(OverloadedError):  # the thread still hashes: no room yet
        pool.ticket()
    release.set()
    await asyncio.to_thread(pool.close, wait=True)  # the slow check's thread has ended
    assert pool.in_flight == 0
    assert (await pool.hash("a passphrase")).startswith("$argon2id$")
    pool.close()


def test_a_ticket_runs_once() -> None:
    pool = HashingPool(cheap(), threads=1, queue=0)

    async def twice() -> None:
        with pool.ticket() as ticket:
            await ticket.run(str, 1)
            with pytest.raises(RuntimeError, match="one check"):
                await ticket.run(str, 2)

    asyncio.run(twice())
    pool.close()
