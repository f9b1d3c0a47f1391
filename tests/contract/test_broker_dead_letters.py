"""Contract of ``Broker.consume_dead_letters``, on the in-process broker and real RabbitMQ
(the harness and fixtures of ``test_broker``: a vhost per run, a name prefix per test)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from rota.brokers.inprocess import InProcessBroker
from rota.brokers.rabbitmq import RabbitMQBroker
from rota.brokers.rabbitmq.publish import record_item
from rota.core.ports import Broker
from rota.core.records import Batch, ReceivedDeadLetter
from rota.core.wire import DeadLetter
from tests.contract import test_broker
from tests.contract.rabbitmq_fixtures import rabbitmq_url as rabbitmq_url  # session fixture
from tests.contract.test_broker import (
    QUIET,
    WAIT,
    Harness,
    cancel,
    job,
    stays_pending,
    stop,
    take,
)
from tests.helpers import eventually

# The broker contract's fixtures, shared: every test runs on each adapter.
adapter = test_broker.adapter
harness = test_broker.harness
broker = test_broker.broker
names = test_broker.names

Batches = AsyncIterator[Batch[ReceivedDeadLetter]]


async def reject_all(broker: Broker, group: str, count: int) -> None:
    """Take ``count`` job messages of ``group`` and reject them without requeue."""
    consumer = broker.consume_jobs(group, count)
    for _ in range(count):
        delivery = await take(consumer)
        await delivery.reject(requeue=False)
    await stop(consumer)


async def poison(harness: Harness, group: str, kind: str, body: bytes) -> None:
    """Get an unreadable job message into the dead-letter queue the way each broker does."""
    target = harness.broker
    if isinstance(target, InProcessBroker):
        await target.dead_letter_body(body)
        return
    assert isinstance(target, RabbitMQBroker)
    # Published raw to the group's queue: its consumer cannot decode it and rejects it.
    amqp = target.names
    await target._publish([record_item("", amqp.job_queue(group), body, "job")])
    consumer = target.consume_jobs(group, 1)
    pending = await stays_pending(consumer)  # nothing readable comes out of it
    await cancel(pending)
    await stop(consumer)


async def test_rejected_job_messages_come_out_decoded_and_go_once_acked(
    broker: Broker,
    harness: Harness,
    names: Callable[[str], str],
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(3)]
    await broker.publish_jobs(messages)
    await reject_all(broker, group, 3)

    letters: Batches = broker.consume_dead_letters(2, QUIET)
    first = await take(letters)
    second = await take(letters)  # the rest, after max_wait
    items = first.items + second.items
    assert (len(first.items), len(second.items)) == (2, 1)
    assert [i.letter for i in items] == [DeadLetter(message=m) for m in messages]
    assert all(i.error is None and i.body for i in items)
    assert {(i.reason, i.queue) for i in items} == {("rejected", f"{harness.prefix}.jobs.{group}")}
    await first.ack()
    await second.ack()
    await second.ack()  # a second ack of a batch does nothing
    await cancel(await stays_pending(letters))
    await stop(letters)

    async def drained() -> bool:
        return (await broker.queue_depths()).get(f"{harness.prefix}.dlq") == 0

    await eventually(drained, WAIT, "the dead letters drained")
    again: Batches = broker.consume_dead_letters(10, QUIET)
    await cancel(await stays_pending(again))  # acknowledged letters are gone
    await stop(again)


async def test_unacknowledged_batch_comes_again_to_the_next_consumer(
    broker: Broker,
    names: Callable[[str], str],
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    message = job(group, kind)
    await broker.publish_jobs([message])
    await reject_all(broker, group, 1)
    letters: Batches = broker.consume_dead_letters(10, 0.05)
    batch = await take(letters)
    assert [i.letter.message for i in batch.items if i.letter] == [message]
    await stop(letters)  # not acknowledged
    again: Batches = broker.consume_dead_letters(10, 0.05)
    batch = await take(again)
    assert [i.letter.message for i in batch.items if i.letter] == [message]
    await batch.ack()
    await stop(again)


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"\x00\xff\xfe binary", b'{"occurrenceId": "nope", "jobType": "x"}', b"[]"],
)
async def test_undecodable_message_comes_out_with_its_raw_body(
    harness: Harness,
    names: Callable[[str], str],
    body: bytes,
) -> None:
    group, kind = names("grp"), names("kind")
    await harness.broker.declare_worker_group(group, [kind])
    await poison(harness, group, kind, body)
    letters: Batches = harness.broker.consume_dead_letters(10, 0.05)
    batch = await take(letters)
    [item] = batch.items
    assert item.letter is None
    assert item.body == body
    assert item.error
    assert item.reason == "rejected"
    await batch.ack()
    await stop(letters)


async def test_closing_the_broker_ends_dead_letter_consumers(
    broker: Broker,
    harness: Harness,
) -> None:
    letters: Batches = broker.consume_dead_letters(10, 0.05)
    waiting = await stays_pending(letters)
    await harness.broker.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, WAIT)
