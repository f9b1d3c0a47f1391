"""Job handlers for the CLI's end-to-end tests (``tests/e2e/test_cli*.py``)."""

from __future__ import annotations

import asyncio

import rota


@rota.job("cli.ok")
async def ok(ctx: rota.JobContext) -> str:
    ctx.log.info("cli ok attempt %d", ctx.attempt)
    return "ok"


@rota.job("cli.fail")
async def fail(ctx: rota.JobContext) -> None:
    ctx.log.info("cli fail attempt %d", ctx.attempt)
    raise rota.PermanentError("cli.fail fails on purpose")


class Steps(rota.JobData):
    lines: int = 3
    step: float = 0.3


@rota.job("cli.steps")
async def steps(ctx: rota.JobContext, data: Steps) -> int:
    """``step 1`` … ``step N``, one every ``step`` seconds (long ones get cancelled)."""
    for n in range(1, data.lines + 1):
        ctx.log.info("step %d of %d", n, data.lines)
        await asyncio.sleep(data.step)
    return data.lines
