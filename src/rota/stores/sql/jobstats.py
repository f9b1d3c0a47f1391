"""A job's run statistics as it is read: what its ``occurrence_counts`` rows hold (``runs``
per final status, the Completed ones' durations: migration 0031, written by the status
tracker with the counts, so a run's end writes no jobs row) and its uncounted occurrences
(a one-time job's fire, migration 0033: each in a final status is a run there, with its
duration if Completed), added to the figures its jobs row kept before
(``total_executions``, ``success_count``, ``failure_count``, ``average_duration_ms`` over
``duration_samples``: no longer written).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from msgspec.structs import replace
from sqlalchemy import CompoundSelect, case, func, literal_column, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.models import Job, OccurrenceStatus
from rota.stores.schema import UNCOUNTED, jobs, occurrence_counts, occurrences
from rota.stores.sql.aggregates import RUN_STATUSES
from rota.stores.sql.rows import _chunks

_FAILURES = (int(OccurrenceStatus.FAILED), int(OccurrenceStatus.TIMED_OUT))
_COMPLETED = int(OccurrenceStatus.COMPLETED)


_NO_RUN = sorted(int(s) for s in OccurrenceStatus if int(s) not in RUN_STATUSES)
"""The statuses no run ends in (in flight, Unknown): an uncounted occurrence in one is left
out (``NOT IN``: see :data:`~rota.stores.schema.UNCOUNTED`)."""


def _runs(chunk: Sequence[UUID]) -> CompoundSelect[Any]:
    """The runs of the jobs ``chunk`` by final status, with their duration sum and count
    (a status's figures may come in several rows): their count rows', and one row per
    uncounted occurrence in a final status (the partial index ``ix_occurrences_uncounted``),
    in one statement (one snapshot: an occurrence folded meanwhile is read in one place or
    the other)."""
    c, o = occurrence_counts.c, occurrences.c
    return union_all(
        select(c.job_id, c.status, c.runs, c.duration_sum, c.duration_count).where(
            c.job_id.in_(chunk), c.runs > 0
        ),
        select(
            o.job_id,
            o.status,
            literal_column("1"),
            func.coalesce(o.duration_ms, literal_column("0.0")),
            case((o.duration_ms.is_(None), literal_column("0")), else_=literal_column("1")),
        ).where(o.job_id.in_(chunk), UNCOUNTED, o.status.not_in(_NO_RUN)),
    )


async def with_run_stats(conn: AsyncConnection, found: Sequence[Job]) -> list[Job]:
    """``found`` with their statistics as they stand (one read per 5,000 jobs)."""
    if not found:
        return []
    # (total, success, failure, duration sum, duration count, samples kept on the job row)
    stats: dict[UUID, list[float]] = {}
    for chunk in _chunks([job.id for job in found]):
        runs = _runs(chunk).subquery("runs")
        rows = await conn.execute(
            select(*runs.c, jobs.c.duration_samples)
            .join(jobs, jobs.c.id == runs.c.job_id)
            .where(jobs.c.id.in_(chunk))  # the jobs by their key too, not by a scan
        )
        for job_id, status, n, dsum, dcount, samples in rows:
            s = stats.setdefault(job_id, [0, 0, 0, 0.0, 0, samples or 0])
            s[0] += n
            if status == _COMPLETED:
                s[1] += n
                s[3] += dsum
                s[4] += dcount
            elif status in _FAILURES:
                s[2] += n
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
