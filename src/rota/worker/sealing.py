"""The worker's side of encryption at rest (``ROTA_ENCRYPTION__KEYS`` on the worker): the job
data of each delivery is opened before anything reads it (the limits' gate, the data's
parsing, the handler), and each result is sealed before it is reported, so neither crosses
the broker in plain text. A broker wrapped: the executor sees plain values only."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from rota.core.models import JobMessage, LogRecord, StatusRecord
from rota.core.ports import Broker
from rota.core.ports.broker import Delivery
from rota.core.records import Batch, ReceivedDeadLetter
from rota.core.sealing import DataSeal, SealError, opened_message, sealed_status

log = logging.getLogger(__name__)


class SealingBroker(Broker):
    """``broker`` as the worker uses it, with job data opened and results sealed by
    ``seal``. A job data that does not open is left sealed (logged): the attempt then fails
    for good, saying so (:data:`rota.worker.secrets.SEALED`), as on a worker without keys."""

    def __init__(self, broker: Broker, seal: DataSeal) -> None:
        self._broker = broker
        self._seal = seal

    def __getattr__(self, name: str) -> Any:  # what an adapter offers beyond the port
        return getattr(self._broker, name)

    async def consume_jobs(
        self, worker_id: str, prefetch: int, *, envelopes: Callable[[], bool] | None = None
    ) -> AsyncIterator[Delivery]:
        seal = self._seal
        async for delivery in self._broker.consume_jobs(worker_id, prefetch, envelopes=envelopes):
            try:
                delivery.message = opened_message(seal, delivery.message)
            except SealError as exc:
                log.error(
                    "the job data of occurrence %s cannot be opened: %s",
                    delivery.message.occurrence_id,
                    exc,
                )
            yield delivery

    async def publish_status(self, records: Sequence[StatusRecord]) -> None:
        await self._broker.publish_status([sealed_status(self._seal, r) for r in records])

    # --- the rest as it is ------------------------------------------------------------------

    async def start(self) -> None:
        await self._broker.start()

    async def close(self) -> None:
        await self._broker.close()

    async def declare_worker_group(self, worker_id: str, job_types: Sequence[str]) -> None:
        await self._broker.declare_worker_group(worker_id, job_types)

    async def publish_jobs(
        self, messages: Sequence[JobMessage], *, envelopes: Mapping[str, int] | None = None
    ) -> None:
        await self._broker.publish_jobs(messages, envelopes=envelopes)

    def envelope_size(self, prefetch: int) -> int:
        return self._broker.envelope_size(prefetch)

    def message_counts(self) -> Mapping[str, int]:
        return self._broker.message_counts()

    async def publish_logs(self, records: Sequence[LogRecord]) -> None:
        await self._broker.publish_logs(records)

    def consume_status(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[StatusRecord]]:
        return self._broker.consume_status(max_items, max_wait)

    def consume_logs(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[LogRecord]]:
        return self._broker.consume_logs(max_items, max_wait)

    def consume_dead_letters(
        self, max_items: int, max_wait: float
    ) -> AsyncIterator[Batch[ReceivedDeadLetter]]:
        return self._broker.consume_dead_letters(max_items, max_wait)

    async def queue_depths(self, groups: Sequence[str] = ()) -> dict[str, int]:
        return await self._broker.queue_depths(groups)
