"""A job type no worker declares until the test starts a second worker with this module
(``test_job_types.py``)."""

from __future__ import annotations

import rota


@rota.job("schema.late")
async def late(ctx: rota.JobContext) -> str:
    return "late"
