"""Job handlers for the operations tests (metrics, logs, silence)."""

from __future__ import annotations

import logging

import rota

log = logging.getLogger("tests.ops_jobs")


@rota.job("ops.fast")
async def fast(ctx: rota.JobContext) -> str:
    log.info("ops.fast running")
    return "fast"


@rota.job("ops.broken", max_retries=1, retry_delay=0.1)
async def broken(ctx: rota.JobContext) -> None:
    raise RuntimeError(f"broken on attempt {ctx.attempt}")


@rota.job("ops.traced")
async def traced(ctx: rota.JobContext) -> str:
    """Returns the trace id of the span it runs in (tracing tests)."""
    from opentelemetry import trace

    return format(trace.get_current_span().get_span_context().trace_id, "032x")


@rota.job("ops.traced_sync")
def traced_sync(ctx: rota.JobContext) -> str:
    from opentelemetry import trace

    return format(trace.get_current_span().get_span_context().trace_id, "032x")
