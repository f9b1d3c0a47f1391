"""Job types of the data schema and job type tests (``test_job_types.py``): one whose data
has a schema, run by the test's first worker."""

from __future__ import annotations

import rota


class Report(rota.JobData):
    kind: str
    copies: int = 1


@rota.job("schema.report")
async def report(ctx: rota.JobContext, data: Report) -> str:
    return f"{data.copies} {data.kind}"
