"""Job handlers for the embedded reliability tests; ``started`` and ``saw_cancel`` tell the
test what the handlers did."""

from __future__ import annotations

import asyncio
import threading

import rota

started: dict[str, threading.Event] = {}
saw_cancel: set[str] = set()


def _started(ctx: rota.JobContext) -> None:
    started.setdefault(str(ctx.occurrence_id), threading.Event()).set()


@rota.job("rel.async_block")
async def async_block(ctx: rota.JobContext) -> str:
    _started(ctx)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        saw_cancel.add(str(ctx.occurrence_id))
        raise
    return "not cancelled"


@rota.job("rel.sync_block")
def sync_block(ctx: rota.JobContext) -> str:
    _started(ctx)
    if ctx.cancelled.wait(30):
        saw_cancel.add(str(ctx.occurrence_id))
        ctx.raise_if_cancelled()
    return "not cancelled"


@rota.job("rel.fail")
async def always_fails(ctx: rota.JobContext) -> None:
    raise RuntimeError("upstream down")


@rota.job("rel.short")
async def short(ctx: rota.JobContext) -> str:
    await asyncio.sleep(0.2)
    return "done"
