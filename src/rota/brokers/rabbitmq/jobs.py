"""Job consumers: one per worker instance, on a channel of its own; and their deliveries.

A message is one job (``application/json``, the reference form) or an **envelope** of several
(``application/vnd.rota.jobs+json``). Each job is handed out as a delivery of its own, with
its own life: settled by itself, and the message is acknowledged once every job it carries
is settled (so it is never held longer than its longest job's single message would be). A job
of an envelope given back (a hand-back, a stop, a limit) is published again alone, and one
dead-lettered goes to the dead-letter queue alone, before the envelope is acknowledged; a job
of an envelope that cannot be read goes to the dead-letter queue alone, its siblings run.

The consumer's prefetch counts messages, and a worker should hold about ``prefetch`` jobs
whatever their packing: while its group gets single messages, the prefetch is ``prefetch``;
while it gets envelopes, it is ``prefetch`` divided by the mean size of the last envelopes
received (at least :data:`ENVELOPE_PREFETCH`): two big envelopes of a burst, or many small
ones (fires sent ahead, held until their instant). RabbitMQ applies a consumer's prefetch
when it starts consuming: a change (of at least half, or of mode) starts a new consumer on the
same channel and cancels the old one (what was delivered to it is settled as before).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustQueue

from rota.brokers.rabbitmq.channels import (
    _MAX_PREFETCH,
    _quietly,
    _send_settle,
    _translated,
    _underlay,
    _Waiting,
    log,
)
from rota.brokers.rabbitmq.publish import dead_letter_item, job_item
from rota.core.errors import BackendUnavailableError, ConflictError, ValidationError
from rota.core.models import JobMessage
from rota.core.ports import Delivery
from rota.core.wire import (
    ENVELOPE_CONTENT_TYPE,
    HEADER_REDELIVERED,
    EnvelopePart,
    decode_job_envelope,
    decode_job_message,
    encode_envelope_part,
    encode_job_message,
    job_message_headers,
)

if TYPE_CHECKING:
    from rota.brokers.rabbitmq import RabbitMQBroker

ENVELOPE_PREFETCH = 2
"""The fewest envelopes a consumer holds at a time: one being run, the next ready."""
_MEAN_WEIGHT = 0.5
"""How much the last message's size moves the mean size of those received."""


