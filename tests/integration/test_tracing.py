"""OpenTelemetry: one trace from the scheduled fire or the manual trigger, through the job
message (``traceparent``), to the handler's span; retries join the same trace. Embedded
runtime, spans kept by an in-memory exporter."""

from __future__ import annotations

from uuid import UUID

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from rota.app.runtime import Runtime
from rota.core.models import Occurrence, OccurrenceStatus
from rota.core.records import OccurrenceQuery
from rota.observability.tracing import Tracing
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory, provider: TracerProvider) -> Runtime:
    tracing = Tracing(provider.get_tracer("rota-test"), provider)
    overrides = {"scheduler.sweeper_interval_seconds": 0.2}
    return await runtime_factory(
        overrides, ["tests.integration.ops_jobs"], tracing=tracing, grace=1
    )


async def final(rt: Runtime, job_id: UUID, status: S) -> Occurrence:
    async def done() -> bool:
        page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id))
        return any(o.status is status for o in page.items)

    await eventually(done, 15, f"an occurrence {status.name}")
    page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id))
    return next(o for o in page.items if o.status is status)


def spans(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def trace_hex(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


async def test_a_scheduled_fire_and_its_handler_share_one_trace(
    runtime: Runtime, exporter: InMemorySpanExporter
) -> None:
    job = await runtime.jobs.create_job(
        {"job_type": "ops.traced", "execute_at": runtime.jobs.now()}
    )
    occ = await final(runtime, job.id, S.COMPLETED)

    async def run_span_ended() -> bool:
        return bool(spans(exporter, "rota.run ops.traced"))

    await eventually(run_span_ended, 5, "the handler's span")
    [fire] = spans(exporter, "rota.fire ops.traced")
    [run] = spans(exporter, "rota.run ops.traced")
    assert fire.kind is SpanKind.PRODUCER
    assert run.kind is SpanKind.CONSUMER
    assert run.parent is not None
    assert fire.context is not None
    assert run.parent.span_id == fire.context.span_id
    assert trace_hex(run) == trace_hex(fire)
    assert occ.traceparent is not None
    assert trace_hex(fire) in occ.traceparent
    assert occ.result == trace_hex(fire)  # the handler ran inside the span
    assert run.attributes is not None
    assert run.attributes["rota.occurrence_id"] == str(occ.id)
    assert run.attributes["rota.attempt"] == 1
    assert run.attributes["rota.outcome"] == "COMPLETED"


async def test_retries_join_the_trace_of_their_fire(
    runtime: Runtime, exporter: InMemorySpanExporter
) -> None:
    job = await runtime.jobs.create_job(
        {"job_type": "ops.broken", "execute_at": runtime.jobs.now()}
    )
    await final(runtime, job.id, S.FAILED)

    async def two_runs() -> bool:
        return len(spans(exporter, "rota.run ops.broken")) == 2

    await eventually(two_runs, 5, "two attempts' spans")
    [fire] = spans(exporter, "rota.fire ops.broken")
    runs = sorted(spans(exporter, "rota.run ops.broken"), key=lambda s: s.start_time or 0)
    assert [r.attributes["rota.attempt"] for r in runs if r.attributes] == [1, 2]
    assert {trace_hex(r) for r in runs} == {trace_hex(fire)}
    assert all(r.status.status_code is StatusCode.ERROR for r in runs)
    assert fire.context is not None
    assert [r.parent.span_id if r.parent else None for r in runs] == [fire.context.span_id] * 2


async def test_a_manual_trigger_continues_the_callers_trace(
    runtime: Runtime, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    job = await runtime.jobs.create_job(
        {"job_type": "ops.traced_sync", "cron_expression": "0 0 1 1 *"}
    )
    tracer = provider.get_tracer("api")
    with tracer.start_as_current_span("POST /api/v1/jobs/job/trigger") as request:
        occurrence = await runtime.jobs.trigger(job.id, reason="traced")
    occ = await final(runtime, job.id, S.COMPLETED)
    assert occ.id == occurrence.id
    request_trace = format(request.get_span_context().trace_id, "032x")

    async def run_span_ended() -> bool:
        return bool(spans(exporter, "rota.run ops.traced_sync"))

    await eventually(run_span_ended, 5, "the handler's span")
    [trigger] = spans(exporter, "rota.trigger ops.traced_sync")
    [run] = spans(exporter, "rota.run ops.traced_sync")
    assert trigger.parent is not None
    assert trigger.parent.span_id == request.get_span_context().span_id
    assert trace_hex(trigger) == trace_hex(run) == request_trace
    assert occ.result == request_trace  # a plain-def handler in the pool sees the span too


async def test_tracing_off_stores_no_context(runtime_factory: RuntimeFactory) -> None:
    rt = await runtime_factory(None, ["tests.integration.ops_jobs"], grace=1)
    assert not rt.tracing.enabled
    job = await rt.jobs.create_job({"job_type": "ops.fast", "execute_at": rt.jobs.now()})
    occ = await final(rt, job.id, S.COMPLETED)
    assert occ.traceparent is None
