"""What is published, and confirmed publishing in windows, on aiormq's public ``basic_publish``.

A dispatch batch goes out as few messages: the jobs it holds for one worker group and priority
travel as one **envelope** (``application/vnd.rota.jobs+json``) when every live instance of
the group reads envelopes, else as one message each (the reference form of
``docs/protocol.md`` §5). Status and log records are one message per batch. So the messages
are few, and each one is published the plain way: a window of them is handed to the channel
at once and their confirms are gathered together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aio_pika.abc import AbstractRobustChannel
from pamqp.commands import Basic

from rota.brokers.rabbitmq.channels import _translated
from rota.brokers.rabbitmq.names import CONTENT_TYPE, MAX_PRIORITY, PERSISTENT, AmqpNames
from rota.core.errors import BackendUnavailableError
from rota.core.models import JobMessage
from rota.core.wire import (
    ENVELOPE_CONTENT_TYPE,
    MAX_ENVELOPE_JOBS,
    encode_job_envelope,
    encode_job_message,
    job_message_headers,
)

__all__ = [
    "Published",
    "dead_letter_item",
    "envelope_items",
    "job_item",
    "publish_confirmed",
    "record_item",
]


@dataclass(frozen=True, slots=True)
class Published:
    """One message to publish, and what it carries (for the broker's message counts)."""

    exchange: str
    routing_key: str
    body: bytes
    properties: Basic.Properties
    kind: str
    """``job``, ``envelope``, ``status``, ``logs`` or ``dead_letter``."""
    jobs: int = 0
    """The job messages it carries."""


def _priority(message: JobMessage) -> int:
    return min(max(int(message.priority), 0), MAX_PRIORITY)


def _group_queue(names: AmqpNames, message: JobMessage) -> str:
    if not message.worker_id:
        raise ValueError(f"job message {message.occurrence_id} names no worker group to send it to")
    # The default exchange: the routing key is the group's queue, which receives it alone.
    return names.job_queue(message.worker_id)


def job_item(
    names: AmqpNames, message: JobMessage, headers: Mapping[str, Any] | None = None
) -> Published:
    """A job message alone (``headers``: more AMQP headers, e.g. the redelivery mark of a job
    handed back from an envelope)."""
    occurrence_id = str(message.occurrence_id)
    properties = Basic.Properties(
        content_type=CONTENT_TYPE,
        headers={**job_message_headers(message), **(headers or {})},
        delivery_mode=PERSISTENT,
        priority=_priority(message),
        correlation_id=occurrence_id,
        message_id=occurrence_id,
        message_type=message.job_type,
    )
    queue = _group_queue(names, message)
    return Published("", queue, encode_job_message(message), properties, "job", 1)


def _envelope(names: AmqpNames, messages: Sequence[JobMessage]) -> Published:
    properties = Basic.Properties(
        content_type=ENVELOPE_CONTENT_TYPE,
        delivery_mode=PERSISTENT,
        priority=_priority(messages[0]),
    )
    queue = _group_queue(names, messages[0])
    body = encode_job_envelope(messages)
    return Published("", queue, body, properties, "envelope", len(messages))


def envelope_items(
    names: AmqpNames, messages: Sequence[JobMessage], envelopes: Mapping[str, int]
) -> list[Published]:
    """The messages of a dispatch batch: for a group in ``envelopes`` (group → the most jobs
    its instances take in one envelope), its jobs of one priority in envelopes of at most that
    many (a lone job as a message of its own); for any other group, one message per job.
    Order within a group and priority is kept."""
    items: list[Published] = []
    singles: list[JobMessage] = []
    by_group: dict[tuple[str, int], list[JobMessage]] = {}
    for message in messages:
        group = message.worker_id or ""
        if envelopes.get(group, 0) > 1:
            by_group.setdefault((group, _priority(message)), []).append(message)
        else:
            singles.append(message)
    for (group, _), batch in sorted(by_group.items(), key=lambda entry: entry[0]):
        size = min(envelopes[group], MAX_ENVELOPE_JOBS)
        for start in range(0, len(batch), size):
            chunk = batch[start : start + size]
            if len(chunk) == 1:
                items.append(job_item(names, chunk[0]))
            else:
                items.append(_envelope(names, chunk))
    items.extend(job_item(names, message) for message in singles)
    return items


_RECORD_PROPERTIES = Basic.Properties(content_type=CONTENT_TYPE, delivery_mode=PERSISTENT)


def record_item(exchange: str, routing_key: str, body: bytes, kind: str) -> Published:
    return Published(exchange, routing_key, body, _RECORD_PROPERTIES, kind)


def dead_letter_item(names: AmqpNames, body: bytes, headers: Mapping[str, Any]) -> Published:
    """A job sent to the dead letters by itself (a job of an envelope)."""
    properties = Basic.Properties(
        content_type=CONTENT_TYPE, headers=dict(headers), delivery_mode=PERSISTENT
    )
    return Published(names.dead_letter_exchange, "", body, properties, "dead_letter", 1)


async def publish_confirmed(
    channel: AbstractRobustChannel, items: Sequence[Published], window: int, limit: float
) -> None:
    """Publish in windows: a window's messages are handed to the channel together and their
    confirms gathered within ``limit`` seconds; the first failure is raised once every
    confirm of its window has come."""
    with _translated("publish"):
        for start in range(0, len(items), window):
            async with asyncio.timeout(limit):
                underlay = await channel.get_underlay_channel()
                chunk = items[start : start + window]
                confirms = await asyncio.gather(
                    *(
                        underlay.basic_publish(
                            item.body,
                            exchange=item.exchange,
                            routing_key=item.routing_key,
                            properties=item.properties,
                        )
                        for item in chunk
                    ),
                    return_exceptions=True,
                )
            for confirm in confirms:
                if isinstance(confirm, BaseException):
                    raise confirm
                if not isinstance(confirm, Basic.Ack):
                    raise BackendUnavailableError(f"RabbitMQ refused a message: {confirm!r}")
