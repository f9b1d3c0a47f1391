"""The RabbitMQ broker (distributed mode), on aio-pika: the topology of DESIGN.md §5.

* **Topology** (names and arguments in :mod:`rota.brokers.amqp_names`): a topic exchange routes
  job messages by ``{jobtype}.{occurrenceId}`` to one durable classic priority queue per worker
  group, bound with ``{jobtype}.*`` for each job type the group declared; job queues dead-letter
  to the DLX and its queue. Status and log records travel through fanout exchanges to durable
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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import secrets
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from typing import Any, Generic, TypeVar

from rota.brokers.amqp_frames import encode_properties, encode_publish
from rota.brokers.amqp_names import (
    CONTENT_TYPE,
    DLX_EXCHANGE_TYPE,
    JOBS_EXCHANGE_TYPE,
    LOGS_EXCHANGE_TYPE,
    MAX_PRIORITY,
    PERSISTENT,
    STATUS_EXCHANGE_TYPE,
    AmqpNames,
)
from rota.core.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ConflictError,
    ValidationError,
)
from rota.core.models import JobMessage, LogRecord, StatusRecord
from rota.core.ports import Broker, Delivery
from rota.core.records import Batch, ReceivedDeadLetter
from rota.core.wire import (
    DeadLetter,
    decode_dead_letter,
    decode_job_message,
    decode_log_records,
    decode_status_records,
    encode_job_message,
    encode_log_records,
    encode_status_records,
    job_message_headers,
)

try:
    import aio_pika
    import aiormq
    from aio_pika.abc import (
        AbstractIncomingMessage,
        AbstractRobustChannel,
        AbstractRobustConnection,
        AbstractRobustQueue,
    )
    from aiormq.abc import AbstractChannel, ChannelFrame, DeliveredMessage
    from aiormq.exceptions import (
        AMQPError,
        ChannelInvalidStateError,
        ChannelNotFoundEntity,
        ChannelPreconditionFailed,
    )
    from pamqp.common import FieldTable
    from yarl import URL
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("The RabbitMQ broker needs aio-pika: pip install 'rota[rabbitmq]'") from exc

T = TypeVar("T")

log = logging.getLogger(__name__)

_MAX_PREFETCH = 65535
"""``prefetch_count`` is a 16-bit field."""
_BROKER_ERRORS = (AMQPError, ConnectionError, OSError, TimeoutError, RuntimeError)
"""What the client raises when the broker or the connection fails (aiormq raises a plain
``RuntimeError`` for a closed connection, and ``ChannelInvalidStateError``, a subclass of it,
for a closed channel)."""

_Published = tuple[str, str, bytes, bytes]
"""``(exchange, routing key, body, encoded basic properties)``."""

_RECORD_PROPERTIES = encode_properties(content_type=CONTENT_TYPE, delivery_mode=PERSISTENT)


def _table(values: Mapping[str, str | int]) -> FieldTable:
    return dict(values)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Raise broker and network errors as Rota's own."""
    try:
        yield
    except ChannelPreconditionFailed as exc:
        raise ConfigurationError(
            f"RabbitMQ refused to {what}: an exchange or queue exists with other arguments "
            f"({exc}); delete it or use another prefix"
        ) from exc
    except _BROKER_ERRORS as exc:
        raise BackendUnavailableError(
            f"RabbitMQ: cannot {what}: {type(exc).__name__}: {exc}"
        ) from exc


async def _quietly(operation: Awaitable[object], what: str) -> bool:
    """Run an operation whose failure only means the broker will redeliver (the channel or
    connection is gone); ``False`` if it failed."""
    try:
        await operation
    except _BROKER_ERRORS as exc:
        log.debug("RabbitMQ: %s failed: %r", what, exc, extra={"action": what})
        return False
    return True


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _underlay(incoming: AbstractIncomingMessage | _Incoming) -> AbstractChannel | None:
    """The channel a message was delivered on, ``None`` if it is closed."""
    try:
        channel = incoming.channel
    except ChannelInvalidStateError:
        return None
    return None if channel.is_closed else channel