def envelope_size(prefetch: int) -> int:
    """The most jobs a consumer of ``prefetch`` takes in one envelope (0: single messages
    only): two envelopes in hand hold about ``prefetch`` jobs."""
    size = min(prefetch // ENVELOPE_PREFETCH, 1000)
    return size if size > 1 else 0


class _Carrier:
    """One delivered message and how many of its jobs are not settled yet."""

    __slots__ = ("envelope", "incoming", "open", "redelivered")

    def __init__(self, incoming: AbstractIncomingMessage, jobs: int, *, envelope: bool) -> None:
        self.incoming = incoming
        self.open = jobs
        self.envelope = envelope
        headers = incoming.headers or {}
        self.redelivered = bool(incoming.redelivered) or bool(headers.get(HEADER_REDELIVERED))


class _RabbitDelivery(Delivery):
    __slots__ = ("_carrier", "_consumer", "_settled", "message", "redelivered")

    def __init__(self, consumer: _JobConsumer, carrier: _Carrier, message: JobMessage) -> None:
        self.message = message
        self.redelivered = carrier.redelivered
        self._consumer = consumer
        self._carrier = carrier
        self._settled = False

    @property
    def is_live(self) -> bool:
        return _underlay(self._carrier.incoming) is not None

    async def ack(self) -> None:
        self._settle()
        await self._consumer.settled(self, done=True)

    async def reject(self, *, requeue: bool) -> None:
        self._settle()
        carrier = self._carrier
        if not carrier.envelope:
            await _quietly(_send_settle(carrier.incoming, ack=False, requeue=requeue), "reject")
            carrier.open = 0
            await self._consumer.settled(self, done=False)
            return
        # A job of an envelope goes back (or to the dead letters) alone.
        sent = await self._consumer.send_alone(self.message, dead=not requeue)
        await self._consumer.settled(self, done=sent)

    def _settle(self) -> None:
        if self._settled:
            raise ConflictError("delivery already settled")
        self._settled = True


class _JobConsumer:
    """One consumer of a group's queue, on a channel of its own; an async iterator."""

    def __init__(
        self,
        broker: RabbitMQBroker,
        worker_id: str,
        prefetch: int,
        envelopes: Callable[[], bool] | None = None,
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self._broker = broker
        self._worker_id = worker_id
        self._prefetch = min(prefetch, _MAX_PREFETCH)
        self._envelopes = envelopes if envelope_size(self._prefetch) > 0 else None
        """Whether the group gets envelopes now (``None``: single messages)."""
        self._in_envelopes = False
        self._mean = 1.0
        """The mean size (jobs) of the messages received lately."""
        self._qos = self._want_prefetch()
        self._channel: AbstractRobustChannel | None = None
        self._queue: AbstractRobustQueue | None = None
        self._tag: str | None = None
        self._incoming: deque[AbstractIncomingMessage] = deque()
        """Messages received, not read yet."""
        self._ready: deque[_RabbitDelivery] = deque()
        """Jobs read, not handed out yet."""
        self._unsettled: set[_RabbitDelivery] = set()
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
            if self._ready:
                delivery = self._ready.popleft()
                if not delivery.is_live:
                    continue  # its channel is gone: the broker delivers it again
                self._unsettled.add(delivery)
                return delivery
            if self._incoming:
                await self._read(self._incoming.popleft())
                continue
            await self._waiting.wait()
        raise StopAsyncIteration

    async def _open(self) -> None:
        broker = self._broker
        channel = await broker._new_channel()
        try:
            with _translated("consume jobs"):
                async with asyncio.timeout(broker.operation_timeout):
                    await channel.set_qos(prefetch_count=self._qos)
                    self._queue = await broker._declare_job_queue(channel, self._worker_id)
                    self._tag = f"rota-{secrets.token_hex(8)}"
                    # aio-pika's robust channel restores the consumer after a reconnect.
                    await self._queue.consume(self._on_message, consumer_tag=self._tag)
        except BaseException:
            await _quietly(channel.close(), "close channel")
            raise
        self._channel = channel

    def _want_prefetch(self) -> int:
        """``prefetch`` jobs' worth of messages, as they come now."""
        envelopes = self._envelopes is not None and self._envelopes()
        if envelopes != self._in_envelopes:  # the group's mode changed: expect its sizes
            self._in_envelopes = envelopes
            self._mean = float(envelope_size(self._prefetch)) if envelopes else 1.0
        if not envelopes:
            return self._prefetch
        return max(ENVELOPE_PREFETCH, min(self._prefetch, round(self._prefetch / self._mean)))

    async def _follow_prefetch(self, jobs: int) -> None:
        """Note a message of ``jobs`` jobs; start a consumer with the prefetch that holds about
        ``prefetch`` jobs when it differs by half or more from the current one (or the
        group's mode changed), and cancel the one before."""
        self._mean += _MEAN_WEIGHT * (jobs - self._mean)
        was = self._in_envelopes
        want = self._want_prefetch()
        qos = self._qos
        if want == qos or (was == self._in_envelopes and qos / 2 < want < qos * 2):
            return
        channel, queue, old = self._channel, self._queue, self._tag
        if channel is None or queue is None or old is None:
            return
        self._qos = want
        tag = f"rota-{secrets.token_hex(8)}"
        try:
            with _translated("change the prefetch"):
                async with asyncio.timeout(self._broker.operation_timeout):
                    await channel.set_qos(prefetch_count=want)
                    await queue.consume(self._on_message, consumer_tag=tag)
                    self._tag = tag
                    await queue.cancel(old)
        except BackendUnavailableError as exc:  # the channel is going: restored with it
            log.warning("RabbitMQ: job consumer not changed to prefetch %d: %s", want, exc)

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        if self.closed:  # arrived while stopping: give it back at once
            await _quietly(_send_settle(incoming, ack=False, requeue=True), "requeue")
            return
        self._incoming.append(incoming)
        self._waiting.wake()

    async def _read(self, incoming: AbstractIncomingMessage) -> None:
        """Read a message into the jobs it carries (a poison message or job to the dead
        letters)."""
        if _underlay(incoming) is None:
            return  # its channel is gone: the broker delivers it again
        envelope = incoming.content_type == ENVELOPE_CONTENT_TYPE
        counts = self._broker.counts
        counts["delivered_messages"] += 1
        try:
            if envelope:
                parts = decode_job_envelope(incoming.body)
            else:
                headers: dict[str, Any] = dict(incoming.headers or {})
                parts = [EnvelopePart(0, None, decode_job_message(incoming.body, headers))]
        except ValidationError as exc:
            log.warning(
                "RabbitMQ: undecodable job message dead-lettered: %s",
                exc,
                extra={"action": "poison", "field": exc.field},
            )
            await _quietly(_send_settle(incoming, ack=False), "reject")
            return
        counts["delivered_jobs"] += len(parts)
        await self._follow_prefetch(len(parts))
        carrier = _Carrier(incoming, len(parts), envelope=envelope)
        for part in parts:
            if part.message is not None:
                self._ready.append(_RabbitDelivery(self, carrier, part.message))
                continue
            log.warning(
                "RabbitMQ: undecodable job of an envelope dead-lettered: %s",
                part.error,
                extra={"action": "poison", "field": part.error.field if part.error else None},
            )
            if await self._dead_letter(encode_envelope_part(part), self._death_headers()):
                await self._part_done(carrier)

    # --- settling -----------------------------------------------------------------------

    async def settled(self, delivery: _RabbitDelivery, *, done: bool) -> None:
        """A job was settled (``done``: its message may be acknowledged once all its jobs
        are)."""
        self._unsettled.discard(delivery)
        if done:
            await self._part_done(delivery._carrier)
        if self.closed and not self._unsettled:
            await self._close_channel()

    async def _part_done(self, carrier: _Carrier) -> None:
        carrier.open -= 1
        if carrier.open == 0:
            await _quietly(_send_settle(carrier.incoming, ack=True), "ack")

    async def send_alone(self, message: JobMessage, *, dead: bool) -> bool:
        """Publish a job of an envelope as a message of its own: back to its group's queue
        (marked redelivered, as RabbitMQ marks a message given back), or to the dead
        letters. ``False`` when it could not be published: its envelope then stays
        unacknowledged and the broker delivers it again once its channel closes."""
        names = self._broker.names
        if dead:
            headers = {**job_message_headers(message), **self._death_headers()}
            return await self._dead_letter(encode_job_message(message), headers)
        try:
            await self._broker._publish([job_item(names, message, {HEADER_REDELIVERED: 1})])
        except BackendUnavailableError as exc:
            log.warning("RabbitMQ: a job of an envelope not handed back alone: %s", exc)
            return False
        return True

    def _death_headers(self) -> dict[str, str]:
        """What RabbitMQ says of a message rejected from the group's queue."""
        return {
            "x-first-death-reason": "rejected",
            "x-first-death-queue": self._broker.names.job_queue(self._worker_id),
        }

    async def _dead_letter(self, body: bytes, headers: dict[str, Any]) -> bool:
        item = dead_letter_item(self._broker.names, body, headers)
        try:
            await self._broker._publish([item])
        except BackendUnavailableError as exc:
            log.warning("RabbitMQ: a job of an envelope not dead-lettered alone: %s", exc)
            return False
        return True

    # --- stopping -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop intake and hand back what was not yielded; unsettled deliveries can still be
        settled (the channel closes after the last one)."""
        if self.closed:
            return
        self.closed = True
        self._waiting.wake()
        if self._queue is not None and self._tag is not None:
            await _quietly(self._queue.cancel(self._tag), "cancel consumer")
        incoming, self._incoming = self._incoming, deque()
        for message in incoming:
            await _quietly(_send_settle(message, ack=False, requeue=True), "requeue")
        ready, self._ready = self._ready, deque()
        for delivery in ready:
            self._unsettled.add(delivery)
            await delivery.reject(requeue=True)
        if not self._unsettled:
            await self._close_channel()

    def stop(self) -> None:
        """The broker is closing its connection: end iteration; everything not acknowledged
        goes back."""
        self.closed = True
        self._incoming.clear()
        self._ready.clear()
        self._unsettled.clear()
        self._waiting.wake()

    async def _close_channel(self) -> None:
        channel, self._channel = self._channel, None
        self._broker._job_consumers.discard(self)
        if channel is not None:
            await _quietly(channel.close(), "close channel")
