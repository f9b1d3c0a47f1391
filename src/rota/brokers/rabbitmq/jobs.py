"""Job consumers: one per worker instance, on a channel of its own, taking deliveries from aiormq
directly; and their deliveries (acks gathered per turn of the loop, one ``multiple`` ack when
no older delivery is open).

aiormq hands each delivery to a consumer callback in a task of its own (created, tracked in two
future stores, and awaited by a done-callback), which costs more than all the rest of a
delivery's intake here. The consumer's channel reads its deliveries' frames as aiormq does and
passes each to the consumer directly (:func:`_direct_intake`); with an aiormq that does not
have the methods this relies on, deliveries take aiormq's own path (the callback)."""

from __future__ import annotations

import asyncio
import math
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiormq
from aio_pika.abc import AbstractRobustChannel, AbstractRobustQueue
from aiormq.abc import AbstractChannel, ChannelFrame, DeliveredMessage

from rota.brokers.rabbitmq.channels import (
    _MAX_PREFETCH,
    _quietly,
    _send_settle,
    _translated,
    _underlay,
    _Waiting,
    log,
)
from rota.core.errors import BackendUnavailableError, ConflictError, ValidationError
from rota.core.models import JobMessage
from rota.core.ports import Delivery
from rota.core.wire import decode_job_message

if TYPE_CHECKING:
    from rota.brokers.rabbitmq import RabbitMQBroker


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
            try:
                await self._open()
            except Exception:  # a lost connection's error, translated or not (aiormq's own)
                if not self.closed:
                    raise  # stopped while opening (the broker's close): the iteration ends
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
        _direct_intake(underlay, self._on_message, self._take)
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
        """The consumer callback (aiormq's path; see :func:`_direct_intake`)."""
        self._take(delivered)

    def _take(self, delivered: DeliveredMessage) -> None:
        incoming = _Incoming(delivered)
        if self.closed:  # arrived while stopping: give it back at once
            task = asyncio.ensure_future(
                _quietly(_send_settle(incoming, ack=False, requeue=True), "requeue")
            )
            self._broker._background.add(task)
            task.add_done_callback(self._broker._background.discard)
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


def _direct_intake(
    channel: AbstractChannel,
    callback: Callable[[DeliveredMessage], Awaitable[None]],
    take: Callable[[DeliveredMessage], None],
) -> bool:
    """Make ``channel`` pass the deliveries meant for ``callback`` (the consumer callback given
    to ``basic_consume``) to ``take`` as it reads them, instead of starting a task per delivery
    that calls ``callback``. The frames are read by aiormq's own methods, in the same order;
    deliveries for any other consumer (none: the channel is the consumer's own), or for none
    (cancelled), are handled as aiormq handles them. ``False`` (nothing changed) when this
    aiormq lacks those methods."""
    read_header = getattr(channel, "_Channel__get_content_header", None)
    read_content = getattr(channel, "_read_content", None)
    consumers = getattr(channel, "consumers", None)
    aiormq_path = getattr(channel, "_on_deliver_frame", None)
    if read_header is None or read_content is None or aiormq_path is None:
        return False
    if not isinstance(consumers, dict):
        return False

    async def on_deliver_frame(frame: aiormq.spec.Basic.Deliver) -> None:
        header = await read_header()
        message = await read_content(frame, header)
        consumer = consumers.get(frame.consumer_tag) if frame.consumer_tag else None
        if consumer is None:
            return  # no consumer (cancelled): aiormq drops it too (the broker delivers it again)
        if consumer != callback:
            task = channel.create_task(consumer(message))
            task.add_done_callback(_log_consumer_failure)
            return
        try:
            take(message)
        except Exception:  # never break the channel's reader (left unacknowledged, as aiormq does)
            log.exception("RabbitMQ: taking a job delivery failed")

    setattr(channel, "_on_deliver_frame", on_deliver_frame)  # noqa: B010
    return True


def _log_consumer_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("RabbitMQ: consumer callback failed", exc_info=task.exception())
