"""Job handlers for the reference-calls test: the reference's sample job type."""

from __future__ import annotations

import rota


@rota.job("GenerateReportJob", max_retries=0)
async def generate_report(ctx: rota.JobContext) -> str:
    ctx.log.info("Generating the report")
    return "Job GenerateReportJob completed successfully"
