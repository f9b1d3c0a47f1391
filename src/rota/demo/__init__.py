"""Demo job handlers and sample jobs for ``rota dev``: something to look at in five minutes."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import timedelta

import rota
from rota.core.models import JobSource
from rota.services.jobs import JobService


class ReportData(rota.JobData):
    """Input of the demo report job."""

    kind: str = "sales"
    fmt: str = "pdf"


@rota.job("demo.heartbeat")
async def heartbeat(ctx: rota.JobContext) -> str:
    """Every few seconds: proves the scheduler is alive."""
    ctx.log.info("tick for %s", ctx.scheduled_for.isoformat())
    return "alive"


@rota.job("demo.report", timeout=60)
async def report(ctx: rota.JobContext, data: ReportData) -> dict[str, object]:
    """A job with typed data, logs and a result."""
    ctx.log.info("building %s report as %s", data.kind, data.fmt)
    for step in range(3):
        await asyncio.sleep(0.2)
        await ctx.check_cancelled()
        ctx.log.info("step %d of 3 done", step + 1)
    return {"kind": data.kind, "format": data.fmt, "rows": random.randint(100, 999)}


@rota.job("demo.flaky", max_retries=2, retry_delay=2)
def flaky(ctx: rota.JobContext) -> str:
    """A plain (sync) function that fails now and then, to show failures and retries."""
    time.sleep(0.1)
    if random.random() < 0.3:
        raise RuntimeError("the flaky demo job failed, as it sometimes does")
    ctx.log.info("succeeded on attempt %d", ctx.attempt)
    return "ok"


SAMPLE_JOBS: list[dict[str, object]] = [
    {
        "display_name": "Heartbeat every 5 seconds",
        "job_type": "demo.heartbeat",
        "cron_expression": "*/5 * * * * *",
        "tags": ("demo",),
    },
    {
        "display_name": "Sales report every minute",
        "job_type": "demo.report",
        "cron_expression": "* * * * *",
        "job_data": {"kind": "sales", "fmt": "pdf"},
        "tags": ("demo", "reports"),
    },
    {
        "display_name": "Flaky job every 30 seconds",
        "job_type": "demo.flaky",
        "cron_expression": "*/30 * * * * *",
        "tags": ("demo",),
    },
]


async def seed(jobs: JobService) -> int:
    """Create the sample jobs unless the store already has jobs (code-declared schedules
    aside). Returns how many."""
    existing = await jobs.list_jobs(limit=100)
    if any(job.source is JobSource.API for job in existing.items):
        return 0
    specs = [dict(spec) for spec in SAMPLE_JOBS]
    specs.append(
        {
            "display_name": "One-time report in 20 seconds",
            "job_type": "demo.report",
            "execute_at": jobs.now() + timedelta(seconds=20),
            "job_data": {"kind": "inventory", "fmt": "csv"},
            "tags": ("demo", "one-time"),
        }
    )
    await jobs.create_jobs(specs)
    return len(specs)
