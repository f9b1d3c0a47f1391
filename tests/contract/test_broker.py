"""Contract of :class:`~rota.core.ports.Broker`, run against every adapter.

To add an adapter: add its name and factory to ``parametrize_adapters`` below (see
``tests/contract/adapters.py``); the factory returns a :class:`Harness` (a started broker on
names of its own, and how to read its dead letters), pushes the broker's close on the stack and
may ask the test's request for session fixtures (RabbitMQ: a vhost per test run).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import pytest
from msgspec.structs import replace

from rota.brokers.inprocess import InProcessBroker
from rota.brokers.rabbitmq import RabbitMQBroker
from rota.core.errors import BackendUnavailableError
from rota.core.models import JobMessage, LogRecord, OccurrenceStatus, Priority, StatusRecord
from rota.core.ports import Broker, Delivery
from rota.core.records import Batch
from tests.contract.adapters import parametrize_adapters
from tests.contract.rabbitmq_fixtures import rabbitmq_url  # noqa: F401 (session fixture)

T = TypeVar("T")
WAIT = 5.0
"""Upper bound for something that must happen (never reached when it works)."""
QUIET = 0.2
"""How long something that must not happen is watched for."""


@dataclass
class Harness:
    broker: Broker
    prefix: str
    dead_letters: Callable[[], Awaitable[list[uuid.UUID]]]
    """Occurrence ids of the dead-lettered job messages, oldest first."""


async def _memory(stack: AsyncExitStack, request: pytest.FixtureRequest) -> Harness:
    broker = InProcessBroker(prefix="rota")

    async def dead() -> list[uuid.UUID]:
        return [m.occurrence_id for m in broker.dead_letters]

    await broker.start()
    stack.push_async_callback(broker.close)
    return Harness(broker, "rota", dead)


async def _rabbitmq(stack: AsyncExitStack, request: pytest.FixtureRequest) -> Harness:
    url = request.getfixturevalue("rabbitmq_url")  # one vhost per run, a prefix per test
    prefix = f"rota-{uuid.uuid4().hex[:8]}"
    broker = RabbitMQBroker(url, prefix=prefix, publish_timeout=WAIT, operation_timeout=WAIT)

    async def dead() -> list[uuid.UUID]:
        return [letter.message.occurrence_id for letter in await broker.dead_letters()]

    await broker.start()
    stack.push_async_callback(broker.close)
    return Harness(broker, prefix, dead)


adapter, harness = parametrize_adapters({"memory": _memory, "rabbitmq": _rabbitmq})


@pytest.fixture
def broker(harness: Harness) -> Broker:
    return harness.broker


@pytest.fixture
def names() -> Callable[[str], str]:
    """Worker group and job type names unique to the test (queues may outlive it)."""
    suffix = uuid.uuid4().hex[:8]
    return lambda base: f"{base}-{suffix}"


# --- helpers --------------------------------------------------------------------------------

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def job(group: str, job_type: str, priority: Priority = Priority.MEDIUM) -> JobMessage:
    """A job message sent to worker group ``group`` (its correlation id the occurrence id, as
    the dispatcher sends it)."""
    oid = uuid.uuid4()
    return JobMessage(
        occurrence_id=oid,
        original_correlation_id=oid,
        job_id=uuid.uuid4(),
        job_type=job_type,
        job_data={"n": 1},
        scheduled_for=NOW,
        timestamp=NOW,
        priority=priority,
        worker_id=group,
    )


def status(n: int = 0) -> StatusRecord:
    return StatusRecord(
        occurrence_id=uuid.uuid4(), status=OccurrenceStatus.RUNNING, timestamp=NOW, attempt=n + 1
    )


def log(text: str) -> LogRecord:
    return LogRecord(occurrence_id=uuid.uuid4(), timestamp=NOW, level="INFO", message=text)


async def take(it: AsyncIterator[T]) -> T:
    return await asyncio.wait_for(anext(it), WAIT)


async def take_n(it: AsyncIterator[Delivery], n: int) -> list[Delivery]:
    return [await take(it) for _ in range(n)]


async def stays_pending(it: AsyncIterator[T]) -> asyncio.Task[T]:
    """Ask for the next item and check none comes for a while; returns the waiting task."""
    task: asyncio.Task[T] = asyncio.ensure_future(anext(it))
    done, _ = await asyncio.wait({task}, timeout=QUIET)
    assert not done, f"unexpected item: {task.result()!r}"
    return task


async def stays_pending_after(task: asyncio.Task[T]) -> asyncio.Task[T]:
    """Check that the waiting ``task`` still gets nothing for a while; returns it."""
    done, _ = await asyncio.wait({task}, timeout=QUIET)
    assert not done, f"unexpected item: {task.result()!r}"
    return task


async def stop(it: object) -> None:
    aclose = getattr(it, "aclose", None)
    assert aclose is not None, "consumers must be closable"
    await aclose()


async def cancel(task: asyncio.Task[object]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- job messages ---------------------------------------------------------------------------


async def test_higher_priority_first_then_publication_order(
    broker: Broker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("Kind")
    await broker.declare_worker_group(group, [kind])
    p = Priority
    plan = [p.MEDIUM, p.LOW, p.CRITICAL, p.MEDIUM, p.HIGH, p.VERY_LOW, p.CRITICAL, p.LOW]
    messages = [job(group, kind, prio) for prio in plan]
    await broker.publish_jobs(messages)
    consumer = broker.consume_jobs(group, 100)
    got = await take_n(consumer, len(messages))
    for delivery in got:
        await delivery.ack()
    expected = sorted(range(len(plan)), key=lambda i: (-plan[i], i))
    assert [d.message.occurrence_id for d in got] == [messages[i].occurrence_id for i in expected]
    assert [d.message for d in got] == [messages[i] for i in expected]  # body intact
    assert not any(d.redelivered for d in got)
    await stop(consumer)


async def test_each_message_goes_to_the_one_group_it_names(
    broker: Broker, harness: Harness, names: Callable[[str], str]
) -> None:
    """No copies: a job type both groups run reaches only the group its message names; a
    group no one declared yet gets its queue made, and keeps the message."""
    one, two, later = names("one"), names("two"), names("later")
    shared = names("Shared")
    await broker.declare_worker_group(one, [shared])
    await broker.declare_worker_group(two, [shared])
    to_one, to_two, to_later = job(one, shared), job(two, shared), job(later, shared)
    await broker.publish_jobs([to_one, to_two, to_later])

    depths = await broker.queue_depths([later])
    assert depths[f"{harness.prefix}.jobs.{one}"] == 1
    assert depths[f"{harness.prefix}.jobs.{two}"] == 1
    assert depths[f"{harness.prefix}.jobs.{later}"] == 1

    consumers = [broker.consume_jobs(g, 10) for g in (one, two, later)]
    got = [await take(c) for c in consumers]
    assert [d.message.occurrence_id for d in got] == [
        m.occurrence_id for m in (to_one, to_two, to_later)
    ]
    for d in got:
        await d.ack()
    for c in consumers:
        await cancel(await stays_pending(c))  # nothing else came: no copy anywhere
        await stop(c)


async def test_a_message_naming_no_group_is_refused(
    broker: Broker, harness: Harness, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("Kind")
    await broker.declare_worker_group(group, [kind])
    with pytest.raises(ValueError, match="names no worker group"):
        await broker.publish_jobs([job(group, kind), replace(job(group, kind), worker_id=None)])
    assert (await broker.queue_depths([group]))[f"{harness.prefix}.jobs.{group}"] == 0


async def test_consumers_of_a_group_share_its_queue(
    broker: Broker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    first, second = broker.consume_jobs(group, 1), broker.consume_jobs(group, 1)
    await broker.publish_jobs([job(group, kind), job(group, kind)])
    a, b = await take(first), await take(second)
    assert a.message.occurrence_id != b.message.occurrence_id

    more = [job(group, kind) for _ in range(40)]
    await broker.publish_jobs(more)
    seen: list[uuid.UUID] = [a.message.occurrence_id, b.message.occurrence_id]
    held = [a, b]

    async def drain(consumer: AsyncIterator[Delivery], index: int) -> None:
        delivery = held[index]
        while True:
            await delivery.ack()
            if len(seen) == 42:
                return
            try:
                delivery = await asyncio.wait_for(anext(consumer), QUIET)
            except TimeoutError:
                return
            seen.append(delivery.message.occurrence_id)

    await asyncio.wait_for(asyncio.gather(drain(first, 0), drain(second, 1)), WAIT)
    assert len(seen) == 42
    assert len(set(seen)) == 42  # each message went to exactly one consumer
    assert set(seen) >= {m.occurrence_id for m in more}
    for c in (first, second):
        await stop(c)


async def test_prefetch_bounds_unsettled_deliveries(
    broker: Broker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(4)]
    await broker.publish_jobs(messages)
    consumer = broker.consume_jobs(group, 2)
    first, second = await take_n(consumer, 2)
    waiting = await stays_pending(consumer)  # the third is held back
    await first.ack()
    third = await asyncio.wait_for(waiting, WAIT)
    assert third.message.occurrence_id == messages[2].occurrence_id
    waiting = await stays_pending(consumer)
    await second.reject(requeue=False)  # a reject settles too
    fourth = await asyncio.wait_for(waiting, WAIT)
    assert fourth.message.occurrence_id == messages[3].occurrence_id
    for d in (third, fourth):
        await d.ack()
    await stop(consumer)


async def test_requeued_message_is_redelivered_flagged(
    broker: Broker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    m1, m2 = job(group, kind), job(group, kind)
    await broker.publish_jobs([m1, m2])
    consumer = broker.consume_jobs(group, 1)
    first = await take(consumer)
    assert first.message.occurrence_id == m1.occurrence_id
    assert first.redelivered is False
    await first.reject(requeue=True)
    again = await take(consumer)
    assert again.message.occurrence_id == m1.occurrence_id  # back in its place
    assert again.redelivered is True
    await again.ack()
    last = await take(consumer)
    assert last.message.occurrence_id == m2.occurrence_id
    assert last.redelivered is False
    await last.ack()
    await cancel(await stays_pending(consumer))  # acked messages do not come back
    await stop(consumer)


async def test_rejected_message_goes_to_dead_letters(
    broker: Broker, harness: Harness, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    doomed, fine = job(group, kind), job(group, kind)
    await broker.publish_jobs([doomed, fine])
    consumer = broker.consume_jobs(group, 1)
    delivery = await take(consumer)
    await delivery.reject(requeue=False)
    nxt = await take(consumer)
    assert nxt.message.occurrence_id == fine.occurrence_id
    await nxt.ack()
    await cancel(await stays_pending(consumer))
    assert await harness.dead_letters() == [doomed.occurrence_id]
    await stop(consumer)


async def test_close_ends_consumers_and_hands_back_unsettled(
    broker: Broker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    message = job(group, kind)
    await broker.publish_jobs([message])
    consumer = broker.consume_jobs(group, 5)
    delivery = await take(consumer)
    assert delivery.message.occurrence_id == message.occurrence_id
    idle = broker.consume_jobs(group, 5)
    waiting_job = await stays_pending(idle)
    statuses = broker.consume_status(10, 0.05)
    waiting_batch = await stays_pending(statuses)

    await broker.close()
    for task in (waiting_job, waiting_batch):
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(task, WAIT)
    with pytest.raises(StopAsyncIteration):
        await take(consumer)
    with pytest.raises(BackendUnavailableError):
        await broker.publish_jobs([job(group, kind)])

    await broker.start()  # reconnect: the unsettled message comes again
    fresh = broker.consume_jobs(group, 5)
    again = await take(fresh)
    assert again.message.occurrence_id == message.occurrence_id
    assert again.redelivered is True
    await again.ack()
    await stop(fresh)


async def test_a_close_while_consumers_start_ends_them(
    broker: Broker, names: Callable[[str], str]
) -> None:
    """The broker's close comes while each consumer is still opening its channel (on a busy
    machine it takes longer than the tests above wait), at each step of the opening: the
    iteration ends, no error."""
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    for steps in range(12):
        starting = [
            asyncio.ensure_future(anext(broker.consume_jobs(group, 5))),
            asyncio.ensure_future(anext(broker.consume_status(10, 0.05))),
        ]
        for _ in range(steps + 1):  # under way, up to a few of the opening's round trips
            await asyncio.sleep(0)
        await broker.close()
        for task in starting:
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(task, WAIT)
        await broker.start()


async def test_many_messages_arrive_whole_and_in_order(
    broker: Broker, names: Callable[[str], str]
) -> None:
    """More messages than a publish window (RabbitMQ writes a window as one payload)."""
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(2500)]
    await broker.publish_jobs(messages)
    consumer = broker.consume_jobs(group, 500)
    got: list[uuid.UUID] = []
    for _ in messages:
        delivery = await take(consumer)
        got.append(delivery.message.occurrence_id)
        await delivery.ack()
    assert got == [m.occurrence_id for m in messages]
    await stays_pending(consumer)
    await stop(consumer)


async def test_acks_settle_only_their_own_deliveries(
    broker: Broker, names: Callable[[str], str]
) -> None:
    """Acknowledging later deliveries while an earlier one is open leaves that one open (a
    ``multiple`` ack may only cover what is really done)."""
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(6)]
    await broker.publish_jobs(messages)
    consumer = broker.consume_jobs(group, 10)
    first, second, third, *rest = await take_n(consumer, 6)
    await third.ack()
    await second.ack()
    for delivery in rest[1:]:
        await delivery.ack()
    await first.reject(requeue=True)  # comes again: the others must not
    again = await take(consumer)
    assert again.message.occurrence_id == first.message.occurrence_id
    await again.ack()
    # rest[0] stays open: closing hands it (and only it) back.
    await broker.close()
    await broker.start()
    fresh = broker.consume_jobs(group, 10)
    back = await take(fresh)
    assert back.message.occurrence_id == rest[0].message.occurrence_id
    await back.ack()
    await stays_pending(fresh)
    await stop(fresh)


async def test_acks_of_a_burst_settle_every_delivery(
    broker: Broker, harness: Harness, names: Callable[[str], str]
) -> None:
    """Deliveries acknowledged together in bursts (one turn of the loop each; while the first
    delivery stays open, then ``multiple`` acks once it is settled) all leave the queue: none
    comes again after the broker's connection is closed."""
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(250)]
    await broker.publish_jobs(messages)
    consumer = broker.consume_jobs(group, 100)
    first = await take(consumer)  # open until half the others are settled
    got = [first.message.occurrence_id]
    while len(got) < len(messages):
        if len(got) > len(messages) // 2 and first is not None:
            await first.ack()
            first = None
        burst = [await take(consumer)]
        while len(burst) < 37 and len(got) + len(burst) < len(messages):
            burst.append(await take(consumer))
        await asyncio.gather(*(delivery.ack() for delivery in reversed(burst)))
        got.extend(delivery.message.occurrence_id for delivery in burst)
    assert sorted(got) == sorted(m.occurrence_id for m in messages)
    await broker.close()
    await broker.start()
    assert (await broker.queue_depths())[f"{harness.prefix}.jobs.{group}"] == 0
    fresh = broker.consume_jobs(group, 100)
    await cancel(await stays_pending(fresh))
    await stop(fresh)


