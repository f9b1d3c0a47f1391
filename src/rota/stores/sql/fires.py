"""The SQL store's record of a job's fires in a window (what a backfill leaves alone)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from sqlalchemy import select

from rota.stores.schema import occurrences
from rota.stores.sql.engine import SqlParts


class FireQueries(SqlParts):
    """``recorded_fires`` of the :class:`~rota.core.ports.Store` port."""

    async def recorded_fires(self, job_id: UUID, start: datetime, end: datetime) -> set[datetime]:
        c = occurrences.c
        stmt = select(c.scheduled_for).where(
            c.job_id == job_id, c.scheduled_for >= start, c.scheduled_for <= end
        )
        async with self._read() as conn:
            return set((await conn.execute(stmt)).scalars())
