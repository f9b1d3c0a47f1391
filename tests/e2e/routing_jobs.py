"""The job types of the routing test's deploy (``test_routing_distributed.py``): group ``aud``
runs ``route.moved`` and ``route.stay`` before the deploy (this module) and ``route.stay`` only
after it (``routing_jobs_after.py``); group ``prio`` runs ``route.moved``
(``routing_jobs_prio.py``)."""

from __future__ import annotations

import rota


@rota.job("route.moved")
async def moved(ctx: rota.JobContext) -> str:
    return ctx.instance_id


@rota.job("route.stay")
async def stay(ctx: rota.JobContext) -> str:
    return ctx.instance_id
