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
