"""A :class:`~rota.core.ports.Broker` wrapper for worker tests: it passes everything to a real
broker (in-process or RabbitMQ), and can make status/log publishes fail (the broker away) or
wait at a gate; it records how job deliveries were settled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TypeVar
from uuid import UUID

from rota.core.errors import BackendUnavailableError
from rota.core.models import JobMessage, LogRecord, StatusRecord
from rota.core.ports import Broker, Delivery
from rota.core.records import Batch, ReceivedDeadLetter

WAIT = 5.0
T = TypeVar("T")


class FlakyBroker(Broker):
    def __init__(self, inner: Broker) -> None:
        self.inner = inner
        self.away = False
        """While set, publishing status and log records raises ``BackendUnavailableError``."""
        self.gate: asyncio.Event | None = None
        """When set to an unset event, status and log publishes wait for it."""
        self.settles: list[tuple[str, UUID]] = []
        """``("ack" | "requeue" | "reject", occurrence id)`` in the order they happened."""
        self.lost = 0
        """This many status/log publishes raise ``CancelledError`` (not a cancellation of the
        caller: aiormq's word for a connection it found stuck), each taking one from it."""
        self.failed_publishes = 0
        self.status_published: list[list[StatusRecord]] = []
        self.dead: set[UUID] = set()
        """Occurrences whose deliveries report their channel lost (``is_live`` false)."""
        self.consumer_failures = 0
        """This many status/log consumers fail on their first read (the broker away when a
        consumer is declared), each taking one from the count."""

    def acked(self, occurrence_id: UUID) -> bool:
        return ("ack", occurrence_id) in self.settles

    async def _publishing(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.away:
            self.failed_publishes += 1
            raise BackendUnavailableError("the broker is away (test)")
        if self.lost:
            self.lost -= 1
            self.failed_publishes += 1
            raise asyncio.CancelledError("connection stuck (test)")

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def declare_worker_group(self, worker_id: str, job_types: Sequence[str]) -> None:
        await self.inner.declare_worker_group(worker_id, job_types)

    async def publish_jobs(
        self, messages: Sequence[JobMessage], *, envelopes: Mapping[str, int] | None = None
    ) -> None:
        await self.inner.publish_jobs(messages, envelopes=envelopes)

    def consume_jobs(
        self, worker_id: str, prefetch: int, *, envelopes: Callable[[], bool] | None = None
    ) -> AsyncIterator[Delivery]:
        return _Recording(self, self.inner.consume_jobs(worker_id, prefetch, envelopes=envelopes))

    async def publish_status(self, records: Sequence[StatusRecord]) -> None:
        await self._publishing()
        await self.inner.publish_status(records)
        self.status_published.append(list(records))

    async def publish_logs(self, records: Sequence[LogRecord]) -> None:
        await self._publishing()
        await self.inner.publish_logs(records)

    def consume_status(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[StatusRecord]]:
        return self._consuming(lambda: self.inner.consume_status(max_items, max_wait))

    def consume_logs(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[LogRecord]]:
        return self._consuming(lambda: self.inner.consume_logs(max_items, max_wait))

    async def _consuming(self, start: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
        if self.consumer_failures > 0:
            self.consumer_failures -= 1
            raise BackendUnavailableError("the broker is away (test): consumer not declared")
        async for item in start():
            yield item

    def consume_dead_letters(
        self, max_items: int, max_wait: float
    ) -> AsyncIterator[Batch[ReceivedDeadLetter]]:
        return self.inner.consume_dead_letters(max_items, max_wait)

    async def queue_depths(self) -> dict[str, int]:
        return await self.inner.queue_depths()


class _Recording:
    def __init__(self, broker: FlakyBroker, inner: AsyncIterator[Delivery]) -> None:
        self._broker = broker
        self._inner = inner

    def __aiter__(self) -> _Recording:
        return self

    async def __anext__(self) -> Delivery:
        return _RecordedDelivery(self._broker, await anext(self._inner))

    async def aclose(self) -> None:
        aclose = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()


class _RecordedDelivery(Delivery):
    def __init__(self, broker: FlakyBroker, inner: Delivery) -> None:
        self._broker = broker
        self._inner = inner
        self.message = inner.message
        self.redelivered = inner.redelivered

    @property
    def is_live(self) -> bool:
        return self.message.occurrence_id not in self._broker.dead and self._inner.is_live

    async def ack(self) -> None:
        await self._inner.ack()
        self._broker.settles.append(("ack", self.message.occurrence_id))

    async def reject(self, *, requeue: bool) -> None:
        await self._inner.reject(requeue=requeue)
        kind = "requeue" if requeue else "reject"
        self._broker.settles.append((kind, self.message.occurrence_id))