class _Incoming:
    """A job message as aiormq delivered it (the consumer takes deliveries from aiormq
    directly: aio-pika's message object and second task per delivery cost more than all the
    rest of the intake)."""

    __slots__ = ("body", "channel", "delivery_tag", "headers", "redelivered")

    def __init__(self, delivered: DeliveredMessage) -> None:
        delivery = delivered.delivery
        self.body = delivered.body
        self.channel: AbstractChannel = delivered.channel
        self.delivery_tag: int | None = getattr(delivery, "delivery_tag", None)
        self.redelivered = bool(getattr(delivery, "redelivered", False))
        self.headers: dict[str, Any] = delivered.header.properties.headers or {}


class _Waiting:
    """One consumer's wait for something to happen (a message, a settle, a close)."""

    __slots__ = ("waiter",)

    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None

    async def wait(self, deadline: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = None if deadline is None else loop.call_at(deadline, _wake, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    def wake(self) -> None:
        _wake(self.waiter)


# --- job consumers --------------------------------------------------------------------------


def _send_settle(
    incoming: AbstractIncomingMessage | _Incoming, *, ack: bool, requeue: bool = False
) -> Awaitable[None]:
    """Ack, or reject, a delivery without waiting for the frame to be written (frames keep
    their order; a settle lost with the connection means a redelivery, as any other)."""
    channel = _underlay(incoming)
    tag = incoming.delivery_tag
    if channel is None or tag is None:
        return _done()
    if ack:
        return channel.basic_ack(tag, wait=False)
    return channel.basic_reject(tag, requeue=requeue, wait=False)


async def _done() -> None:
    return None


class _RabbitDelivery(Delivery):
    __slots__ = ("_consumer", "_incoming", "_settled", "message", "redelivered")

    def __init__(self, consumer: _JobConsumer, incoming: _Incoming, message: JobMessage) -> None:
        self.message = message
        self.redelivered = bool(incoming.redelivered)
        self._consumer = consumer
        self._incoming = incoming
        self._settled = False

    @property
    def is_live(self) -> bool:
        return not self._incoming.channel.is_closed

    async def ack(self) -> None:
        self._settle()
        self._consumer.ack_soon(self._incoming)
        await self._consumer.settled(self)

    async def reject(self, *, requeue: bool) -> None:
        self._settle()
        await _quietly(_send_settle(self._incoming, ack=False, requeue=requeue), "reject")
        await self._consumer.settled(self)

    def _settle(self) -> None:
        if self._settled:
            raise ConflictError("delivery already settled")
        self._settled = True


class _JobConsumer:
    """One consumer of a group's queue, on a channel of its own; an async iterator."""

    def __init__(self, broker: RabbitMQBroker, worker_id: str, prefetch: int) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self._broker = broker
        self._worker_id = worker_id
        self._prefetch = min(prefetch, _MAX_PREFETCH)
        self._channel: AbstractRobustChannel | None = None
        self._queue: AbstractRobustQueue | None = None
        self._tag: str | None = None
        self._ready: deque[_Incoming] = deque()
        self._unsettled: set[_RabbitDelivery] = set()
        self._acks: dict[AbstractChannel, list[int]] = {}
        """Delivery tags to acknowledge, by channel, written together soon (one payload)."""
        self._waiting = _Waiting()
        self.closed = False

    def __aiter__(self) -> _JobConsumer:
        return self

    async def __anext__(self) -> Delivery:
        if self._channel is None and not self.closed:
            await self._open()
        while not self.closed:
            while self._ready:
                delivery = await self._deliver(self._ready.popleft())
                if delivery is not None:
                    return delivery
            await self._waiting.wait()
        raise StopAsyncIteration

    async def _open(self) -> None:
        broker = self._broker
        channel = await broker._new_channel()
        try:
            with _translated("consume jobs"):
                async with asyncio.timeout(broker.operation_timeout):
                    await channel.set_qos(prefetch_count=self._prefetch)
                    self._queue = await broker._declare_job_queue(channel, self._worker_id)
                    self._tag = f"rota-{secrets.token_hex(8)}"
                    await self._consume(channel)
        except BaseException:
            await _quietly(channel.close(), "close channel")
            raise
        # The robust channel restores its QoS and queue after a reconnect; the consumer,
        # registered with aiormq directly, is registered again here.
        channel.reopen_callbacks.add(self._on_reopen)
        self._channel = channel

    async def _consume(self, channel: AbstractRobustChannel) -> None:
        underlay = await channel.get_underlay_channel()
        queue = self._broker.names.job_queue(self._worker_id)
        await underlay.basic_consume(queue, self._on_message, consumer_tag=self._tag)

    async def _on_reopen(self, channel: AbstractRobustChannel | None) -> None:
        if self.closed or channel is None:
            return
        try:
            with _translated("consume jobs again"):
                async with asyncio.timeout(self._broker.operation_timeout):
                    await self._consume(channel)
        except BackendUnavailableError as exc:  # the channel closes again, and reopens
            log.warning("RabbitMQ: job consumer not restored: %s", exc)

    async def _on_message(self, delivered: DeliveredMessage) -> None:
        incoming = _Incoming(delivered)
        if self.closed:  # arrived while stopping: give it back at once
            await _quietly(_send_settle(incoming, ack=False, requeue=True), "requeue")
            return
        self._ready.append(incoming)
        self._waiting.wake()

    async def _deliver(self, incoming: _Incoming) -> _RabbitDelivery | None:
        if _underlay(incoming) is None:
            return None  # its channel is gone: the broker delivers it again
        try:
            message = decode_job_message(incoming.body, incoming.headers)
        except ValidationError as exc:
            log.warning(
                "RabbitMQ: undecodable job message dead-lettered: %s",
                exc,
                extra={"action": "poison", "field": exc.field},
            )
            await _quietly(_send_settle(incoming, ack=False), "reject")
            return None
        delivery = _RabbitDelivery(self, incoming, message)
        self._unsettled.add(delivery)
        return delivery

    async def settled(self, delivery: _RabbitDelivery) -> None:
        self._unsettled.discard(delivery)
        if self.closed and not self._unsettled:
            await self._close_channel()

    def ack_soon(self, incoming: _Incoming) -> None:
        """Acknowledge a delivery with the others acknowledged in this turn of the loop: one
        payload per channel, one ``multiple`` ack when no older delivery is still open."""
        channel = _underlay(incoming)
        tag = incoming.delivery_tag
        if channel is None or tag is None:
            return  # its channel is gone: the broker delivers it again
        if not self._acks:
            asyncio.get_running_loop().call_soon(self._write_acks)
        self._acks.setdefault(channel, []).append(tag)

    def _write_acks(self) -> None:
        acks, self._acks = self._acks, {}
        for channel, tags in acks.items():
            if channel.is_closed:
                continue  # the broker delivers them again
            last = max(tags)
            if self._oldest_open(channel) > last:
                frames = [aiormq.spec.Basic.Ack(delivery_tag=last, multiple=True)]
            else:
                frames = [aiormq.spec.Basic.Ack(delivery_tag=tag) for tag in tags]
            payload = ChannelFrame.marshall(channel.number, frames)
            queue: asyncio.Queue[ChannelFrame] = getattr(channel, "write_queue")  # noqa: B009
            try:
                queue.put_nowait(payload)
            except asyncio.QueueFull:
                task = asyncio.ensure_future(_quietly(queue.put(payload), "ack"))
                self._broker._background.add(task)
                task.add_done_callback(self._broker._background.discard)

    def _oldest_open(self, channel: AbstractChannel) -> float:
        """The oldest delivery tag on ``channel`` not settled (given out or not yet)."""
        oldest = math.inf
        for delivery in self._unsettled:
            incoming = delivery._incoming
            if incoming.delivery_tag is not None and _underlay(incoming) is channel:
                oldest = min(oldest, incoming.delivery_tag)
        for incoming in self._ready:
            if incoming.delivery_tag is not None and _underlay(incoming) is channel:
                oldest = min(oldest, incoming.delivery_tag)
        return oldest

    async def aclose(self) -> None:
        """Stop intake and hand back what was not yielded; unsettled deliveries can still be
        settled (the channel closes after the last one)."""
        if self.closed:
            return
        self.closed = True
        self._waiting.wake()
        if self._channel is not None and self._tag is not None:
            await _quietly(self._cancel(self._channel, self._tag), "cancel consumer")
        if not self._unsettled:
            await self._close_channel()
            return
        ready, self._ready = self._ready, deque()
        for incoming in ready:
            await _quietly(_send_settle(incoming, ack=False, requeue=True), "requeue")

    @staticmethod
    async def _cancel(channel: AbstractRobustChannel, tag: str) -> None:
        underlay = await channel.get_underlay_channel()
        await underlay.basic_cancel(tag)

    def stop(self) -> None:
        """The broker is closing its connection: end iteration; everything not acknowledged
        goes back."""
        if self._acks:
            self._write_acks()
        self.closed = True
        self._ready.clear()
        self._unsettled.clear()
        self._waiting.wake()

    async def _close_channel(self) -> None:
        if self._acks:
            self._write_acks()
        channel, self._channel = self._channel, None
        self._broker._job_consumers.discard(self)
        if channel is not None:
            await _quietly(channel.close(), "close channel")


# --- status and log batches -----------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Message(Generic[T]):
    """One delivered status or log message and how far its records got."""

    channel: AbstractChannel
    tag: int
    records: list[T]
    arrived: float
    taken: int = 0
    """Records handed out in batches so far (from the front)."""
    acked: list[tuple[int, int]] = field(default_factory=list)
    """``(start, end)`` ranges of records whose batch was acknowledged."""
    acked_count: int = 0

    def remainder(self) -> list[T]:
        """The records not acknowledged, in order."""
        done = [False] * len(self.records)
        for start, end in self.acked:
            done[start:end] = [True] * (end - start)
        return [record for record, gone in zip(self.records, done, strict=True) if not gone]


_Part = tuple[_Message[T], int, int]


class _BatchConsumer(Generic[T]):
    """Batches of records from the status or log queue; an async iterator."""

    def __init__(
        self,
        broker: RabbitMQBroker,
        queue: str,
        codec: tuple[Callable[[bytes], list[T]], Callable[[Sequence[T]], bytes]],
        max_items: int,
        max_wait: float,
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self._broker = broker
        self._queue_name = queue
        self._decode, self._encode = codec
        self._max_items = max_items
        self._max_wait = max_wait
        self._channel: AbstractRobustChannel | None = None
        self._queue: AbstractRobustQueue | None = None
        self._tag: str | None = None
        self._current: AbstractChannel | None = None
        self._buffer: deque[_Message[T]] = deque()
        self._buffered = 0
        self._open: dict[int, _Message[T]] = {}
        """Delivered, not yet acknowledged messages by delivery tag (in delivery order)."""
        self._pending: dict[int, list[_Part[T]]] = {}
        self._keys = itertools.count()
        self._waiting = _Waiting()
        self.closed = False

    def __aiter__(self) -> _BatchConsumer[T]:
        return self

    async def __anext__(self) -> Batch[T]:
        if self._channel is None and not self.closed:
            await self._start()
        loop = asyncio.get_running_loop()
        while not self.closed:
            if self._buffered >= self._max_items:
                return self._batch()
            if self._buffered:
                deadline = self._buffer[0].arrived + self._max_wait
                if loop.time() >= deadline:
                    return self._batch()
                await self._waiting.wait(deadline)
            else:
                await self._waiting.wait()
        raise StopAsyncIteration

    async def _start(self) -> None:
        broker = self._broker
        channel = await broker._new_channel()
        prefetch = min(max(2 * self._max_items, 16), _MAX_PREFETCH)
        try:
            with _translated(f"consume {self._queue_name}"):
                async with asyncio.timeout(broker.operation_timeout):
                    await channel.set_qos(prefetch_count=prefetch)
                    self._queue = await broker._declare_record_queue(channel, self._queue_name)
                    self._tag = await self._queue.consume(self._on_message)
        except BaseException:
            await _quietly(channel.close(), "close channel")
            raise
        self._channel = channel

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        channel = _underlay(incoming)
        if self.closed or channel is None or incoming.delivery_tag is None:
            return  # the channel's close hands it back
        if channel is not self._current:  # a new channel (reconnected): the old is void
            self._reset(channel)
        try:
            records = self._decode(incoming.body)
        except ValidationError as exc:
            log.error(
                "RabbitMQ: undecodable message on %s dropped: %s",
                self._queue_name,
                exc,
                extra={"action": "poison", "field": exc.field},
            )
            await _quietly(_send_settle(incoming, ack=False), "reject")
            return
        if not records:
            await _quietly(_send_settle(incoming, ack=True), "ack")
            return
        now = asyncio.get_running_loop().time()
        message = _Message(channel, incoming.delivery_tag, records, now)
        self._open[message.tag] = message
        self._buffer.append(message)
        self._buffered += len(records)
        self._waiting.wake()

    def _reset(self, channel: AbstractChannel) -> None:
        self._current = channel
        self._buffer.clear()
        self._buffered = 0
        self._open.clear()

    def _batch(self) -> Batch[T]:
        room = self._max_items
        parts: list[_Part[T]] = []
        items: list[T] = []
        buffer = self._buffer
        while room and buffer:
            message = buffer[0]
            start = message.taken
            end = min(len(message.records), start + room)
            items.extend(message.records[start:end])
            parts.append((message, start, end))
            message.taken = end
            room -= end - start
            if end == len(message.records):
                buffer.popleft()
        self._buffered -= len(items)
        key = next(self._keys)
        self._pending[key] = parts
        return Batch(items, partial(self._ack, key))

    async def _ack(self, key: int) -> None:
        parts = self._pending.pop(key, None)
        if parts is None:
            return
        done: list[_Message[T]] = []
        for message, start, end in parts:
            message.acked.append((start, end))
            message.acked_count += end - start
            complete = message.acked_count == len(message.records)
            if complete and message.channel is self._current:  # else its channel is gone
                del self._open[message.tag]
                done.append(message)
        if not done:
            return
        channel = done[0].channel
        last = max(m.tag for m in done)
        oldest = next(iter(self._open), None)
        if oldest is None or oldest > last:  # every older message is settled too
            await _quietly(channel.basic_ack(last, multiple=True, wait=False), "ack")
            return
        for message in done:
            await _quietly(channel.basic_ack(message.tag, wait=False), "ack")

    async def aclose(self) -> None:
        """Stop; batches not acknowledged are delivered again to the next consumer."""
        if self.closed:
            return
        self.closed = True
        self._waiting.wake()
        self._broker._batch_consumers.discard(self)
        channel, self._channel = self._channel, None
        if channel is None:
            return
        if self._queue is not None and self._tag is not None:
            await _quietly(self._queue.cancel(self._tag), "cancel consumer")
        await self._replace_partly_acked()
        self._pending.clear()
        self._open.clear()
        self._buffer.clear()
        self._buffered = 0
        await _quietly(channel.close(), "close channel")

    async def _replace_partly_acked(self) -> None:
        """Republish the records left of messages that were only partly acknowledged, then
        acknowledge those messages (if the republish fails they come again whole)."""
        for message in list(self._open.values()):
            if not message.acked_count or message.channel is not self._current:
                continue
            body = self._encode(message.remainder())
            try:
                await self._broker._publish([self._broker._record_item("", self._queue_name, body)])
            except BackendUnavailableError as exc:
                log.warning("RabbitMQ: partly acknowledged message not replaced: %s", exc)
                return
            await _quietly(message.channel.basic_ack(message.tag), "ack")


# --- the broker -----------------------------------------------------------------------------


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
        self._bindings: dict[str, set[str]] = {}
        """Binding keys by worker group, declared or consumed through this broker."""
        self._job_consumers: set[_JobConsumer] = set()
        self._batch_consumers: set[_BatchConsumer[StatusRecord] | _BatchConsumer[LogRecord]]
        self._batch_consumers = set()
        self._dead_letter_consumers: set[_DeadLetterConsumer] = set()  # (dead letters)
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
                        publisher = await connection.channel(publisher_confirms=True)
                        _check_window_support(await publisher.get_underlay_channel())
                        self._publisher = publisher
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
        await channel.exchange_declare(
            names.jobs_exchange, exchange_type=JOBS_EXCHANGE_TYPE, durable=True
        )
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
        for worker_id, keys in list(self._bindings.items()):
            await self._declare_group(channel, worker_id, keys)

    async def _declare_group(
        self, channel: AbstractChannel, worker_id: str, keys: Iterable[str]
    ) -> None:
        queue = self.names.job_queue(worker_id)
        arguments = _table(self.names.job_queue_arguments())
        await channel.queue_declare(queue, durable=True, arguments=arguments)
        for key in keys:
            await channel.queue_bind(queue, self.names.jobs_exchange, routing_key=key)

    async def _declare_job_queue(
        self, channel: AbstractRobustChannel, worker_id: str
    ) -> AbstractRobustQueue:
        """The group's queue on a consumer's channel (restored with it after a reconnect)."""
        queue = await channel.declare_queue(
            self.names.job_queue(worker_id),
            durable=True,
            arguments=self.names.job_queue_arguments(),
        )
        self._bindings.setdefault(worker_id, set())
        return queue

    async def _declare_record_queue(
        self, channel: AbstractRobustChannel, name: str
    ) -> AbstractRobustQueue:
        return await channel.declare_queue(
            name, durable=True, arguments=self.names.record_queue_arguments()
        )

    async def declare_worker_group(self, worker_id: str, job_types: Sequence[str]) -> None:
        try:
            keys = sorted({self.names.job_binding_key(job_type) for job_type in job_types})
        except ValueError as exc:
            raise ValidationError(str(exc), field="jobTypes") from exc
        await self._declare(
            self._open_connection(),
            f"declare worker group {worker_id!r}",
            partial(self._declare_group, worker_id=worker_id, keys=keys),
        )
        self._bindings.setdefault(worker_id, set()).update(keys)

    # --- publishing -------------------------------------------------------------------------

    def _job_item(self, message: JobMessage) -> _Published:
        names = self.names
        occurrence_id = str(message.occurrence_id)
        properties = encode_properties(
            content_type=CONTENT_TYPE,
            headers=job_message_headers(message),
            delivery_mode=PERSISTENT,
            priority=min(max(int(message.priority), 0), MAX_PRIORITY),
            correlation_id=occurrence_id,
            message_id=occurrence_id,
            message_type=message.job_type,
        )
        key = names.job_routing_key(message.job_type, message.occurrence_id)
        return names.jobs_exchange, key, encode_job_message(message), properties

    @staticmethod
    def _record_item(exchange: str, routing_key: str, body: bytes) -> _Published:
        return exchange, routing_key, body, _RECORD_PROPERTIES

    async def _publish(self, items: Sequence[_Published]) -> None:
        """Publish in windows; each window's confirms are gathered within the timeout."""
        channel = self._publisher
        if channel is None or self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        window = self._window
        with _translated("publish"):
            for start in range(0, len(items), window):
                async with asyncio.timeout(self.publish_timeout):
                    underlay = await channel.get_underlay_channel()
                    chunk = items[start : start + window]
                    await _confirmed(await _write_window(underlay, chunk))

    async def publish_jobs(self, messages: Sequence[JobMessage]) -> None:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        if messages:
            await self._publish([self._job_item(message) for message in messages])

    async def publish_status(self, records: Sequence[StatusRecord]) -> None:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        if records:
            body = encode_status_records(records)
            await self._publish([self._record_item(self.names.status_exchange, "", body)])

    async def publish_logs(self, records: Sequence[LogRecord]) -> None:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        if records:
            body = encode_log_records(records)
            await self._publish([self._record_item(self.names.logs_exchange, "", body)])

    # --- consuming --------------------------------------------------------------------------

    def _open_connection(self) -> AbstractRobustConnection:
        if self._connection is None:
            raise BackendUnavailableError("the RabbitMQ broker is closed")
        return self._connection

    def consume_jobs(self, worker_id: str, prefetch: int) -> AsyncIterator[Delivery]:
        self._open_connection()
        consumer = _JobConsumer(self, worker_id, prefetch)
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
        consumer: _BatchConsumer[Any] = _BatchConsumer(self, queue, codec, max_items, max_wait)
        self._batch_consumers.add(consumer)
        return consumer

    # (dead letters: consumed by the DLQ handler; the consumer is at the end of this module)

    def consume_dead_letters(
        self, max_items: int, max_wait: float
    ) -> AsyncIterator[Batch[ReceivedDeadLetter]]:
        self._open_connection()
        consumer = _DeadLetterConsumer(self, max_items, max_wait)
        self._dead_letter_consumers.add(consumer)
        return consumer

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
        known = sorted(set(self._bindings) | set(groups))
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


# --- windowed publishing --------------------------------------------------------------------
#
# aiormq's ``basic_publish`` costs about 200 µs of Python per message (a lock, a timeout scope,
# pamqp's generic marshalling, a queue put and one socket write each). A window of messages is
# written here as one payload: under the channel's lock, each message takes the next delivery
# tag and a confirmation future registered where aiormq's confirm handling resolves it
# (``Basic.Ack``/``Nack``, ``multiple`` included); their frames, encoded by
# :mod:`rota.brokers.amqp_frames`, go to the connection's writer as one ``ChannelFrame``. This
# uses aiormq's channel attributes (``lock``, ``delivery_tag``, ``confirmations``,
# ``write_queue``, ``max_content_size``), checked when the broker starts, with aiormq pinned in
# constraints.txt and the broker's contract suite run on real RabbitMQ.

_WINDOW_ATTRIBUTES = (
    "lock",
    "delivery_tag",
    "confirmations",
    "write_queue",
    "number",
    "max_content_size",
    "create_future",
)


def _check_window_support(channel: AbstractChannel) -> None:
    missing = [name for name in _WINDOW_ATTRIBUTES if not hasattr(channel, name)]
    if missing or not getattr(channel, "publisher_confirms", False):
        raise ConfigurationError(
            f"this aiormq ({metadata.version('aiormq')}) lacks what Rota's publisher uses "
            f"({', '.join(missing) or 'publisher confirms'}): install the aiormq version "
            "pinned in constraints.txt"
        )


async def _write_window(channel: Any, items: Sequence[_Published]) -> list[asyncio.Future[Any]]:
    """Write ``items`` to ``channel`` as one payload; their confirmation futures, in order."""
    parts: list[bytes] = []
    confirms: list[asyncio.Future[Any]] = []
    number = channel.number
    max_body = channel.max_content_size
    confirmations = channel.confirmations
    async with channel.lock:
        first = channel.delivery_tag
        tag = first
        try:
            for exchange, key, body, properties in items:
                tag += 1
                confirm = channel.create_future()
                confirmations[tag] = confirm
                confirms.append(confirm)
                parts.append(encode_publish(number, exchange, key, body, properties, max_body))
            channel.delivery_tag = tag
            await channel.write_queue.put(ChannelFrame(payload=b"".join(parts), should_close=False))
        except BaseException:
            # Not handed to the writer: the broker never saw these tags; give them back.
            channel.delivery_tag = first
            for number in range(first + 1, tag + 1):
                channel.confirmations.pop(number, None)
            for confirm in confirms:
                confirm.cancel()
            raise
    return confirms


async def _confirmed(confirms: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for every confirmation (in order: they mostly come so); raise the first error
    after all have come, so no confirm is left unawaited."""
    error: BaseException | None = None
    for confirm in confirms:
        try:
            await confirm
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if error is None:
                error = exc
    if error is not None:
        raise error


# --- dead letters -------------------------------------------------------------------------------


def _text(value: object) -> str | None:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return None if value is None else str(value)


def _death(headers: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """RabbitMQ's reason and source queue of a dead-lettered message (``x-death``: the most
    recent death first; ``x-first-death-*`` when that is missing)."""
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], Mapping):
        return _text(deaths[0].get("reason")), _text(deaths[0].get("queue"))
    return _text(headers.get("x-first-death-reason")), _text(headers.get("x-first-death-queue"))


def received_dead_letter(body: bytes, headers: Mapping[str, Any]) -> ReceivedDeadLetter:
    """A message of the dead-letter queue as consumers get it: decoded when it can be, else
    with the error; never raises."""
    reason, queue = _death(headers)
    try:
        letter = decode_dead_letter(body, headers)
    except ValidationError as exc:
        return ReceivedDeadLetter(body=body, error=exc.message, reason=reason, queue=queue)
    except Exception as exc:  # whatever else a hostile body provokes: still a dead letter
        error = f"{type(exc).__name__}: {exc}"
        return ReceivedDeadLetter(body=body, error=error, reason=reason, queue=queue)
    return ReceivedDeadLetter(body=body, letter=letter, reason=reason, queue=queue)


_Dead = tuple[AbstractChannel, int, ReceivedDeadLetter, float]
"""``(channel, delivery tag, item, arrival on the loop clock)``."""


class _DeadLetterConsumer:
    """Batches of the dead-letter queue's messages, one item per message; an async iterator.
    A batch's messages are acknowledged by ``Batch.ack``; the rest go back when it stops."""

    def __init__(self, broker: RabbitMQBroker, max_items: int, max_wait: float) -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self._broker = broker
        self._max_items = max_items
        self._max_wait = max_wait
        self._channel: AbstractRobustChannel | None = None
        self._queue: AbstractRobustQueue | None = None
        self._tag: str | None = None
        self._current: AbstractChannel | None = None
        self._buffer: deque[_Dead] = deque()
        self._pending: dict[int, list[_Dead]] = {}
        self._keys = itertools.count()
        self._waiting = _Waiting()
        self.closed = False

    def __aiter__(self) -> _DeadLetterConsumer:
        return self

    async def __anext__(self) -> Batch[ReceivedDeadLetter]:
        if self._channel is None and not self.closed:
            await self._start()
        loop = asyncio.get_running_loop()
        while not self.closed:
            if len(self._buffer) >= self._max_items:
                return self._batch()
            if self._buffer:
                deadline = self._buffer[0][3] + self._max_wait
                if loop.time() >= deadline:
                    return self._batch()
                await self._waiting.wait(deadline)
            else:
                await self._waiting.wait()
        raise StopAsyncIteration

    async def _start(self) -> None:
        broker = self._broker
        name = broker.names.dead_letter_queue
        channel = await broker._new_channel()
        prefetch = min(max(2 * self._max_items, 16), _MAX_PREFETCH)
        try:
            with _translated(f"consume {name}"):
                async with asyncio.timeout(broker.operation_timeout):
                    await channel.set_qos(prefetch_count=prefetch)
                    self._queue = await broker._declare_record_queue(channel, name)
                    self._tag = await self._queue.consume(self._on_message)
        except BaseException:
            await _quietly(channel.close(), "close channel")
            raise
        self._channel = channel

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        channel = _underlay(incoming)
        if self.closed or channel is None or incoming.delivery_tag is None:
            return  # the channel's close hands it back
        if channel is not self._current:  # a new channel (reconnected): the old tags are void
            self._current = channel
            self._buffer.clear()
            self._pending.clear()
        item = received_dead_letter(bytes(incoming.body), dict(incoming.headers or {}))
        now = asyncio.get_running_loop().time()
        self._buffer.append((channel, incoming.delivery_tag, item, now))
        self._waiting.wake()

    def _batch(self) -> Batch[ReceivedDeadLetter]:
        count = min(len(self._buffer), self._max_items)
        taken = [self._buffer.popleft() for _ in range(count)]
        key = next(self._keys)
        self._pending[key] = taken
        return Batch([entry[2] for entry in taken], partial(self._ack, key))

    async def _ack(self, key: int) -> None:
        taken = self._pending.pop(key, None)  # a second ack of the same batch does nothing
        for channel, tag, _item, _arrived in taken or ():
            if channel is self._current:  # else its channel is gone: it comes again
                await _quietly(channel.basic_ack(tag, wait=False), "ack")

    async def aclose(self) -> None:
        """Stop; messages not acknowledged are delivered again to the next consumer."""
        if self.closed:
            return
        self.stop()
        self._broker._dead_letter_consumers.discard(self)
        channel, self._channel = self._channel, None
        if channel is None:
            return
        if self._queue is not None and self._tag is not None:
            await _quietly(self._queue.cancel(self._tag), "cancel consumer")
        await _quietly(channel.close(), "close channel")

    def stop(self) -> None:
        """End iteration (the broker is closing: its connection's close hands back the
        messages not acknowledged)."""
        self.closed = True
        self._buffer.clear()
        self._pending.clear()
        self._waiting.wake()
