"""The app's jobs. ``heartbeat`` has a schedule in code: Rota creates its job at start."""

from __future__ import annotations

import rota


@rota.job("example.heartbeat", cron="*/2 * * * * *")  # every 2 seconds
async def heartbeat(ctx: rota.JobContext) -> str:
    ctx.log.info("the app is alive at %s", ctx.scheduled_for.isoformat())
    return "alive"


class Report(rota.JobData):
    kind: str
    pages: int = 1


@rota.job("example.report", max_retries=2, timeout=60)
async def report(ctx: rota.JobContext, data: Report) -> str:
    for page in range(data.pages):
        ctx.log.info("page %d of the %s report", page + 1, data.kind)
        await ctx.check_cancelled()
    return f"{data.kind} report, {data.pages} pages"
