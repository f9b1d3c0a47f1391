"""What every part of the RabbitMQ broker shares: errors translated to Rota's own, operations
whose failure only means a redelivery, a consumer's wait, and settling a delivery."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterator, Mapping

from aio_pika.abc import AbstractIncomingMessage
from aiormq.abc import AbstractChannel
from aiormq.exceptions import AMQPError, ChannelInvalidStateError, ChannelPreconditionFailed
from pamqp.common import FieldTable

from rota.core.errors import BackendUnavailableError, ConfigurationError

log = logging.getLogger("rota.brokers.rabbitmq")

_MAX_PREFETCH = 65535
"""``prefetch_count`` is a 16-bit field."""
_BROKER_ERRORS = (AMQPError, ConnectionError, OSError, TimeoutError, RuntimeError)
"""What the client raises when the broker or the connection fails (aiormq raises a plain
``RuntimeError`` for a closed connection, and ``ChannelInvalidStateError``, a subclass of it,
for a closed channel)."""


def _table(values: Mapping[str, str | int]) -> FieldTable:
    return dict(values)


def _lost_connection(exc: asyncio.CancelledError) -> bool:
    """Whether a ``CancelledError`` is aiormq's word for a lost connection rather than a
    cancellation of the current task: when it finds a connection stuck (no frame within the
    heartbeat grace), aiormq closes it with ``CancelledError`` and sets that exception on
    every future waiting on it (publish confirmations included). Such an error must not end
    the loop that awaited it: the connection comes back and the loop goes on."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Raise broker and network errors as Rota's own (a lost connection's ``CancelledError``
    too, see :func:`_lost_connection`)."""
    try:
        yield
    except asyncio.CancelledError as exc:
        if not _lost_connection(exc):
            raise
        raise BackendUnavailableError(f"RabbitMQ: cannot {what}: the connection was lost") from exc
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
    except asyncio.CancelledError as exc:
        if not _lost_connection(exc):
            raise
        log.debug("RabbitMQ: %s failed: connection lost", what, extra={"action": what})
        return False
    return True


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _underlay(incoming: AbstractIncomingMessage) -> AbstractChannel | None:
    """The channel a message was delivered on, ``None`` if it is closed."""
    try:
        channel = incoming.channel
    except ChannelInvalidStateError:
        return None
    return None if channel.is_closed else channel


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


def _send_settle(
    incoming: AbstractIncomingMessage, *, ack: bool, requeue: bool = False
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
