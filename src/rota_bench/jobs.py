"""The benchmarks' job: what the bench's runtimes and ``rota worker`` processes load
(``rota worker rota_bench.jobs``); it imports nothing of the benches themselves."""

from __future__ import annotations

import rota

JOBS_MODULE = __name__
"""The module a bench's runtime or worker process loads its job from."""


@rota.job("bench.noop")
async def noop(ctx: rota.JobContext) -> None:
    """The benchmark job: does nothing."""
