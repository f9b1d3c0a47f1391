"""Job handlers for the embedded retry test."""

from __future__ import annotations

import rota


@rota.job("it.flaky", max_retries=0, retry_delay=30)
async def flaky(ctx: rota.JobContext) -> str:
    """Fails its first two attempts, succeeds on the third. The job type's retry defaults (no
    retry; 30 s) are what the job's own overrides must beat."""
    ctx.log.info("attempt %d starts", ctx.attempt)
    if ctx.attempt < 3:
        raise ConnectionError(f"attempt {ctx.attempt}: upstream away")
    return f"done on attempt {ctx.attempt}"
