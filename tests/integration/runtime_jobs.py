"""Job handlers for the in-process runtime tests."""

from __future__ import annotations

import asyncio

import rota


@rota.job("it.fast")
async def fast(ctx: rota.JobContext) -> str:
    ctx.log.info("fast ran for %s", ctx.scheduled_for.isoformat())
    return "fast"


@rota.job("it.slow")
async def slow(ctx: rota.JobContext) -> str:
    await asyncio.sleep(1.0)
    return "slow"


@rota.job("it.sync")
def sync_job(ctx: rota.JobContext) -> int:
    ctx.log.warning("sync handler on attempt %d", ctx.attempt)
    return 42


@rota.job("it.defaults", max_retries=2, timeout=5)
async def with_defaults(ctx: rota.JobContext) -> int:
    return ctx.max_retries


RAN_AHEAD: list[str] = []
"""Occurrence ids of ``it.ahead`` runs (the dispatch lead tests)."""


@rota.job("it.ahead")
async def ahead(ctx: rota.JobContext) -> None:
    RAN_AHEAD.append(str(ctx.occurrence_id))


class Word(rota.JobData):
    word: str


@rota.job("it.echo")
async def echo(ctx: rota.JobContext, data: Word) -> str:
    """Returns the word it was given (which version of the job data ran)."""
    RAN_AHEAD.append(str(ctx.occurrence_id))
    return data.word


BACKFILLED: list[tuple[str, float, float]] = []
"""``it.backfill`` runs: (fire time, start, end) by the monotonic clock (the backfill tests)."""


@rota.job("it.backfill")
async def backfilled(ctx: rota.JobContext) -> None:
    import time

    started = time.monotonic()
    await asyncio.sleep(0.05)
    BACKFILLED.append((ctx.scheduled_for.isoformat(), started, time.monotonic()))


@rota.job("it.lingers")
async def lingers(ctx: rota.JobContext) -> None:
    """Runs until cancelled (or 30 s)."""
    await asyncio.sleep(30)


@rota.job("it.two_seconds")
async def two_seconds(ctx: rota.JobContext) -> None:
    await asyncio.sleep(2.2)
