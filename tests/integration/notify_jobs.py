"""Job handlers for the notification tests."""

from __future__ import annotations

import asyncio

import rota


@rota.job("it.notify.fails", max_retries=0)
async def fails(ctx: rota.JobContext) -> None:
    raise ValueError("the report server said no")


@rota.job("it.notify.slow", max_retries=0, timeout=0.3)
async def slow(ctx: rota.JobContext) -> None:
    await asyncio.sleep(10)
