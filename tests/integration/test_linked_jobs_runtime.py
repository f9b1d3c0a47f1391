"""A job created with upstreams joins the dependency engine at once (the whole embedded
runtime): its upstream's next run releases it, not only the engine's next sweep."""

from __future__ import annotations

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from rota.core.records import OccurrenceQuery
from tests.helpers import RuntimeFactory, eventually

ONCE_A_YEAR = {"job_type": "it.fast", "cron_expression": "0 0 1 1 *"}


async def test_a_dependent_created_with_its_upstream_runs_after_it(
    runtime_factory: RuntimeFactory,
) -> None:
    # the engine's sweep (which would find the new edge by itself) far off
    runtime: Runtime = await runtime_factory(
        {"scheduler.sweeper_interval_seconds": 300}, ["tests.integration.runtime_jobs"]
    )
    await runtime.dependencies.sweep()  # the sweep's first pass, before the dependent exists
    upstream = await runtime.jobs.create_job({**ONCE_A_YEAR, "display_name": "upstream"})
    dependent = await runtime.jobs.create_job(
        {**ONCE_A_YEAR, "display_name": "dependent"}, depends_on=[{"jobId": upstream.id}]
    )
    await runtime.jobs.trigger(upstream.id)

    async def ran() -> bool:
        page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=dependent.id))
        return any(o.status is OccurrenceStatus.COMPLETED for o in page.items)

    await eventually(ran, 10, "the dependent's run after its upstream, well before a sweep")
