"""Code-declared schedules in the embedded runtime: the embedded worker registers its job
types at start, and the server turns the declared cron into a job that runs."""

from __future__ import annotations

from pathlib import Path

from rota.app.server import prepare
from rota.core.models import JobSource, OccurrenceStatus, Priority
from rota.core.records import OccurrenceQuery
from tests.helpers import eventually, settings_for


async def test_a_declared_cron_becomes_a_job_at_start_and_runs(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    rt = await prepare(settings, ["tests.integration.declared_jobs"])
    await rt.start()
    try:
        (job,) = await rt.store.code_jobs()  # created during start, before anything waits
        assert (job.job_type, job.source) == ("it.declared", JobSource.CODE)
        assert (job.cron_expression, job.priority) == ("*/1 * * * * *", Priority.HIGH)

        async def completed() -> bool:
            page = await rt.store.list_occurrences(
                OccurrenceQuery(job_id=job.id, statuses=(OccurrenceStatus.COMPLETED,))
            )
            return bool(page.items)

        await eventually(completed, 15, "a completed fire of the declared job")
    finally:
        await rt.stop(grace=2)

    rt = await prepare(settings, ["tests.integration.declared_jobs"])
    await rt.start()  # a restart with the same code changes nothing
    try:
        (again,) = await rt.store.code_jobs()
        assert (again.id, again.version) == (job.id, job.version)
    finally:
        await rt.stop(grace=2)
