"""A job handler for the tests of ``rota.Rota`` inside another app."""

from __future__ import annotations

import rota


@rota.job("embedded.greet")
async def greet(ctx: rota.JobContext) -> str:
    ctx.log.info("hello from inside the app")
    return "greeted"
