"""On RabbitMQ, every job message (a first attempt and a retry alike) carries the retry headers
``x-retry-count``, ``x-max-retries`` and ``x-original-correlation-id`` (DESIGN.md §5), read here
as raw AMQP properties, the way a worker in another language sees them."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import aiormq
import orjson

from rota.brokers.rabbitmq import RabbitMQBroker
from rota.core.models import JobMessage
from rota.core.wire import (
    HEADER_MAX_RETRIES,
    HEADER_ORIGINAL_CORRELATION_ID,
    HEADER_RETRY_COUNT,
)
from tests.contract.rabbitmq_fixtures import rabbitmq_url  # noqa: F401 (session fixture)

WAIT = 5.0
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def _message(retry_count: int) -> JobMessage:
    occurrence_id = uuid.uuid4()
    return JobMessage(
        occurrence_id=occurrence_id,
        job_id=uuid.uuid4(),
        job_type="Headers.Job",
        job_data={"n": retry_count},
        scheduled_for=NOW,
        timestamp=NOW,
        retry_count=retry_count,
        max_retries=3,
        retry_delay_seconds=0.25 if retry_count else None,
        original_correlation_id=occurrence_id,
        worker_id="headers",
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def test_first_attempts_and_retries_carry_the_retry_headers(rabbitmq_url: str) -> None:  # noqa: F811
    prefix = f"rota-{uuid.uuid4().hex[:8]}"
    broker = RabbitMQBroker(rabbitmq_url, prefix=prefix, publish_timeout=WAIT)
    await broker.start()
    try:
        await broker.declare_worker_group("headers", ["Headers.Job"])
        sent = [_message(0), _message(2)]
        await broker.publish_jobs(sent)
        queue = broker.names.job_queue("headers")
        connection = await aiormq.connect(rabbitmq_url)
        try:
            channel = await connection.channel()
            got: dict[uuid.UUID, tuple[dict[str, object], dict[str, object]]] = {}
            async with asyncio.timeout(WAIT):
                while len(got) < len(sent):
                    delivered = await channel.basic_get(queue, no_ack=True)
                    if delivered.body:
                        body = orjson.loads(delivered.body)
                        headers = dict(delivered.header.properties.headers or {})
                        got[uuid.UUID(body["occurrenceId"])] = (headers, body)
                    else:
                        await asyncio.sleep(0.02)
        finally:
            await connection.close()
    finally:
        await broker.close()
    for message in sent:
        headers, body = got[message.occurrence_id]
        assert headers[HEADER_RETRY_COUNT] == message.retry_count
        assert headers[HEADER_MAX_RETRIES] == 3
        assert _text(headers[HEADER_ORIGINAL_CORRELATION_ID]) == str(message.occurrence_id)
        assert body["retryCount"] == message.retry_count
        assert body["retryDelaySeconds"] == message.retry_delay_seconds
