"""Group ``prio``: the new home of ``route.moved``."""

from __future__ import annotations

import rota


@rota.job("route.moved")
async def moved(ctx: rota.JobContext) -> str:
    return ctx.instance_id
