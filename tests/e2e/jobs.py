"""Job handlers for the end-to-end tests (loaded with ``rota dev --jobs``)."""

from __future__ import annotations

import asyncio

import rota


@rota.job("e2e.tick")
async def tick(ctx: rota.JobContext) -> str:
    ctx.log.info("tick %s attempt %d", ctx.scheduled_for.isoformat(), ctx.attempt)
    return "tick"


@rota.job("e2e.slow")
async def slow(ctx: rota.JobContext) -> str:
    ctx.log.info("slow job started")
    await asyncio.sleep(3)
    return "slow done"


class Steps(rota.JobData):
    seconds: float = 8
    """How long the job runs: one numbered log line per step."""
    step: float = 1.0


@rota.job("e2e.long")
async def long(ctx: rota.JobContext, data: Steps) -> int:
    """A long job that logs ``line 1`` … ``line N`` as it goes."""
    steps = max(1, round(data.seconds / data.step))
    for n in range(1, steps + 1):
        await asyncio.sleep(data.step)
        ctx.log.info("line %d of %d (attempt %d)", n, steps, ctx.attempt)
    return steps


@rota.job("e2e.quick")
async def quick(ctx: rota.JobContext) -> str:
    await asyncio.sleep(0.2)
    ctx.log.info("quick %s", ctx.occurrence_id)
    return "quick"
