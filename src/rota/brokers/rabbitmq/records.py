"""Batches from a queue: :class:`_QueueConsumer`, the one consumer base of the status, log and
dead-letter queues, and :class:`_RecordConsumer`, the status and log consumer.

The items of many messages are gathered until ``max_items`` or ``max_wait`` (from the oldest
item's arrival), or none at all when the oldest arrived while the last batch was out (a
backlog: the time that batch took did the gathering); a batch may take part of a message.
``Batch.ack`` acknowledges the messages it completes (one ``multiple`` ack when they are the
oldest open ones; the dead-letter consumer acknowledges each by itself). A message only partly
acknowledged when its consumer stops is replaced by a message of the records left (published
to the same queue, at its tail) before the rest is handed back."""

from __future__ import annotations

import asyncio
import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustQueue
from aiormq.abc import AbstractChannel

from rota.brokers.rabbitmq.channels import (
    _MAX_PREFETCH,
    _quietly,
    _send_settle,
    _translated,
    _underlay,
    _Waiting,
    log,
)
from rota.brokers.rabbitmq.publish import record_item
from rota.core.errors import BackendUnavailableError, ValidationError
from rota.core.records import Batch, batch_due

if TYPE_CHECKING:
    from rota.brokers.rabbitmq import RabbitMQBroker

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class _Message(Generic[T]):
    """One delivered message, its items (``records``) and how far they got."""

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


class _QueueConsumer(ABC, Generic[T]):
    """Batches of the items of one queue's messages; an async iterator (see the module
    docstring). A subclass says what items a message holds (:meth:`_items`); when the consumer
    stops, what was not acknowledged goes back (after :meth:`_hand_back`)."""

    def __init__(
        self,
        broker: RabbitMQBroker,
        queue: str,
        max_items: int,
        max_wait: float,
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self._broker = broker
        self._queue_name = queue
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
        self._served = False
        """A batch was handed out: items waiting from before the next ask are a backlog."""
        self.closed = False

    def __aiter__(self) -> _QueueConsumer[T]:
        return self

    async def __anext__(self) -> Batch[T]:
        if self._channel is None and not self.closed:
            try:
                await self._start()
            except Exception:  # a lost connection's error, translated or not (aiormq's own)
                if not self.closed:
                    raise  # closed while starting (the broker's close): the iteration ends
        loop = asyncio.get_running_loop()
        asked = loop.time()
        while not self.closed:
            if self._buffered >= self._max_items:
                return self._batch()
            if self._buffered:
                deadline = batch_due(
                    self._buffer[0].arrived, asked, served=self._served, max_wait=self._max_wait
                )
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
        if self.closed:  # closed while starting: nothing is taken from this channel
            await _quietly(channel.close(), "close channel")
            return
        self._channel = channel

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        channel = _underlay(incoming)
        if self.closed or channel is None or incoming.delivery_tag is None:
            return  # the channel's close hands it back
        if channel is not self._current:  # a new channel (reconnected): the old is void
            self._reset(channel)
        items = await self._items(incoming)
        if not items:
            return
        now = asyncio.get_running_loop().time()
        message = _Message(channel, incoming.delivery_tag, items, now)
        self._open[message.tag] = message
        self._buffer.append(message)
        self._buffered += len(items)
        self._waiting.wake()

    @abstractmethod
    async def _items(self, incoming: AbstractIncomingMessage) -> list[T]:
        """The items of a message; none if it was settled here (dropped) instead."""

    def _reset(self, channel: AbstractChannel) -> None:
        self._current = channel
        self._buffer.clear()
        self._buffered = 0
        self._open.clear()

    def _batch(self) -> Batch[T]:
        self._served = True
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
        parts = self._pending.pop(key, None)  # a second ack of the same batch does nothing
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
        if done:
            await self._acknowledge(done)

    async def _acknowledge(self, done: list[_Message[T]]) -> None:
        """Acknowledge completed messages: one ``multiple`` ack when every older message is
        settled too."""
        channel = done[0].channel
        last = max(m.tag for m in done)
        oldest = next(iter(self._open), None)
        if oldest is None or oldest > last:
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
        self._broker._forget(self)
        channel, self._channel = self._channel, None
        if channel is None:
            return
        if self._queue is not None and self._tag is not None:
            await _quietly(self._queue.cancel(self._tag), "cancel consumer")
        await self._hand_back()
        self._clear()
        await _quietly(channel.close(), "close channel")

    async def _hand_back(self) -> None:
        """Before the channel's close hands back every message not acknowledged."""

    def stop(self) -> None:
        """End iteration (the broker is closing: its connection's close hands back the
        messages not acknowledged)."""
        self.closed = True
        self._clear()
        self._waiting.wake()

    def _clear(self) -> None:
        self._pending.clear()
        self._open.clear()
        self._buffer.clear()
        self._buffered = 0


class _RecordConsumer(_QueueConsumer[T]):
    """Batches of records from the status or log queue (a message is a JSON array of them)."""

    def __init__(
        self,
        broker: RabbitMQBroker,
        queue: str,
        codec: tuple[Callable[[bytes], list[T]], Callable[[Sequence[T]], bytes]],
        max_items: int,
        max_wait: float,
    ) -> None:
        super().__init__(broker, queue, max_items, max_wait)
        self._decode, self._encode = codec

    async def _items(self, incoming: AbstractIncomingMessage) -> list[T]:
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
            return []
        if not records:
            await _quietly(_send_settle(incoming, ack=True), "ack")
        return records

    async def _hand_back(self) -> None:
        """Republish the records left of messages that were only partly acknowledged, then
        acknowledge those messages (if the republish fails they come again whole)."""
        for message in list(self._open.values()):
            if not message.acked_count or message.channel is not self._current:
                continue
            body = self._encode(message.remainder())
            try:
                await self._broker._publish([record_item("", self._queue_name, body, "records")])
            except BackendUnavailableError as exc:
                log.warning("RabbitMQ: partly acknowledged message not replaced: %s", exc)
                return
            await _quietly(message.channel.basic_ack(message.tag), "ack")
