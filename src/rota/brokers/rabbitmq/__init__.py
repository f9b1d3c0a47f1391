"""The RabbitMQ broker (distributed mode), on aio-pika: the topology of DESIGN.md §5.

* **Topology** (names and arguments in :mod:`.names`): one durable classic priority queue per
  worker group; a job message is published to the queue of the one group its ``worker_id``
  names (through the default exchange: no binding, no copy to another group; the queue is
  declared first if this broker has not declared it yet); job queues dead-letter to the DLX
  and its queue. Status and log records travel through fanout exchanges to durable
  queues of the same names. Everything is declared explicitly, for RabbitMQ 3.10 and 4.x alike.
* **Publishing**: persistent messages on one publisher-confirm channel; a batch is written out
  in windows of many messages whose confirms are gathered together, every window bounded by
  ``publish_timeout`` (:class:`~rota.core.errors.BackendUnavailableError` when it runs out, the
  connection is away, or the broker refuses a message). A list of status or log records is one
  message (a JSON array).
* **Jobs** are consumed on a channel of their own per consumer with ``basic_qos(prefetch)``.
  A message whose body cannot be decoded is rejected to the dead-letter queue and skipped.
  Stopping a consumer (``aclose()``) stops intake and hands back what it had not yielded; its
  unsettled deliveries stay its to settle. :meth:`RabbitMQBroker.close` hands back everything
  unsettled; a settle after that (or after the connection was lost) is a no-op: the message
  comes again (at least once).
* **Status and log batches** gather the records of many messages until ``max_items`` or
  ``max_wait``; a batch may take part of a message. ``Batch.ack`` acknowledges the messages it
  completes (one ``multiple`` ack when they are the oldest open ones). When a consumer stops, a
  message of which only some records were acknowledged is replaced by a message of the records
  left (published to the same queue, at its tail) before the rest is handed back.

The modules: :mod:`.names` (every name and argument of the topology), :mod:`.publish`
(confirmed publishing in windows, and the frames it writes), :mod:`.jobs` (job consumers and
deliveries), :mod:`.records` (status and log batches), :mod:`.dead_letters` (the dead-letter
queue's consumer), :mod:`.channels` (what they share); this module holds the broker.
"""

from __future__ import annotations

try:
    import aio_pika
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("The RabbitMQ broker needs aio-pika: pip install 'rota[rabbitmq]'") from exc

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection, AbstractRobustQueue
from aiormq.abc import AbstractChannel
from aiormq.exceptions import ChannelNotFoundEntity
from yarl import URL

from rota.brokers.rabbitmq.channels import _quietly, _table, _translated, log
from rota.brokers.rabbitmq.dead_letters import _DeadLetterConsumer, received_dead_letter
from rota.brokers.rabbitmq.jobs import _JobConsumer, envelope_size
from rota.brokers.rabbitmq.names import (
    DLX_EXCHANGE_TYPE,
    LOGS_EXCHANGE_TYPE,
    STATUS_EXCHANGE_TYPE,
    AmqpNames,
)
from rota.brokers.rabbitmq.publish import (
    Published,
    envelope_items,
    publish_confirmed,
    record_item,
)
from rota.brokers.rabbitmq.records import _QueueConsumer, _RecordConsumer
from rota.core.errors import BackendUnavailableError, ConfigurationError, ValidationError
from rota.core.models import JobMessage, LogRecord, StatusRecord
from rota.core.ports import Broker, Delivery
from rota.core.records import Batch, ReceivedDeadLetter
from rota.core.wire import (
    DeadLetter,
    decode_dead_letter,
    decode_log_records,
    decode_status_records,
    encode_log_records,
    encode_status_records,
)

__all__ = ["AmqpNames", "RabbitMQBroker", "received_dead_letter"]


