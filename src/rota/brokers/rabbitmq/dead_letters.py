"""The dead-letter queue's consumer (batches of one item per message, on the consumer base of
:mod:`.records`) and the decoding of a dead letter that never raises."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from rota.brokers.rabbitmq.channels import _quietly
from rota.brokers.rabbitmq.records import _Message, _QueueConsumer
from rota.core.errors import ValidationError
from rota.core.records import ReceivedDeadLetter
from rota.core.wire import decode_dead_letter


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


class _DeadLetterConsumer(_QueueConsumer[ReceivedDeadLetter]):
    """Batches of the dead-letter queue's messages, one item per message (undecodable ones
    too, with their error); each message of an acknowledged batch is acknowledged by itself."""

    async def _items(self, incoming: AbstractIncomingMessage) -> list[ReceivedDeadLetter]:
        return [received_dead_letter(bytes(incoming.body), dict(incoming.headers or {}))]

    async def _acknowledge(self, done: list[_Message[ReceivedDeadLetter]]) -> None:
        for message in done:
            await _quietly(message.channel.basic_ack(message.tag, wait=False), "ack")
