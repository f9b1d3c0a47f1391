"""Job handlers for the typed-enqueue tests (``tests/integration/test_client_enqueue.py``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import rota


class Report(rota.JobData):
    kind: str
    customer: UUID
    due: datetime


class Summary(rota.JobData):
    kind: str
    customer: UUID
    rows: int


@rota.job("it.report", max_retries=0)
async def generate_report(ctx: rota.JobContext, data: Report) -> Summary:
    """Echoes its typed data back as a typed result."""
    ctx.log.info("building %s for %s", data.kind, data.customer)
    return Summary(kind=data.kind, customer=data.customer, rows=42)


@rota.job("it.explode", max_retries=0)
def explode(ctx: rota.JobContext, data: dict[str, str]) -> int:
    """Always fails, with the data's message."""
    raise ValueError(data["message"])


@rota.job("it.ping")
def ping(ctx: rota.JobContext) -> str:
    return "pong"


@rota.job("it.second-time", max_retries=1, retry_delay=0)
def second_time(ctx: rota.JobContext) -> int:
    """Fails its first attempt, returns the attempt number on the next."""
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return ctx.attempt
