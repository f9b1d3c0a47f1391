"""The directly encoded publish frames are the ones pamqp writes, and pamqp reads them back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from rota.brokers.rabbitmq.publish import encode_properties, encode_publish

short_text = st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255)
exchange_names = st.text("abcXYZ019-_.:", max_size=40)  # what AMQP allows in exchange names
table_values = st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=60)
tables = st.dictionaries(st.text(min_size=1, max_size=20), table_values, max_size=4)


def _pamqp(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes,
    props: dict[str, Any],
    max_body: int,
) -> bytes:
    parts = [
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel),
        frame.marshal(
            ContentHeader(body_size=len(body), properties=commands.Basic.Properties(**props)),
            channel,
        ),
    ]
    parts += [
        frame.marshal(ContentBody(body[i : i + max_body]), channel)
        for i in range(0, len(body), max_body)
    ]
    return b"".join(parts)


@given(
    channel=st.integers(1, 2047),
    exchange=exchange_names,
    routing_key=short_text,
    body=st.binary(max_size=300),
    max_body=st.integers(16, 200),
    content_type=st.none() | short_text,
    headers=st.none() | tables,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | short_text,
    message_id=st.none() | short_text,
    message_type=st.none() | short_text,
)
def test_publish_frames_are_pamqp_s(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes,
    max_body: int,
    content_type: str | None,
    headers: dict[str, Any] | None,
    delivery_mode: int | None,
    priority: int | None,
    correlation_id: str | None,
    message_id: str | None,
    message_type: str | None,
) -> None:
    props = {
        "content_type": content_type,
        "headers": headers,
        "delivery_mode": delivery_mode,
        "priority": priority,
        "correlation_id": correlation_id,
        "message_id": message_id,
        "message_type": message_type,
    }
    encoded = encode_publish(
        channel, exchange, routing_key, body, encode_properties(**props), max_body
    )
    assert encoded == _pamqp(channel, exchange, routing_key, body, props, max_body)

    # and pamqp reads it back
    offset, frames = 0, []
    while offset < len(encoded):
        used, number, value = frame.unmarshal(encoded[offset:])
        assert number == channel
        frames.append(value)
        offset += used
    publish, header, *bodies = frames
    assert isinstance(publish, commands.Basic.Publish)
    assert (publish.exchange, publish.routing_key) == (exchange, routing_key)
    assert isinstance(header, ContentHeader)
    assert header.body_size == len(body)
    assert header.properties.priority == priority
    assert header.properties.message_id == (message_id or None)  # "" is not sent
    assert header.properties.headers == headers
    assert b"".join(b.value for b in bodies) == body


def test_a_too_long_short_string_is_refused() -> None:
    with pytest.raises(ValueError, match="255"):
        encode_properties(message_type="x" * 256)
