"""Job handlers for the end-to-end tests (loaded with ``rota dev --jobs``)."""

from __future__ import annotations

import asyncio
import os

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


# --- fault tests (test_faults.py) -------------------------------------------------------------


def _note_run(path: str, ctx: rota.JobContext) -> None:
    """Append ``{occurrence id} {attempt} {pid}`` to ``path``: one line per handler run, in
    every process (an ``O_APPEND`` write this short is atomic), the ground truth of how often a
    handler really ran."""
    line = f"{ctx.occurrence_id} {ctx.attempt} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class RunLog(rota.JobData):
    path: str
    """The file every run of the handler is noted in."""
    seconds: float = 0.0
    """How long the handler runs after noting its run."""


@rota.job("e2e.record")
async def record(ctx: rota.JobContext, data: RunLog) -> str:
    _note_run(data.path, ctx)
    if data.seconds:
        await asyncio.sleep(data.seconds)
    return "recorded"


class Suicide(rota.JobData):
    path: str
    """The file every run of the handler is noted in."""
    after: float = 1.5
    """Seconds the first attempt runs before it kills its process (its Running report and
    the message's acknowledgement go out meanwhile, every 20 ms)."""


@rota.job("e2e.suicide")
async def suicide(ctx: rota.JobContext, data: Suicide) -> str:
    """Kills its own worker process in its first attempt; any later attempt completes."""
    _note_run(data.path, ctx)
    if ctx.attempt == 1:
        ctx.log.info("attempt 1: this process dies in %.1f s", data.after)
        await asyncio.sleep(data.after)
        os._exit(1)
    ctx.log.info("attempt %d: survived", ctx.attempt)
    return "survived"


# --- the chaos soak (soak.py) -------------------------------------------------------------------


def _note(path: str, event: str, ctx: rota.JobContext) -> None:
    """Append ``{event} {occurrence id} {attempt} {pid}`` to ``path`` (one atomic ``O_APPEND``
    write): ``start`` when the handler begins, then ``end`` (it returned), ``fail`` (it raised
    on purpose) or ``cancel`` (it was cancelled). A start with none of these from the same
    process was cut short (its process was killed)."""
    line = f"{event} {ctx.occurrence_id} {ctx.attempt} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class SoakWork(rota.JobData):
    path: str
    """The file the handler notes its start and its end in."""
    kind: str = "burst"
    """What the soak made it for (cron, burst, retry, long, cancel, probe)."""
    seconds: float = 0.0
    """How long it runs."""
    fail_attempts: int = 0
    """Attempts up to this one fail (after running ``seconds``); later ones complete."""


@rota.job("e2e.soak")
async def soak(ctx: rota.JobContext, data: SoakWork) -> str:
    _note(data.path, "start", ctx)
    try:
        if data.seconds:
            await asyncio.sleep(data.seconds)
    except asyncio.CancelledError:
        _note(data.path, "cancel", ctx)
        raise
    if ctx.attempt <= data.fail_attempts:
        _note(data.path, "fail", ctx)
        raise RuntimeError(f"{data.kind}: attempt {ctx.attempt} fails on purpose")
    _note(data.path, "end", ctx)
    return data.kind


# --- cluster-wide limits (test_limits_distributed.py) ---------------------------------------


class Span(rota.JobData):
    path: str
    """The file each run notes ``{start} {end} {customer} {pid}`` in (epoch seconds)."""
    seconds: float = 0.2
    customer: str = "-"


async def _span(ctx: rota.JobContext, data: Span) -> None:
    import time

    start = time.time()
    await asyncio.sleep(data.seconds)
    line = f"{start:.6f} {time.time():.6f} {data.customer} {os.getpid()}\n".encode()
    fd = os.open(data.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@rota.job("e2e.limited")
async def limited(ctx: rota.JobContext, data: Span) -> None:
    await _span(ctx, data)


@rota.job("e2e.per-customer")
async def per_customer(ctx: rota.JobContext, data: Span) -> None:
    await _span(ctx, data)


@rota.job("e2e.rated")
async def rated(ctx: rota.JobContext, data: Span) -> None:
    await _span(ctx, data)
