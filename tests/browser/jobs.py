"""Job handlers the browser tests' server runs."""

from __future__ import annotations

import asyncio

import rota


@rota.job("browser.tick")
async def tick(ctx: rota.JobContext) -> str:
    """Quick: one log line and a result."""
    ctx.log.info("tick %s", ctx.scheduled_for.isoformat())
    return "ticked"


@rota.job("browser.slow", timeout=60)
async def slow(ctx: rota.JobContext) -> str:
    """Writes a log line every 0.3 s for up to 30 s; stops when cancelled."""
    for step in range(100):
        ctx.log.info("step %d", step + 1)
        await asyncio.sleep(0.3)
        await ctx.check_cancelled()
    return "done"


class Copies(rota.JobData):
    """Typed data: its JSON Schema is what the job form checks against."""

    title: str
    copies: int = 1


@rota.job("browser.typed")
async def typed(ctx: rota.JobContext, data: Copies) -> str:
    return f"{data.copies} x {data.title}"


@rota.job("browser.fail", max_retries=0)
async def fail(ctx: rota.JobContext) -> str:
    """Fails for good at once: a failed-execution record."""
    raise rota.PermanentError("the browser test's job fails on purpose")


@rota.job("browser.limited", timeout=60)
async def limited(ctx: rota.JobContext) -> str:
    """Runs until cancelled (at most 30 s): the limits test holds its slot with it."""
    for _ in range(100):
        await asyncio.sleep(0.3)
        await ctx.check_cancelled()
    return "done"
