"""The SQL store's statistics: the overview, throughput buckets and tag counts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import BigInteger, ColumnElement, Select, case, cast, extract, func, select, true

from rota.core.models import OccurrenceStatus
from rota.core.records import StoreOverview, TagCount, ThroughputPoint
from rota.stores.schema import job_tags, jobs, occurrences
from rota.stores.sql.engine import SqlParts

_FAILED_STATUSES = (int(OccurrenceStatus.FAILED), int(OccurrenceStatus.TIMED_OUT))


class StatsQueries(SqlParts):
    """Statistics of the :class:`~rota.core.ports.Store` port."""

    if TYPE_CHECKING:

        async def count_occurrences(  # StatusQueries
            self, statuses: Sequence[OccurrenceStatus] = (), job_id: UUID | None = None
        ) -> dict[OccurrenceStatus, int]: ...

    # --- statistics -----------------------------------------------------------------------

    async def overview(self, since: datetime) -> StoreOverview:
        by_status = await self.count_occurrences()
        ended = occurrences.c.end_time
        window = (
            select(
                occurrences.c.status,
                func.count(),
                func.avg(occurrences.c.duration_ms),
            )
            .where(ended >= since)
            .group_by(occurrences.c.status)
        )
        active = func.coalesce(func.sum(case((jobs.c.is_active, 1), else_=0)), 0)
        async with self._read() as conn:
            rows = (await conn.execute(window)).all()
            total, active_count = (await conn.execute(select(func.count(), active))).one()
        counts = {int(status): (int(n), avg) for status, n, avg in rows}
        completed, average = counts.get(int(OccurrenceStatus.COMPLETED), (0, None))
        failed = sum(counts.get(int(s), (0, None))[0] for s in _FAILED_STATUSES)
        return StoreOverview(
            by_status=by_status,
            jobs=int(total),
            active_jobs=int(active_count),
            completed=completed,
            failed=failed,
            cancelled=counts.get(int(OccurrenceStatus.CANCELLED), (0, None))[0],
            average_duration_ms=None if average is None else float(average),
        )

    def _epoch_seconds(self, column: ColumnElement[Any]) -> ColumnElement[int]:
        """Whole epoch seconds of a UTC datetime column, in SQL."""
        if self._dialect == "sqlite":
            return cast(func.strftime("%s", column), BigInteger)
        return cast(func.floor(extract("epoch", column)), BigInteger)

    def throughput_statement(
        self, start: datetime, bucket_seconds: int, buckets: int
    ) -> Select[Any]:
        """The aggregate :meth:`throughput` runs: (bucket index, completed, failed) rows. It
        filters on ``end_time`` only (a range of the ``(end_time, status)`` index) and counts
        statuses from the index entries."""
        end = start + timedelta(seconds=bucket_seconds * buckets)
        first = int(start.timestamp())
        slot = ((self._epoch_seconds(occurrences.c.end_time) - first) // bucket_seconds).label(
            "slot"
        )
        status = occurrences.c.status
        completed = func.sum(case((status == int(OccurrenceStatus.COMPLETED), 1), else_=0))
        failed = func.sum(case((status.in_(_FAILED_STATUSES), 1), else_=0))
        return (
            select(slot, completed, failed)
            .where(occurrences.c.end_time >= start, occurrences.c.end_time < end)
            .group_by(slot)
        )

    async def throughput(
        self, start: datetime, bucket_seconds: int, buckets: int
    ) -> list[ThroughputPoint]:
        bucket_seconds = max(1, int(bucket_seconds))
        buckets = max(0, int(buckets))
        stmt = self.throughput_statement(start, bucket_seconds, buckets)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        completed = [0] * buckets
        failed = [0] * buckets
        for index, done, bad in rows:
            i = min(max(int(index), 0), buckets - 1)  # a fractional start second: clamp
            completed[i] += int(done or 0)
            failed[i] += int(bad or 0)
        step = timedelta(seconds=bucket_seconds)
        return [ThroughputPoint(start + i * step, completed[i], failed[i]) for i in range(buckets)]

    async def tags(self) -> list[TagCount]:
        if self._dialect == "postgresql":  # the jobs' tags column (no job_tags table there)
            tag = func.jsonb_array_elements_text(jobs.c.tags).table_valued("value").alias("t")
            stmt = (
                select(tag.c.value, func.count())
                .select_from(jobs)
                .join(tag, true())
                .group_by(tag.c.value)
                .order_by(tag.c.value)
            )
        else:
            t = job_tags.c
            stmt = select(t.tag, func.count()).group_by(t.tag).order_by(t.tag)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [TagCount(str(tag), int(n)) for tag, n in rows]
