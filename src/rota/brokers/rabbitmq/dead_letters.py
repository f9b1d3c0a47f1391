"""The dead-letter queue's consumer (batches of one item per message) and the decoding of a
dead letter that never raises."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustQueue
from aiormq.abc import AbstractChannel

from rota.brokers.rabbitmq.channels import (
    _MAX_PREFETCH,
    _quietly,
    _translated,
    _underlay,
    _Waiting,
)
from rota.core.errors import ValidationError
from rota.core.records import Batch, ReceivedDeadLetter
from rota.core.wire import decode_dead_letter

if TYPE_CHECKING:
    from rota.brokers.rabbitmq import RabbitMQBroker


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
