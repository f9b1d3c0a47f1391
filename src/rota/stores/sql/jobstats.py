"""A job's run statistics as it is read: what its ``occurrence_counts`` rows hold (``runs``
per final status, the Completed ones' durations: migration 0031, written by the status
tracker with the counts, so a run's end writes no jobs row) added to the figures its jobs
row kept before (``total_executions``, ``success_count``, ``failure_count``,
``average_duration_ms`` over ``duration_samples``: no longer written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.models import Job, OccurrenceStatus
from rota.stores.schema import jobs, occurrence_counts
from rota.stores.sql.rows import _chunks

_FAILURES = (int(OccurrenceStatus.FAILED), int(OccurrenceStatus.TIMED_OUT))
_COMPLETED = int(OccurrenceStatus.COMPLETED)


async def with_run_stats(conn: AsyncConnection, found: Sequence[Job]) -> list[Job]:
    """``found`` with their statistics as they stand (one read per 5,000 jobs)."""
    if not found:
        return []
    c = occurrence_counts.c
    # (total, success, failure, duration sum, duration count, samples kept on the job row)
    stats: dict[UUID, list[float]] = {}
    for chunk in _chunks([job.id for job in found]):
        rows = await conn.execute(
            select(
                c.job_id,
                c.status,
                c.runs,
                c.duration_sum,
                c.duration_count,
                jobs.c.duration_samples,
            )
            .join(jobs, jobs.c.id == c.job_id)
            .where(c.job_id.in_(chunk), c.runs > 0)
        )
        for job_id, status, runs, dsum, dcount, samples in rows:
            s = stats.setdefault(job_id, [0, 0, 0, 0.0, 0, samples or 0])
            s[0] += runs
            if status == _COMPLETED:
                s[1] += runs
                s[3] += dsum
                s[4] += dcount
            elif status in _FAILURES:
                s[2] += runs
    return [job if job.id not in stats else _added(job, stats[job.id]) for job in found]


def _added(job: Job, s: list[float]) -> Job:
    total, success, failure, dsum, dcount, had = s
    average = job.average_duration_ms
    if dcount:
        had = 0 if average is None else had  # the row's samples, when it has an average
        average = ((average or 0.0) * had + dsum) / (had + dcount)
    return replace(
        job,
        total_executions=job.total_executions + int(total),
        success_count=job.success_count + int(success),
        failure_count=job.failure_count + int(failure),
        average_duration_ms=average,
    )
