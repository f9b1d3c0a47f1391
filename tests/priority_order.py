"""The worker's held deliveries start highest priority first: one scenario, run on the
in-process broker (``tests/unit/test_executor.py``) and on RabbitMQ
(``tests/integration/test_worker_outbox.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from uuid import UUID

import rota
from rota.core.ids import new_id
from rota.core.models import JobMessage, Priority
from rota.core.ports import Broker
from rota.sdk.registry import AnyJobDefinition
from rota.worker.executor import Executor
from tests.helpers import eventually

WAIT = 10.0
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

StartExecutor = Callable[..., Awaitable[Executor]]
"""``start(*definitions, concurrency=N)``: an executor of the test's worker group, started."""


async def held_deliveries_start_by_priority(broker: Broker, start: StartExecutor) -> None:
    """Two slots, both busy; a low-priority message arrives and waits (held), then a high one
    (held too: the prefetch is the concurrency, the running ones are acknowledged). A slot
    frees: the high one starts, though the low one came first."""
    gates = {name: asyncio.Event() for name in ("a", "b")}
    started: list[UUID] = []

    @rota.job("prio-block")
    async def block(ctx: rota.JobContext, gate: str) -> None:
        await gates[gate].wait()

    @rota.job("prio-note")
    async def note(ctx: rota.JobContext) -> None:
        started.append(ctx.occurrence_id)
        await gates["b"].wait()

    definitions: tuple[AnyJobDefinition, ...] = (block, note)
    executor = await start(*definitions, concurrency=2)

    async def publish(job_type: str, priority: Priority, data: object = None) -> JobMessage:
        message = JobMessage(
            occurrence_id=new_id(),
            job_id=new_id(),
            job_type=job_type,
            job_data=data,
            scheduled_for=NOW,
            timestamp=NOW,
            priority=priority,
            worker_id=executor.worker_id,
        )
        await broker.publish_jobs([message])
        return message

    for gate in gates:
        await publish("prio-block", Priority.CRITICAL, gate)
    await eventually(lambda: executor.load == 2, WAIT, "both slots busy")
    low = await publish("prio-note", Priority.VERY_LOW)
    await eventually(lambda: executor.held == 1, WAIT, "the low one held")
    high = await publish("prio-note", Priority.HIGH)
    await eventually(lambda: executor.held == 2, WAIT, "the high one held too")
    gates["a"].set()  # one slot frees
    await eventually(lambda: len(started) == 1, WAIT, "one held delivery to start")
    assert started == [high.occurrence_id], "the low-priority one started first"
    assert executor.held == 1
    gates["b"].set()
    await eventually(lambda: len(started) == 2, WAIT, "the other to start")
    assert started == [high.occurrence_id, low.occurrence_id]
