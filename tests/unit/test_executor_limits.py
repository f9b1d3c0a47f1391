"""The limits' gate in the executor (:mod:`rota.worker.gate`): cluster-wide slots taken from
the coordination (here the in-memory one, shared by two executors) before a start."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import rota
from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.limits import JobLimit
from rota.core.models import OccurrenceStatus
from tests.helpers import eventually
from tests.limits_measure import max_overlap
from tests.unit import executor_harness
from tests.unit.executor_harness import Harness, Observer

broker = executor_harness.broker
observer = executor_harness.observer
harness = executor_harness.harness

spans: list[tuple[str, float, float]] = []
gate_open = asyncio.Event()


@rota.job("limited")
async def limited(ctx: rota.JobContext, data: dict[str, Any]) -> None:
    start = time.monotonic()
    await asyncio.sleep(0.03)
    spans.append((str(data.get("customer")), start, time.monotonic()))


started: list[Any] = []


@rota.job("blocked")
async def blocked(ctx: rota.JobContext) -> None:
    started.append(ctx.occurrence_id)
    await gate_open.wait()


@rota.job("free")
async def free(ctx: rota.JobContext) -> str:
    return "ran"


async def test_two_executors_never_exceed_the_limit_per_key(
    harness: Harness, observer: Observer
) -> None:
    spans.clear()
    coordination = MemoryCoordination()
    await coordination.put_limits([JobLimit("limited", 2, "customer")])
    for _ in range(2):
        await harness.executor(limited, concurrency=8, limits=coordination)
    sent = [await harness.publish("limited", {"customer": i % 2}) for i in range(24)]
    for message in sent:
        assert (
            await observer.wait_final(message.occurrence_id)
        ).status is OccurrenceStatus.COMPLETED
    for customer in ("0", "1"):
        overlap = max_overlap([(s, e) for c, s, e in spans if c == customer])
        assert overlap == 2  # never above the limit, and reached
    assert max_overlap([(s, e) for _, s, e in spans]) > 2  # two keys run side by side
    usage = await coordination.limit_usage()
    assert usage.running == {}
    assert not usage.waiting


async def test_a_waiting_occurrence_is_noted_listed_and_holds_no_worker_slot(
    harness: Harness, observer: Observer
) -> None:
    gate_open.clear()
    started.clear()
    coordination = MemoryCoordination()
    await coordination.put_limits([JobLimit("blocked", 1)])
    executor = await harness.executor(blocked, free, concurrency=2, limits=coordination)
    first = await harness.publish("blocked")
    await observer.wait_status(first.occurrence_id, OccurrenceStatus.RUNNING)
    second = await harness.publish("blocked", priority=1)
    third = await harness.publish("blocked", priority=4)
    await observer.until(lambda: len({r.occurrence_id for r in observer.logs}) == 2)
    notes = {r.occurrence_id: r.message for r in observer.logs}
    assert notes[second.occurrence_id] == "waiting for limit blocked: 1 of 1 running"
    usage = await coordination.limit_usage()
    assert {w.token for w in usage.waiting} == {str(second.occurrence_id), str(third.occurrence_id)}
    # the waiting ones take no worker slot: other work runs on the free one
    other = await harness.publish("free")
    assert (await observer.wait_final(other.occurrence_id)).status is OccurrenceStatus.COMPLETED
    assert executor.gate is not None
    assert executor.gate.waiting == 2
    # a waiting one cancelled ends at once, without a slot
    fourth = await harness.publish("blocked")
    await observer.until(
        lambda: any(r.occurrence_id == fourth.occurrence_id for r in observer.logs)
    )
    assert executor.cancel(fourth.occurrence_id, "no longer needed")
    final = await observer.wait_final(fourth.occurrence_id)
    assert final.status is OccurrenceStatus.CANCELLED
    assert executor.gate.waiting == 2
    gate_open.set()
    for message in (first, second, third):
        await observer.wait_final(message.occurrence_id)
    assert started == [first.occurrence_id, third.occurrence_id, second.occurrence_id]
    assert not (await coordination.limit_usage()).waiting


async def test_rate_limit_spaces_the_starts(harness: Harness, observer: Observer) -> None:
    spans.clear()
    coordination = MemoryCoordination()
    await coordination.put_limits([JobLimit("limited", rate=20.0)])
    await harness.executor(limited, concurrency=8, limits=coordination)
    sent = [await harness.publish("limited", {}) for _ in range(30)]
    for message in sent:
        await observer.wait_final(message.occurrence_id)
    starts = sorted(s for _, s, _ in spans)
    # at most 20 starts in any second (a little slack for the clock reads)
    assert max(sum(1 for t in starts if s <= t < s + 0.98) for s in starts) <= 20
    assert starts[-1] - starts[0] >= 0.45


class Unreachable(MemoryCoordination):
    """The in-memory coordination, its limit calls failing while ``down`` is set (Redis out
    of reach)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.refused_calls = 0

    async def acquire_limits(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            self.refused_calls += 1
            raise BackendUnavailableError("acquire limits: Redis unavailable")
        return await super().acquire_limits(*args, **kwargs)


async def test_a_limited_type_waits_while_the_coordination_is_unreachable(
    harness: Harness, observer: Observer
) -> None:
    coordination = Unreachable()
    await coordination.put_limits([JobLimit("free", 5)])
    executor = await harness.executor(free, limited, concurrency=4, limits=coordination)
    held = await harness.publish("free")
    other = await harness.publish("limited", {})  # not limited: runs
    assert (await observer.wait_final(other.occurrence_id)).status is OccurrenceStatus.COMPLETED
    await eventually(lambda: coordination.refused_calls >= 3, 5, "the gate to ask again")
    assert executor.gate is not None
    assert executor.gate.waiting == 1
    assert observer.final(held.occurrence_id) is None  # not started without a slot
    coordination.down = False
    assert (await observer.wait_final(held.occurrence_id)).status is OccurrenceStatus.COMPLETED
