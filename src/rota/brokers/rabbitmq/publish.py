"""Confirmed publishing in windows, and its AMQP 0-9-1 ``basic.publish`` frames, encoded
directly (the publisher's hot path).

A job costs one publish; encoding its three frames through pamqp's generic marshalling takes
more CPU than everything else the dispatcher does for it. The frames written here are the
ones pamqp writes (``tests/unit/test_amqp_frames.py`` compares them byte for byte, and decodes
them with pamqp); only the basic properties Rota sets are supported.

Publishing: see the broker's docstring; a window of messages is written as one payload and its
confirms are gathered together (below).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from aio_pika.abc import AbstractRobustChannel
from aiormq.abc import AbstractChannel, ChannelFrame

from rota.brokers.rabbitmq.channels import _translated
from rota.brokers.rabbitmq.names import CONTENT_TYPE, MAX_PRIORITY, PERSISTENT, AmqpNames
from rota.core.errors import ConfigurationError
from rota.core.models import JobMessage
from rota.core.wire import encode_job_message, job_message_headers

__all__ = [
    "encode_properties",
    "encode_publish",
    "job_item",
    "publish_confirmed",
    "record_item",
]

_FRAME_END = b"\xce"
_METHOD, _HEADER, _BODY = 1, 2, 3
_BASIC_CLASS = 60
_PUBLISH_METHOD = 40

_frame_start = struct.Struct(">BHI").pack
_publish_start = struct.Struct(">HHH").pack
_header_start = struct.Struct(">HHQ").pack
_u16 = struct.Struct(">H").pack
_u32 = struct.Struct(">I").pack

# basic property flags (AMQP 0-9-1 §4.2.6.1 and the basic class), highest bit first
_CONTENT_TYPE = 1 << 15
_HEADERS = 1 << 13
_DELIVERY_MODE = 1 << 12
_PRIORITY = 1 << 11
_CORRELATION_ID = 1 << 10
_MESSAGE_ID = 1 << 7
_TYPE = 1 << 5

_INTEGERS = (
    (-128, 127, b"b", struct.Struct(">b").pack),
    (-32768, 32767, b"s", struct.Struct(">h").pack),
    (0, 65535, b"u", struct.Struct(">H").pack),
    (-(2**31), 2**31 - 1, b"I", struct.Struct(">i").pack),
    (0, 2**32 - 1, b"i", struct.Struct(">I").pack),
    (-(2**63), 2**63 - 1, b"l", struct.Struct(">q").pack),
)


def _short_string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise ValueError(f"AMQP short string longer than 255 bytes: {text[:40]!r}…")
    return bytes((len(data),)) + data


def _table_value(value: str | int) -> bytes:
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        for low, high, kind, pack in _INTEGERS:
            if low <= value <= high:
                return kind + pack(value)
        raise ValueError(f"integer out of range for an AMQP table: {value}")
    data = value.encode()
    return b"S" + _u32(len(data)) + data


def _table(values: Mapping[str, str | int]) -> bytes:
    """A field table of strings and integers, keys sorted (as pamqp writes them)."""
    body = b"".join(_short_string(key) + _table_value(values[key]) for key in sorted(values))
    return _u32(len(body)) + body


def encode_properties(
    *,
    content_type: str | None = None,
    headers: Mapping[str, str | int] | None = None,
    delivery_mode: int | None = None,
    priority: int | None = None,
    correlation_id: str | None = None,
    message_id: str | None = None,
    message_type: str | None = None,
) -> bytes:
    """The property flags and list of a content header (a property that is ``None`` or an
    empty string is left out, as pamqp does)."""
    flags = 0
    parts: list[bytes] = []
    if content_type:
        flags |= _CONTENT_TYPE
        parts.append(_short_string(content_type))
    if headers is not None:
        flags |= _HEADERS
        parts.append(_table(headers))
    if delivery_mode is not None:
        flags |= _DELIVERY_MODE
        parts.append(bytes((delivery_mode,)))
    if priority is not None:
        flags |= _PRIORITY
        parts.append(bytes((priority,)))
    if correlation_id:
        flags |= _CORRELATION_ID
        parts.append(_short_string(correlation_id))
    if message_id:
        flags |= _MESSAGE_ID
        parts.append(_short_string(message_id))
    if message_type:
        flags |= _TYPE
        parts.append(_short_string(message_type))
    return _u16(flags) + b"".join(parts)


def encode_publish(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes,
    properties: bytes,
    max_body_frame: int,
) -> bytes:
    """The method, content header and body frames of one ``basic.publish`` (not mandatory,
    not immediate); the body is split into frames carrying at most ``max_body_frame`` bytes
    (aiormq's ``max_content_size``: the connection's ``frame_max`` less the frame overhead)."""
    method = (
        _publish_start(_BASIC_CLASS, _PUBLISH_METHOD, 0)
        + _short_string(exchange)
        + _short_string(routing_key)
        + b"\x00"
    )
    header = _header_start(_BASIC_CLASS, 0, len(body)) + properties
    out = [
        _frame_start(_METHOD, channel, len(method)),
        method,
        _FRAME_END,
        _frame_start(_HEADER, channel, len(header)),
        header,
        _FRAME_END,
    ]
    for start in range(0, len(body), max_body_frame):
        chunk = body[start : start + max_body_frame]
        out += (_frame_start(_BODY, channel, len(chunk)), chunk, _FRAME_END)
    return b"".join(out)


# --- what is published ---------------------------------------------------------------------

_Published = tuple[str, str, bytes, bytes]
"""``(exchange, routing key, body, encoded basic properties)``."""

_RECORD_PROPERTIES = encode_properties(content_type=CONTENT_TYPE, delivery_mode=PERSISTENT)


def job_item(names: AmqpNames, message: JobMessage) -> _Published:
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
    if not message.worker_id:
        raise ValueError(f"job message {occurrence_id} names no worker group to send it to")
    # The default exchange: the routing key is the group's queue, which receives it alone.
    return "", names.job_queue(message.worker_id), encode_job_message(message), properties


def record_item(exchange: str, routing_key: str, body: bytes) -> _Published:
    return exchange, routing_key, body, _RECORD_PROPERTIES


async def publish_confirmed(
    channel: AbstractRobustChannel, items: Sequence[_Published], window: int, limit: float
) -> None:
    """Publish in windows; each window's confirms are gathered within ``limit`` seconds."""
    with _translated("publish"):
        for start in range(0, len(items), window):
            async with asyncio.timeout(limit):
                underlay = await channel.get_underlay_channel()
                chunk = items[start : start + window]
                await _confirmed(await _write_window(underlay, chunk))


# aiormq's ``basic_publish`` costs about 200 µs of Python per message (a lock, a timeout scope,
# pamqp's generic marshalling, a queue put and one socket write each). A window of messages is
# written here as one payload: under the channel's lock, each message takes the next delivery
# tag and a confirmation future registered where aiormq's confirm handling resolves it
# (``Basic.Ack``/``Nack``, ``multiple`` included); their frames, encoded by
# ``encode_publish`` above, go to the connection's writer as one ``ChannelFrame``. This
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
