# ruff: noqa: F811 - the broker suite's fixtures, imported, are the tests' parameters
"""Job envelopes (docs/protocol.md §5a): the jobs of a batch for one group and priority travel
as one message where the group reads envelopes, and each still lives alone — delivered,
settled, given back and dead-lettered by itself. The port's part runs on every adapter (the
in-process broker hands every job over alone); what only RabbitMQ shows (messages counted,
prefetch in envelopes, a poison job of an envelope, a change of mode) runs on it alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import orjson
import pytest

from rota.brokers.rabbitmq import RabbitMQBroker
from rota.brokers.rabbitmq.publish import Published, envelope_items
from rota.core.models import JobMessage, Priority
from rota.core.ports import Broker, Delivery
from rota.core.wire import ENVELOPE_CONTENT_TYPE, encode_job_message
from tests.contract.rabbitmq_fixtures import rabbitmq_url  # noqa: F401 (session fixture)
from tests.contract.test_broker import (  # noqa: F401 (fixtures)
    QUIET,
    WAIT,
    Harness,
    _rabbitmq,
    adapter,
    broker,
    cancel,
    harness,
    job,
    names,
    stays_pending,
    stop,
    take,
    take_n,
)

ALWAYS = lambda: True  # noqa: E731 - the group gets envelopes


async def test_jobs_sent_together_are_each_delivered_and_settled_alone(
    broker: Broker, harness: Harness, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await broker.declare_worker_group(group, [kind])
    plan = [Priority.MEDIUM] * 4 + [Priority.HIGH] * 2 + [Priority.MEDIUM] * 2
    messages = [job(group, kind, p) for p in plan]
    await broker.publish_jobs(messages, envelopes={group: 4})
    consumer = broker.consume_jobs(group, 8, envelopes=ALWAYS)
    first: list[JobMessage] = []
    again: list[Delivery] = []
    for _ in range(len(messages) + 1):  # settled as they come, each alone
        delivery = await take(consumer)
        if delivery.redelivered:
            again.append(delivery)
            await delivery.ack()
            continue
        first.append(delivery.message)
        if delivery.message == messages[1]:
            await delivery.reject(requeue=True)
        elif delivery.message == messages[2]:
            await delivery.reject(requeue=False)
        else:
            await delivery.ack()
    expected = sorted(range(len(plan)), key=lambda i: (-plan[i], i))
    assert first == [messages[i] for i in expected]  # order and bodies intact
    assert [d.message for d in again] == [messages[1]]  # given back: comes again, flagged
    await cancel(await stays_pending(consumer))  # nothing else comes back
    assert await harness.dead_letters() == [messages[2].occurrence_id]
    await stop(consumer)


def test_a_batch_is_packed_by_group_and_priority() -> None:
    names = RabbitMQBroker("amqp://localhost").names
    a = [job("a", "k") for _ in range(5)]
    b = [job("b", "k") for _ in range(3)]
    high = [job("a", "k", Priority.HIGH)]
    items = envelope_items(names, [*a[:2], *b, high[0], *a[2:]], {"a": 2})
    kinds = [(item.routing_key, item.kind, item.jobs) for item in items]
    assert kinds == [
        (names.job_queue("a"), "envelope", 2),
        (names.job_queue("a"), "envelope", 2),
        (names.job_queue("a"), "job", 1),  # the fifth alone
        (names.job_queue("a"), "job", 1),  # the lone high-priority job
        *[(names.job_queue("b"), "job", 1)] * 3,  # b reads no envelopes
    ]
    first = orjson.loads(items[0].body)
    assert [part["occurrenceId"] for part in first["jobs"]] == [str(m.occurrence_id) for m in a[:2]]
    assert items[0].properties.content_type == ENVELOPE_CONTENT_TYPE
    assert items[0].properties.priority == int(Priority.MEDIUM)


@pytest.fixture
async def rabbit(request: pytest.FixtureRequest) -> AsyncIterator[RabbitMQBroker]:
    """A RabbitMQ broker of its own (what only RabbitMQ shows: not run on the others)."""
    async with AsyncExitStack() as stack:
        broker = (await _rabbitmq(stack, request)).broker
        assert isinstance(broker, RabbitMQBroker)
        yield broker


async def test_a_batch_for_an_envelope_group_is_few_messages(
    rabbit: RabbitMQBroker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await rabbit.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(250)]
    before = dict(rabbit.counts)
    await rabbit.publish_jobs(messages, envelopes={group: 100})
    assert rabbit.counts["published_messages"] - before["published_messages"] == 3
    assert rabbit.counts["published_jobs"] - before["published_jobs"] == 250
    depths = await rabbit.queue_depths([group])
    assert depths[rabbit.names.job_queue(group)] == 3
    consumer = rabbit.consume_jobs(group, 200, envelopes=ALWAYS)
    got = await take_n(consumer, 200)  # two envelopes in hand: 200 jobs
    waiting = await stays_pending(consumer)  # the third envelope waits for an ack
    for delivery in got[:99]:
        await delivery.ack()
    done, _ = await asyncio.wait({waiting}, timeout=QUIET)
    assert not done  # one job of the first envelope is still open
    await got[99].ack()
    rest = [await asyncio.wait_for(waiting, WAIT), *await take_n(consumer, 49)]
    assert [d.message.occurrence_id for d in got + rest] == [m.occurrence_id for m in messages]
    for delivery in [*got[100:], *rest]:
        await delivery.ack()
    await cancel(await stays_pending(consumer))
    assert rabbit.counts["delivered_messages"] - before["delivered_messages"] == 3
    assert rabbit.counts["delivered_jobs"] - before["delivered_jobs"] == 250
    await stop(consumer)


async def test_a_poison_job_of_an_envelope_goes_to_the_dead_letters_alone(
    rabbit: RabbitMQBroker, names: Callable[[str], str]
) -> None:
    group, kind = names("grp"), names("kind")
    await rabbit.declare_worker_group(group, [kind])
    good = [job(group, kind) for _ in range(2)]
    bad = orjson.loads(encode_job_message(job(group, kind)))
    bad["retryCount"] = "twice"
    parts = [
        orjson.loads(encode_job_message(good[0])),
        bad,
        orjson.loads(encode_job_message(good[1])),
    ]
    item = envelope_items(rabbit.names, good, {group: 2})[0]
    poisoned = Published(
        item.exchange,
        item.routing_key,
        orjson.dumps({"jobs": parts}),
        item.properties,
        "envelope",
        3,
    )
    await rabbit._publish([poisoned])
    consumer = rabbit.consume_jobs(group, 10, envelopes=ALWAYS)
    got = await take_n(consumer, 2)
    assert [d.message for d in got] == good
    for delivery in got:
        await delivery.ack()
    await cancel(await stays_pending(consumer))  # the envelope was acknowledged, not redelivered
    letters = await rabbit.dead_letters()
    assert letters == []  # undecodable: not a readable dead letter …
    depths = await rabbit.queue_depths()
    assert depths[rabbit.names.dead_letter_queue] == 1  # … but there, alone
    await stop(consumer)


async def test_single_messages_in_envelope_mode_widen_the_prefetch(
    rabbit: RabbitMQBroker, names: Callable[[str], str]
) -> None:
    """Lone jobs come as single messages even to a group that reads envelopes: the consumer
    soon takes ``prefetch`` of them, as it does while its group gets single messages."""
    group, kind = names("grp"), names("kind")
    await rabbit.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(12)]
    await rabbit.publish_jobs(messages)  # single messages
    consumer = rabbit.consume_jobs(group, 12, envelopes=ALWAYS)
    got = await take_n(consumer, 12)  # none settled: all in hand
    assert [d.message.occurrence_id for d in got] == [m.occurrence_id for m in messages]
    for delivery in got:
        await delivery.ack()
    await cancel(await stays_pending(consumer))
    await stop(consumer)


async def test_small_envelopes_widen_the_prefetch_to_about_prefetch_jobs(
    rabbit: RabbitMQBroker, names: Callable[[str], str]
) -> None:
    """Fires sent ahead come as many small envelopes, held until their instant: the consumer
    takes more of them at once (``prefetch`` jobs' worth), not two messages only."""
    group, kind = names("grp"), names("kind")
    await rabbit.declare_worker_group(group, [kind])
    messages = [job(group, kind) for _ in range(40)]
    for start in range(0, 40, 2):  # twenty batches of two: twenty envelopes
        await rabbit.publish_jobs(messages[start : start + 2], envelopes={group: 2})
    consumer = rabbit.consume_jobs(group, 40, envelopes=ALWAYS)
    got = await take_n(consumer, 30)  # none settled yet: far more than two envelopes in hand
    for delivery in [*got, *await take_n(consumer, 10)]:
        await delivery.ack()
    await cancel(await stays_pending(consumer))
    await stop(consumer)
