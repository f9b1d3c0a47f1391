"""The SQL store's pause and skip state of jobs (the ``PauseStore`` slice), and the end of a
dispatch that writes it: each planned job's next fire, and its ``skip_next`` counted down."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Integer, Uuid, bindparam, case, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.errors import NotFoundError
from rota.core.models import Job
from rota.core.planning import FirePlan
from rota.stores.schema import jobs
from rota.stores.sql.batches import _FastBatches
from rota.stores.sql.engine import SqlParts
from rota.stores.sql.jobstats import with_run_stats
from rota.stores.sql.rows import _to_job
from rota.stores.sql.statements import ADVANCE_KEYS, _advance_jobs_stmt

_j = jobs.c
NOT_PAUSED: dict[str, Any] = {
    "paused_at": None,
    "paused_by": None,
    "pause_note": None,
    "paused_until": None,
}


async def advance_jobs(
    fast: _FastBatches, conn: AsyncConnection, due: Sequence[Job], plans: dict[UUID, FirePlan]
) -> None:
    """Move each planned job to its next fire (with its ``run_count``), and count down the
    ``skip_next`` fires its plan used, its note cleared with the last one (the job rows are
    locked by the dispatch: the count read is the count written)."""
    params = [
        {
            "b_id": job.id,
            "b_next": plans[job.id].next_run_at,
            "b_active": plans[job.id].is_active,
            "b_runs": plans[job.id].run_count,
        }
        for job in due
        if job.id in plans
    ]
    if params:
        await fast.execute(conn, "advance_jobs", _advance_jobs_stmt, params, keys=ADVANCE_KEYS)
    counted = [
        {"b_id": job.id, "b_left": ((job.skip_next or 0) - plans[job.id].skips_used) or None}
        for job in due
        if job.id in plans and plans[job.id].skips_used
    ]
    if counted:
        await conn.execute(_count_down_stmt(), counted)


def _count_down_stmt() -> Any:
    left = bindparam("b_left", type_=Integer())
    return (
        update(jobs)
        .where(_j.id == bindparam("b_id", type_=Uuid()))
        .values(skip_next=left, skip_note=case((left.is_(None), None), else_=_j.skip_note))
        .execution_options(synchronize_session=False)
    )


class PauseQueries(SqlParts):
    """The :class:`~rota.core.ports.PauseStore` slice of the store."""

    async def pause_job(
        self, job_id: UUID, at: datetime, by: str | None, note: str | None, until: datetime | None
    ) -> Job:
        values = {"paused_at": at, "paused_by": by, "pause_note": note, "paused_until": until}
        async with self._write() as conn:
            job = await self._set(conn, job_id, values)
        if job is None:
            raise NotFoundError("job", job_id)
        return job

    async def resume_job(self, job_id: UUID) -> Job | None:
        async with self._write() as conn:
            job = await self._set(conn, job_id, NOT_PAUSED, _j.paused_at.is_not(None))
            if job is None and (await conn.execute(select(_j.id).where(_j.id == job_id))).first():
                return None
        if job is None:
            raise NotFoundError("job", job_id)
        return job

    async def set_skip_next(self, job_id: UUID, count: int, note: str | None) -> Job:
        values = {"skip_next": count or None, "skip_note": note if count else None}
        async with self._write() as conn:
            job = await self._set(conn, job_id, values)
        if job is None:
            raise NotFoundError("job", job_id)
        return job

    async def end_pauses(self, now: datetime, limit: int) -> list[Job]:
        ended = _j.paused_until <= now
        found = (
            select(jobs)
            .where(ended)  # the partial index on paused_until
            .order_by(_j.paused_until, _j.id)
            .limit(max(0, limit))
            .with_for_update(skip_locked=True)
        )
        async with self._read() as conn:  # most of the time none: no write transaction
            # Ordered, so that the partial index is the plan whatever the statistics say
            # (unordered, a table just bulk-loaded, not yet analyzed, was scanned whole).
            probe = select(_j.id).where(ended).order_by(_j.paused_until).limit(1)
            if (await conn.execute(probe)).first() is None:
                return []
        async with self._write() as conn:
            before = {r.id: _to_job(r) for r in (await conn.execute(found)).all()}
            if not before:
                return []
            # re-checked: a pause ended (or changed) since is left alone
            stmt = (
                update(jobs)
                .where(self._member(_j.id, list(before)), ended)
                .values(NOT_PAUSED)
                .returning(_j.id)
            )
            done = set((await conn.execute(stmt)).scalars())
        return [job for job_id, job in before.items() if job_id in done]

    async def _set(
        self, conn: AsyncConnection, job_id: UUID, values: dict[str, Any], *conditions: Any
    ) -> Job | None:
        stmt = update(jobs).where(_j.id == job_id, *conditions).values(values).returning(jobs)
        row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        [job] = await with_run_stats(conn, [self._open_job(_to_job(row))])
        return job
