"""A RabbitMQ connection that goes silent (bytes swallowed, nothing closed) on the real broker
of this machine, through the e2e fault proxy: aiormq finds it stuck after its heartbeat grace
and closes it with ``CancelledError``, which it also sets on the publish confirmations waiting
on it. A publish cut short so must fail as a broker error (``BackendUnavailableError``), not
as a cancellation of the caller: a loop that publishes (the worker's reporter) would end."""

from __future__ import annotations

import asyncio
import time
import uuid
from urllib.parse import urlsplit

import pytest

from rota.brokers.rabbitmq import RabbitMQBroker
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.models import OccurrenceStatus, StatusRecord, utcnow
from tests.contract.rabbitmq_fixtures import rabbitmq_url  # noqa: F401 (session fixture)
from tests.e2e.faultproxy import FaultProxy


def _record() -> StatusRecord:
    return StatusRecord(
        occurrence_id=new_id(),
        status=OccurrenceStatus.RUNNING,
        timestamp=utcnow(),
        attempt=1,
        instance_id="stuck-test",
    )


async def test_a_publish_cut_short_by_a_stuck_connection_is_a_broker_error(
    rabbitmq_url: str,  # noqa: F811
) -> None:
    parts = urlsplit(rabbitmq_url)
    with FaultProxy(parts.port or 5672) as proxy:
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}{parts.path}?heartbeat=1"
        prefix = f"rota-s{uuid.uuid4().hex[:8]}"
        broker = RabbitMQBroker(url, prefix=prefix, publish_timeout=60, operation_timeout=5)
        await broker.start()
        try:
            await broker.publish_status([_record()])
            proxy.blackhole()
            started = time.monotonic()
            # The confirm never comes; the stuck connection is closed well within the
            # publish timeout (60 s), so what ends this publish is the close.
            with pytest.raises(BackendUnavailableError):
                await broker.publish_status([_record()])
            assert time.monotonic() - started < 30
            assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
            proxy.heal()
            deadline = time.monotonic() + 30
            while True:  # the robust connection comes back through the healed proxy
                try:
                    await broker.publish_status([_record()])
                    break
                except BackendUnavailableError:
                    assert time.monotonic() < deadline, "the connection did not come back"
                    await asyncio.sleep(0.2)
        finally:
            proxy.heal()
            await broker.close()