class RabbitMQBroker(Broker):
    """:class:`~rota.core.ports.Broker` on RabbitMQ (3.10 or 4.x); see the module docstring.

    ``url`` is an ``amqp://user:pass@host:port/vhost`` URL; ``heartbeat`` (seconds) and
    ``reconnect_interval`` query parameters in it win over the arguments. The connection is
    robust: it reconnects by itself and restores channels, queues and consumers; a publish
    during an outage fails (the caller keeps and resends). All names start with ``prefix``.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "rota",
        connection_name: str = "rota",
        heartbeat: int = 10,
        reconnect_interval: float = 1.0,
        publish_timeout: float = 10.0,
        operation_timeout: float = 10.0,
        publish_window: int = 1000,
    ) -> None:
        if publish_window < 1:
            raise ValueError("publish_window must be at least 1")
        self.names = AmqpNames(prefix)
        self.publish_timeout = publish_timeout
        self.operation_timeout = operation_timeout
        self._url = url
        self._connection_name = connection_name
        self._heartbeat = heartbeat
        self._reconnect_interval = reconnect_interval
        self._window = publish_window
        self._connection: AbstractRobustConnection | None = None
        self._publisher: AbstractRobustChannel | None = None
        self._groups: set[str] = set()
        """The worker groups whose job queue this broker declared (again after a reconnect)."""
        self.counts: dict[str, int] = dict.fromkeys(
            ("published_messages", "published_jobs", "delivered_messages", "delivered_jobs"), 0
        )
        """AMQP messages of jobs (single or envelope) published and delivered here, and the
        jobs they carried (the ``rota_broker_*`` metrics)."""
        self._job_consumers: set[_JobConsumer] = set()
        self._batch_consumers: set[_QueueConsumer[Any]] = set()
        """The status and log consumers (closed first when the broker closes: they publish)."""
        self._dead_letter_consumers: set[_QueueConsumer[Any]] = set()
        self._redeclaring: asyncio.Task[None] | None = None
        self._background: set[asyncio.Future[bool]] = set()
        self._start_lock = asyncio.Lock()

    # --- life cycle -------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._connection is not None:
                return
            connection = await self._connect()
            try:
                await self._declare(connection, "declare the topology", self._declare_topology)
                with _translated("open the publisher channel"):
                    async with asyncio.timeout(self.operation_timeout):
                        self._publisher = await connection.channel(publisher_confirms=True)
            except BaseException:
                await _quietly(connection.close(), "close connection")
                raise
            connection.reconnect_callbacks.add(self._on_reconnect)
            self._connection = connection

    async def _connect(self) -> AbstractRobustConnection:
        url = URL(self._url)
        defaults = {"heartbeat": self._heartbeat, "reconnect_interval": self._reconnect_interval}
        missing = {key: value for key, value in defaults.items() if key not in url.query}
        url = url.update_query(missing)
        with _translated("connect"):
            return await aio_pika.connect_robust(
                url,
                timeout=self.operation_timeout,
                client_properties={"connection_name": self._connection_name},
            )

    def _on_reconnect(self, connection: object) -> None:
        """Declare everything again once reconnected (the broker may have lost its data)."""
        if self._redeclaring is None or self._redeclaring.done():
            self._redeclaring = asyncio.ensure_future(self._redeclare())

    async def _redeclare(self) -> None:
        connection = self._connection
        if connection is None:
            return
        try:
            await self._declare(connection, "declare the topology", self._declare_all)
        except (BackendUnavailableError, ConfigurationError) as exc:
            log.warning("RabbitMQ: re-declaring after a reconnect failed: %s", exc)

    async def close(self) -> None:
        async with self._start_lock:
            connection = self._connection
            if connection is None:
                return
            batch_consumers, self._batch_consumers = self._batch_consumers, set()
            for batch_consumer in batch_consumers:  # replaces partly acked messages: publishes
                await batch_consumer.aclose()
            self._connection = None
            consumers, self._job_consumers = self._job_consumers, set()
            for consumer in consumers:
                consumer.stop()
            self._stop_dead_letter_consumers()
            self._publisher = None
            connection.reconnect_callbacks.discard(self._on_reconnect)
            if self._redeclaring is not None:
                self._redeclaring.cancel()
            await _quietly(connection.close(), "close connection")

    # --- declarations -----------------------------------------------------------------------

    async def _new_channel(
        self, connection: AbstractRobustConnection | None = None
    ) -> AbstractRobustChannel:
        connection = connection or self._open_connection()
        with _translated("open a channel"):
            async with asyncio.timeout(self.operation_timeout):
                await connection.ready()  # reconnecting: wait for it, within the timeout
                return await connection.channel(publisher_confirms=False)

    async def _declare(
        self,
        connection: AbstractRobustConnection,
        what: str,
        declare: Callable[[AbstractChannel], Awaitable[None]],
    ) -> None:
        """Declare on a channel of its own: a refusal (``PRECONDITION_FAILED``) closes it,
        and nothing else is lost with it."""
        channel = await self._new_channel(connection)
        try:
            with _translated(what):
                async with asyncio.timeout(self.operation_timeout):
                    await declare(await channel.get_underlay_channel())
        finally:
            await _quietly(channel.close(), "close channel")

    async def _declare_topology(self, channel: AbstractChannel) -> None:
        names = self.names
        record_arguments = _table(names.record_queue_arguments())
        for exchange, kind, queue in (
            (names.dead_letter_exchange, DLX_EXCHANGE_TYPE, names.dead_letter_queue),
            (names.status_exchange, STATUS_EXCHANGE_TYPE, names.status_queue),
            (names.logs_exchange, LOGS_EXCHANGE_TYPE, names.logs_queue),
        ):
            await channel.exchange_declare(exchange, exchange_type=kind, durable=True)
            await channel.queue_declare(queue, durable=True, arguments=record_arguments)
            await channel.queue_bind(queue, exchange, routing_key="")

    async def _declare_all(self, channel: AbstractChannel) -> None:
        await self._declare_topology(channel)
        await self._declare_groups(channel, sorted(self._groups))

    async def _declare_groups(self, channel: AbstractChannel, worker_ids: Iterable[str]) -> None:
        arguments = _table(self.names.job_queue_arguments())
        for worker_id in worker_ids:
            queue = self.names.job_queue(worker_id)
            await channel.queue_declare(queue, durable=True, arguments=arguments)

    async def _declare_job_queue(
        self, channel: AbstractRobustChannel, worker_id: str
    ) -> AbstractRobustQueue:
        """The group's queue on a consumer's channel (restored with it after a reconnect)."""
        queue = await channel.declare_queue(
            self.names.job_queue(worker_id),
            durable=True,
            arguments=self.names.job_queue_arguments(),
        )
        self._groups.add(worker_id)
        return queue

    async def _declare_record_queue(
        self, channel: AbstractRobustChannel, name: str
    ) -> AbstractRobustQueue:
        return await channel.declare_queue(
            name, durable=True, arguments=self.names.record_queue_arguments()
        )

    async def declare_worker_group(self, worker_id: str, job_types: Sequence[str]) -> None:
        # The job types route nothing here: the dispatcher addresses the group's queue.
        await self._ensure_groups([worker_id])

    async def _ensure_groups(self, worker_ids: Iterable[str]) -> None:
        """Declare the job queues of these groups that this broker has not declared yet."""
        missing = sorted(set(worker_ids) - self._groups)
        if not missing:
            return
        await self._declare(
            self._open_connection(),
            f"declare the job queue of {', '.join(map(repr, missing))}",
            partial(self._declare_groups, worker_ids=missing),
        )
        self._groups.update(missing)

    # --- publishing -------------------------------------------------------------------------

    async def _publish(self, items: Sequence[Published]) -> None:
        """Publish in windows; each window's confirms are gathered within the timeout."""
        channel = self._publisher
        if channel is None or self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        await publish_confirmed(channel, items, self._window, self.publish_timeout)
        jobs = sum(item.jobs for item in items if item.kind in ("job", "envelope"))
        if jobs:
            self.counts["published_messages"] += sum(
                1 for item in items if item.kind in ("job", "envelope")
            )
            self.counts["published_jobs"] += jobs

    async def publish_jobs(
        self, messages: Sequence[JobMessage], *, envelopes: Mapping[str, int] | None = None
    ) -> None:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        if messages:
            items = envelope_items(self.names, messages, envelopes or {})
            await self._ensure_groups({message.worker_id or "" for message in messages})
            await self._publish(items)

    def envelope_size(self, prefetch: int) -> int:
        return envelope_size(prefetch)

    def message_counts(self) -> Mapping[str, int]:
        return dict(self.counts)

    async def publish_status(self, records: Sequence[StatusRecord]) -> None:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        if records:
            body = encode_status_records(records)
            await self._publish([record_item(self.names.status_exchange, "", body, "status")])

    async def publish_logs(self, records: Sequence[LogRecord]) -> None:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        if records:
            body = encode_log_records(records)
            await self._publish([record_item(self.names.logs_exchange, "", body, "logs")])

    # --- consuming --------------------------------------------------------------------------

    def _open_connection(self) -> AbstractRobustConnection:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        return self._connection

    def consume_jobs(
        self, worker_id: str, prefetch: int, *, envelopes: Callable[[], bool] | None = None
    ) -> AsyncIterator[Delivery]:
        self._open_connection()
        consumer = _JobConsumer(self, worker_id, prefetch, envelopes)
        self._job_consumers.add(consumer)
        return consumer

    def consume_status(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[StatusRecord]]:
        codec = (decode_status_records, encode_status_records)
        return self._batches(self.names.status_queue, codec, max_items, max_wait)

    def consume_logs(self, max_items: int, max_wait: float) -> AsyncIterator[Batch[LogRecord]]:
        codec = (decode_log_records, encode_log_records)
        return self._batches(self.names.logs_queue, codec, max_items, max_wait)

    def _batches(
        self, queue: str, codec: Any, max_items: int, max_wait: float
    ) -> AsyncIterator[Batch[Any]]:
        self._open_connection()
        consumer: _RecordConsumer[Any] = _RecordConsumer(self, queue, codec, max_items, max_wait)
        self._batch_consumers.add(consumer)
        return consumer

    # (dead letters: consumed by the DLQ handler; the consumer is in .dead_letters)

    def consume_dead_letters(
        self, max_items: int, max_wait: float
    ) -> AsyncIterator[Batch[ReceivedDeadLetter]]:
        self._open_connection()
        queue = self.names.dead_letter_queue
        consumer = _DeadLetterConsumer(self, queue, max_items, max_wait)
        self._dead_letter_consumers.add(consumer)
        return consumer

    def _forget(self, consumer: _QueueConsumer[Any]) -> None:
        """A status, log or dead-letter consumer has closed."""
        self._batch_consumers.discard(consumer)
        self._dead_letter_consumers.discard(consumer)

    def _stop_dead_letter_consumers(self) -> None:
        consumers, self._dead_letter_consumers = self._dead_letter_consumers, set()
        for consumer in consumers:
            consumer.stop()

    # --- inspection -------------------------------------------------------------------------

    async def queue_depths(self, groups: Sequence[str] = ()) -> dict[str, int]:
        """Messages ready in the job queues of the groups this broker declared or consumed
        and of ``groups``, and in the status, log and dead-letter queues (passive declares:
        a queue that does not exist is left out)."""
        names = self.names
        known = sorted(self._groups | set(groups))
        queues = [names.job_queue(group) for group in known]
        queues += [names.status_queue, names.logs_queue, names.dead_letter_queue]
        channel = await self._new_channel()
        depths: dict[str, int] = {}
        try:
            with _translated("read queue depths"):
                async with asyncio.timeout(self.operation_timeout):
                    for name in queues:
                        underlay = await channel.get_underlay_channel()
                        try:
                            declared = await underlay.queue_declare(name, passive=True)
                        except ChannelNotFoundEntity:
                            # a missing queue closes the channel: go on on a new one
                            await _quietly(channel.close(), "close channel")
                            channel = await self._new_channel()
                            continue
                        depths[name] = int(declared.message_count or 0)
        finally:
            await _quietly(channel.close(), "close channel")
        return depths

    async def dead_letters(self, limit: int = 1000) -> list[DeadLetter]:
        """The dead letters waiting (at most ``limit``), oldest first, left in their queue.
        Messages that cannot be decoded are logged and left out."""
        channel = await self._new_channel()
        letters: list[DeadLetter] = []
        try:
            with _translated("read dead letters"):
                async with asyncio.timeout(self.operation_timeout):
                    underlay = await channel.get_underlay_channel()
                    letters = await self._peek(underlay, limit)
        finally:
            await _quietly(channel.close(), "close channel")  # hands every message back
        return letters

    async def _peek(self, channel: AbstractChannel, limit: int) -> list[DeadLetter]:
        letters: list[DeadLetter] = []
        last_tag: int | None = None
        for _ in range(limit):
            got = await channel.basic_get(self.names.dead_letter_queue, no_ack=False)
            tag = getattr(got.delivery, "delivery_tag", None)
            if tag is None:
                break
            last_tag = tag
            headers: dict[str, Any] = dict(got.header.properties.headers or {})
            try:
                letters.append(decode_dead_letter(got.body, headers))
            except ValidationError as exc:
                log.warning("RabbitMQ: undecodable dead letter left out: %s", exc)
        if last_tag is not None:
            await channel.basic_nack(last_tag, multiple=True, requeue=True)
        return letters
