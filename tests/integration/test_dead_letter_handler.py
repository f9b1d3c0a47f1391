"""The DLQ handler on a real store: a store outage holds the batch without losing it, and on
RabbitMQ an unreadable job message goes from a worker group's queue to a poison record."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from rota.brokers.inprocess import InProcessBroker
from rota.brokers.rabbitmq import RabbitMQBroker
from rota.brokers.rabbitmq.publish import record_item
from rota.core.models import FailureType, JobMessage
from rota.core.records import FailedQuery
from rota.core.wire import encode_job_message
from rota.services.deadletters import DeadLetterHandler
from rota.stores.sql import SqlStore
from tests.contract.rabbitmq_fixtures import rabbitmq_url as rabbitmq_url  # session fixture
from tests.helpers import eventually

WITHIN = 10.0


async def records(store: SqlStore) -> int:
    return len((await store.list_failed(FailedQuery(limit=100))).items)


async def test_store_outage_holds_the_batch_and_loses_nothing(store: SqlStore) -> None:
    broker = InProcessBroker()
    await broker.start()
    handler = DeadLetterHandler(store, broker, batch_size=10, max_wait=0.01, max_backoff=0.1)
    await store.close()  # the store is away
    task = asyncio.create_task(handler.run())
    try:
        await broker.dead_letter_body(b"{broken")

        async def failing() -> bool:
            return handler.stats.errors >= 2 and handler.stats.holding

        await eventually(failing, WITHIN, "the handler to retry against the missing store")
        assert (await broker.queue_depths())["rota.dlq"] == 0  # taken, not acknowledged
        await store.open()

        async def stored() -> bool:
            return await records(store) == 1

        await eventually(stored, WITHIN, "the record once the store is back")
        assert handler.stats.poison == 1
        assert not handler.stats.holding
        # The loop is alive: the next letter is stored too.
        await broker.dead_letter_body(b"\xff")

        async def two() -> bool:
            return await records(store) == 2

        await eventually(two, WITHIN, "the second record")
    finally:
        handler.stop()
        await broker.close()
        await asyncio.wait_for(task, WITHIN)


async def test_a_dead_letter_nested_too_deeply_becomes_a_poison_record(store: SqlStore) -> None:
    """A job message whose jobData nests deeper than anything can store (300 levels: read by
    the JSON reader, not writable by the encoder) was decoded, and every store write of its
    record failed: the handler retried it for ever and stored no other letter. Now it is
    refused when read, and becomes a poison record saying why."""
    broker = InProcessBroker()
    await broker.start()
    handler = DeadLetterHandler(store, broker, batch_size=10, max_wait=0.01, max_backoff=0.1)
    task = asyncio.create_task(handler.run())
    try:
        readable = encode_job_message(
            JobMessage(
                occurrence_id=uuid.uuid4(),
                job_id=uuid.uuid4(),
                job_type="Deep",
                job_data="__nested__",
                timestamp=datetime.now(UTC),
                scheduled_for=datetime.now(UTC),
            )
        )
        deep = readable.replace(b'"__nested__"', b"[" * 300 + b"]" * 300)
        await broker.dead_letter_body(deep)
        await broker.dead_letter_body(b"{broken")  # the next letter is stored too

        async def stored() -> bool:
            return await records(store) == 2

        await eventually(stored, WITHIN, "both poison records")
        failed = (await store.list_failed(FailedQuery(limit=10))).items
        [record] = [r for r in failed if r.job_type == "Deep"]
        assert record.failure_type is FailureType.POISON
        assert record.exception is not None
        assert "jobData: nested more than 128 levels deep" in record.exception
        assert handler.stats.errors == 0
    finally:
        handler.stop()
        await broker.close()
        await asyncio.wait_for(task, WITHIN)


async def test_unreadable_job_message_on_rabbitmq_becomes_a_poison_record(
    store: SqlStore, rabbitmq_url: str
) -> None:
    prefix = f"rota-{uuid.uuid4().hex[:8]}"
    broker = RabbitMQBroker(rabbitmq_url, prefix=prefix, operation_timeout=5, publish_timeout=5)
    await broker.start()
    handler = DeadLetterHandler(store, broker, batch_size=10, max_wait=0.05)
    task = asyncio.create_task(handler.run())
    consumer = None
    try:
        await broker.declare_worker_group("grp", ["Send"])
        body = b'{"occurrenceId": "01", "jobType": "Send"}'
        key = broker.names.job_queue("grp")  # the group's queue, on the default exchange
        await broker._publish([record_item("", key, body, "job")])
        consumer = broker.consume_jobs("grp", 1)
        taking = asyncio.ensure_future(anext(consumer))  # the consumer rejects it, yields none

        async def stored() -> bool:
            return await records(store) == 1

        took = await eventually(stored, WITHIN, "the poison record")
        [record] = (await store.list_failed(FailedQuery())).items
        assert (record.failure_type, record.occurrence_id) == (FailureType.POISON, None)
        assert record.raw_message == body.decode()
        assert record.job_type == "Send"
        assert record.exception is not None
        assert f"from {prefix}.jobs.grp" in record.exception
        assert not taking.done()
        taking.cancel()
        print(f"poison message to record: {took * 1000:.0f} ms")

        async def drained() -> bool:
            return (await broker.queue_depths()).get(f"{prefix}.dlq") == 0

        await eventually(drained, WITHIN, "the dead-letter queue to be acknowledged")
    finally:
        handler.stop()
        if consumer is not None:
            await consumer.aclose()  # type: ignore[attr-defined]
        await broker.close()
        await asyncio.wait_for(task, WITHIN)
