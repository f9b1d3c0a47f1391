"""Job handlers for the failed-occurrence API tests."""

from __future__ import annotations

import asyncio

import rota


@rota.job("it.flaky", max_retries=0)
async def flaky(ctx: rota.JobContext) -> str:
    """Fails its first attempt (no retries left), succeeds on any later one."""
    if ctx.attempt == 1:
        raise ValueError("the first attempt always fails")
    return f"attempt {ctx.attempt} worked"


@rota.job("it.until_cancelled")
async def slow(ctx: rota.JobContext) -> None:
    """Runs until it is cancelled (at most a minute)."""
    for _ in range(600):
        await ctx.check_cancelled()
        await asyncio.sleep(0.1)