async def test_queue_depths_name_every_queue(
    broker: Broker, harness: Harness, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    await broker.publish_jobs([job(group, kind), job(group, kind, Priority.HIGH)])
    await broker.publish_status([status()])
    await broker.publish_status([status(), status()])
    await broker.publish_logs([log("a")])
    depths = await broker.queue_depths()
    assert depths[f"{harness.prefix}.jobs.{group}"] == 2
    assert depths[f"{harness.prefix}.status"] == 2  # messages, not records
    assert depths[f"{harness.prefix}.logs"] == 1


# --- status and log batches -----------------------------------------------------------------


async def test_batch_is_yielded_at_max_items(broker: Broker) -> None:
    records = [status(n) for n in range(7)]
    await broker.publish_status(records)  # one message: the batches take parts of it
    batches = broker.consume_status(3, 30.0)
    first, second = await take(batches), await take(batches)
    assert first.items == records[:3]
    assert second.items == records[3:6]
    await first.ack()
    await second.ack()
    # One record left, far from max_wait, but waiting since before the ask: a backlog.
    third = await take(batches)
    assert third.items == records[6:]
    await third.ack()
    waiting = await stays_pending(batches)  # nothing waits: the next batch gathers again
    late = status(7)
    await broker.publish_status([late])
    await cancel(await stays_pending_after(waiting))  # came after the ask: max_wait holds
    await stop(batches)


async def test_a_backlog_is_not_held_for_max_wait(broker: Broker) -> None:
    """Records left waiting when a batch is handed out (the rest of a message it took part
    of) come in the next batch at once, not ``max_wait`` after they came."""
    records = [status(n) for n in range(3)]
    await broker.publish_status(records)
    batches = broker.consume_status(2, 600.0)
    first = await take(batches)
    assert first.items == records[:2]
    second = await take(batches)  # within WAIT, far below max_wait
    assert second.items == records[2:]
    await first.ack()
    await second.ack()
    await stop(batches)


async def test_batch_is_yielded_after_max_wait(broker: Broker) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    records = [status(0), status(1)]
    await broker.publish_status(records)
    batches = broker.consume_status(100, 0.3)
    batch = await take(batches)
    elapsed = loop.time() - started
    assert batch.items == records
    assert elapsed >= 0.3 - 0.02
    await batch.ack()
    await stop(batches)


async def test_records_keep_publication_order_across_messages(broker: Broker) -> None:
    records = [log(f"line {n}") for n in range(25)]
    for start in range(0, 25, 5):
        await broker.publish_logs(records[start : start + 5])
    batches = broker.consume_logs(10, 0.05)
    got: list[LogRecord] = []
    while len(got) < 25:
        batch = await take(batches)
        assert 1 <= len(batch.items) <= 10
        got.extend(batch.items)
        await batch.ack()
    assert got == records
    await stop(batches)


async def test_unacked_batch_is_delivered_again_after_consumer_stops(broker: Broker) -> None:
    records = [status(n) for n in range(6)]
    await broker.publish_status(records)
    first = broker.consume_status(2, 30.0)
    acked: Batch[StatusRecord] = await take(first)
    unacked: Batch[StatusRecord] = await take(first)
    await acked.ack()
    assert acked.items == records[:2]
    assert unacked.items == records[2:4]
    await stop(first)  # without acking the second batch

    second = broker.consume_status(2, 30.0)
    again = await take(second)
    assert again.items == records[2:4]
    rest = await take(second)
    assert rest.items == records[4:]
    await again.ack()
    await rest.ack()
    await cancel(await stays_pending(second))
    await stop(second)


async def test_log_batches_are_independent_of_status(broker: Broker) -> None:
    await broker.publish_logs([log("x")])
    await broker.publish_status([status()])
    logs = broker.consume_logs(1, 30.0)
    batch = await take(logs)
    assert [r.message for r in batch.items] == ["x"]
    await batch.ack()
    await cancel(await stays_pending(logs))
    await stop(logs)


async def test_queue_depths_of_named_groups(
    broker: Broker, harness: Harness, names: Callable[[str], str], adapter: str
) -> None:
    group, kind, never = names("grp"), names("kind"), names("never-declared")
    await broker.declare_worker_group(group, [kind])
    await broker.publish_jobs([job(group, kind)])
    depths = await broker.queue_depths([group, never])
    assert depths[f"{harness.prefix}.jobs.{group}"] == 1
    assert f"{harness.prefix}.jobs.{never}" not in depths
    if adapter == "rabbitmq":  # a server's broker that never declared the group sees it too
        assert isinstance(broker, RabbitMQBroker)
        url = broker._url
        other = RabbitMQBroker(url, prefix=harness.prefix, operation_timeout=WAIT)
        await other.start()
        try:
            assert f"{harness.prefix}.jobs.{group}" not in await other.queue_depths()
            assert (await other.queue_depths([group]))[f"{harness.prefix}.jobs.{group}"] == 1
        finally:
            await other.close()
