"""The job of the console test: a schedule in code, every second."""

from __future__ import annotations

import rota


@rota.job("console.tick", cron="* * * * * *")
async def tick(ctx: rota.JobContext) -> str:
    return "tick"
