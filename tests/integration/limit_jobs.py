"""Job handlers of the embedded limits test (``test_limits_embedded.py``): each run notes its
start and end (monotonic seconds) and its customer in :data:`spans`."""

from __future__ import annotations

import asyncio
import time

import rota

spans: list[tuple[float, float, str]] = []


class Span(rota.JobData):
    seconds: float = 0.1
    customer: str = "-"


async def _run(data: Span) -> None:
    start = time.monotonic()
    await asyncio.sleep(data.seconds)
    spans.append((start, time.monotonic(), data.customer))


@rota.job("lim.span")
async def span(ctx: rota.JobContext, data: Span) -> None:
    await _run(data)


@rota.job("lim.customer")
async def customer(ctx: rota.JobContext, data: Span) -> None:
    await _run(data)
