"""OpenTelemetry tracing (the ``otel`` extra): off by default, on with the standard ``OTEL_*``
variables.

One trace per occurrence: the span that created it — a scheduled fire (``rota.fire``) or a
manual trigger (``rota.trigger``, a child of the API request's span when the app is
instrumented) — gives its W3C ``traceparent``, stored on the occurrence and sent in the
``traceparent`` header of every attempt's job message; the worker runs the handler inside a
``rota.run`` span that continues it. Retries and dead-letter retries send the same
``traceparent``, so every attempt joins the trace of its fire.

The entry points build a :class:`Tracing` with :func:`tracing_from_env`; tests build one on
their own tracer provider. With tracing off every method is a cheap no-op.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from rota.core.models import JobMessage, Occurrence, OccurrenceStatus, StatusRecord
from rota.core.planning import FirePlan
from rota.observability.logs import bind_context

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger(__name__)

_FAILED = frozenset({OccurrenceStatus.FAILED, OccurrenceStatus.TIMED_OUT})

SpanEnd = Callable[[StatusRecord], None]
"""Called with the attempt's final report, to record its outcome on the span."""


class Tracing:
    """Spans for fires, triggers and handler runs; ``tracer=None``: off."""

    def __init__(self, tracer: Tracer | None = None, provider: TracerProvider | None = None):
        self._tracer = tracer
        self._provider = provider
        if tracer is not None:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )

            self._propagator: Any = TraceContextTextMapPropagator()

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def shutdown(self) -> None:
        """Flush and stop the exporter (entry points, at exit)."""
        if self._provider is not None:
            self._provider.shutdown()

    # --- where traces start ----------------------------------------------------------------

    def stamp_plan(self, plan: FirePlan) -> FirePlan:
        """A ``rota.fire`` span for each occurrence the plan creates, its context stored on
        the occurrence."""
        if self._tracer is None or not plan.occurrences:
            return plan
        stamped = tuple(self._stamp(o, "rota.fire") for o in plan.occurrences)
        return msgspec.structs.replace(plan, occurrences=stamped)

    def stamp_trigger(self, occurrence: Occurrence) -> Occurrence:
        """A ``rota.trigger`` span (child of the current span, e.g. the API request's)."""
        if self._tracer is None:
            return occurrence
        return self._stamp(occurrence, "rota.trigger")

    def _stamp(self, occurrence: Occurrence, name: str) -> Occurrence:
        assert self._tracer is not None
        from opentelemetry.trace import SpanKind

        with self._tracer.start_as_current_span(
            f"{name} {occurrence.job_type}",
            kind=SpanKind.PRODUCER,
            attributes=_attributes(occurrence.id, occurrence.job_id, occurrence.job_type, 1)
            | {
                "rota.scheduled_for": occurrence.scheduled_for.isoformat(),
                "rota.status": occurrence.status.name,
            },
        ):
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
        return msgspec.structs.replace(occurrence, traceparent=carrier.get("traceparent"))

    # --- the worker ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def run_span(self, message: JobMessage) -> Iterator[SpanEnd]:
        """The ``rota.run`` span of one attempt, current while the handler runs (its own
        spans and log lines join the trace); yields a function taking the final report."""
        if self._tracer is None:
            yield _ignore
            return
        from opentelemetry.trace import SpanKind

        parent = None
        if message.traceparent:
            parent = self._propagator.extract({"traceparent": message.traceparent})
        attributes = _attributes(
            message.occurrence_id, message.job_id, message.job_type, message.attempt
        )
        with self._tracer.start_as_current_span(
            f"rota.run {message.job_type}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=True,
        ) as span:
            context = span.get_span_context()
            bind_context(trace_id=f"{context.trace_id:032x}", span_id=f"{context.span_id:016x}")
            yield lambda record: _end(span, record)


def _ignore(record: StatusRecord) -> None:
    del record


def _end(span: Span, record: StatusRecord) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("rota.outcome", record.status.name)
    if record.status in _FAILED:
        span.set_status(Status(StatusCode.ERROR, (record.exception or "")[:200]))
        if record.retry_at is not None:
            span.set_attribute("rota.retry_at", record.retry_at.isoformat())


def _attributes(
    occurrence_id: object, job_id: object, job_type: str, attempt: int
) -> dict[str, str | int]:
    return {
        "rota.occurrence_id": str(occurrence_id),
        "rota.job_id": str(job_id),
        "rota.job_type": job_type,
        "rota.attempt": attempt,
        "messaging.system": "rabbitmq",
    }


def tracing_from_env(service_name: str, environ: Mapping[str, str] | None = None) -> Tracing:
    """Tracing as the standard ``OTEL_*`` variables ask: on when ``OTEL_TRACES_EXPORTER``
    names an exporter (``otlp``, ``console``) or an OTLP endpoint is set, and
    ``OTEL_SDK_DISABLED`` is not ``true``. ``OTEL_SERVICE_NAME`` (default ``service_name``),
    ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_*`` are read by the SDK. Without the
    ``otel`` extra installed, asking for tracing logs a warning and leaves it off."""
    env = os.environ if environ is None else environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or exporter == "none":
        return Tracing()
    if not exporter and not endpoint:
        return Tracing()
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning("OTEL_* asks for tracing; install the otel extra: pip install 'rota[otel]'")
        return Tracing()
    named = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(named))
    for name in [n.strip() for n in (exporter or "otlp").split(",") if n.strip()]:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            log.warning("unknown OTEL_TRACES_EXPORTER %r ignored (otlp, console)", name)
    trace.set_tracer_provider(provider)  # the handlers' own spans use the same provider
    return Tracing(provider.get_tracer("rota"), provider)
