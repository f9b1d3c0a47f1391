"""Tracing: off unless the OTEL_* variables ask; the traceparent travels in the job message
headers."""

from __future__ import annotations

from datetime import UTC, datetime

from rota.core.ids import new_id
from rota.core.models import JobMessage
from rota.core.wire import decode_job_message, encode_job_message, job_message_headers
from rota.observability.tracing import tracing_from_env

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def message(**fields: object) -> JobMessage:
    values: dict[str, object] = {
        "occurrence_id": new_id(),
        "job_id": new_id(),
        "job_type": "report",
        "job_data": None,
        "scheduled_for": datetime(2030, 1, 1, tzinfo=UTC),
        "timestamp": datetime(2030, 1, 1, tzinfo=UTC),
    }
    values.update(fields)
    return JobMessage(**values)  # type: ignore[arg-type]


def test_traceparent_travels_in_the_headers() -> None:
    sent = message(traceparent=TRACEPARENT)
    headers = job_message_headers(sent)
    assert headers["traceparent"] == TRACEPARENT
    received = decode_job_message(encode_job_message(sent), headers)
    assert received.traceparent == TRACEPARENT
    assert b"traceparent" not in encode_job_message(sent)  # a header, not body


def test_no_traceparent_no_header() -> None:
    sent = message()
    assert "traceparent" not in job_message_headers(sent)
    assert (
        decode_job_message(encode_job_message(sent), job_message_headers(sent)).traceparent is None
    )
    # a header read back as bytes (some AMQP clients) is text again
    raw = {"traceparent": TRACEPARENT.encode()}
    assert decode_job_message(encode_job_message(sent), raw).traceparent == TRACEPARENT


def test_tracing_is_off_by_default_and_when_disabled() -> None:
    assert not tracing_from_env("rota-test", {}).enabled
    assert not tracing_from_env("rota-test", {"OTEL_TRACES_EXPORTER": "none"}).enabled
    assert not tracing_from_env(
        "rota-test", {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}
    ).enabled
    assert not tracing_from_env("rota-test", {"OTEL_SERVICE_NAME": "x"}).enabled


def test_tracing_is_on_with_an_exporter() -> None:
    tracing = tracing_from_env("rota-test", {"OTEL_TRACES_EXPORTER": "console"})
    try:
        assert tracing.enabled
    finally:
        tracing.shutdown()
