"""Job handlers with schedules declared in code, for the embedded runtime test."""

from __future__ import annotations

import rota


@rota.job("it.declared", cron="*/1 * * * * *", priority=3)
async def declared(ctx: rota.JobContext) -> str:
    return "declared"


@rota.job("it.plain")
async def plain(ctx: rota.JobContext) -> str:
    return "plain"
