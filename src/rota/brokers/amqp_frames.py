"""AMQP 0-9-1 frames for ``basic.publish``, encoded directly (the publisher's hot path).

A job costs one publish; encoding its three frames through pamqp's generic marshalling takes
more CPU than everything else the dispatcher does for it. The frames written here are the
ones pamqp writes (``tests/unit/test_amqp_frames.py`` compares them byte for byte, and decodes
them with pamqp); only the basic properties Rota sets are supported.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

__all__ = ["encode_properties", "encode_publish"]

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
