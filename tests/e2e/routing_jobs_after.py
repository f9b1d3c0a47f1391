"""Group ``aud`` after the deploy: ``route.moved`` went to group ``prio``."""

from __future__ import annotations

import rota


@rota.job("route.stay")
async def stay(ctx: rota.JobContext) -> str:
    return ctx.instance_id
