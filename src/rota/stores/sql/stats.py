"""The SQL store's statistics: the overview, throughput buckets and tag counts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import BigInteger, ColumnElement, Select, case, cast, extract, func, select

from rota.core.models import OccurrenceStatus
from rota.core.records import StoreOverview, TagCount, ThroughputPoint
from rota.stores.schema import finished_hours, finished_minutes, job_tags, jobs, occurrences
from rota.stores.sql.aggregates import EPOCH, HOUR, MINUTE, minute_of, next_hour, next_minute
from rota.stores.sql.engine import SqlParts

_FAILED_STATUSES = (OccurrenceStatus.FAILED, OccurrenceStatus.TIMED_OUT)
HALF_MINUTE = timedelta(seconds=30)


class StatsQueries(SqlParts):
    """Statistics of the :class:`~rota.core.ports.Store` port."""

    if TYPE_CHECKING:

        async def count_occurrences(  # StatusQueries
            self, statuses: Sequence[OccurrenceStatus] = (), job_id: UUID | None = None
        ) -> dict[OccurrenceStatus, int]: ...

    # --- statistics -----------------------------------------------------------------------

    async def overview(self, since: datetime) -> StoreOverview:
        """From the maintained aggregates (:mod:`rota.stores.sql.aggregates`): the totals by
        status; the window's whole hours from ``finished_hours``, the whole minutes before
        them from ``finished_minutes``, and only part of a minute (``since`` is seldom on
        one) from the ``(end_time, status)`` index."""
        by_status = await self.count_occurrences()
        # The part of a minute before the whole ones: added from the occurrences, or, when
        # ``since`` is in the first half of its minute, that whole minute from the figures
        # less the occurrences before ``since`` (at most half a minute of rows either way).
        lower, upper = minute_of(since), next_minute(since)
        cut = datetime.fromtimestamp(lower, UTC)
        if timedelta(0) < since - cut <= HALF_MINUTE:
            first_minute, sign, edge_from, edge_to = lower, -1, cut, since
        else:
            first_minute, sign, edge_from, edge_to = (
                upper,
                1,
                since,
                datetime.fromtimestamp(upper, UTC),
            )
        first_hour = next_hour(since)
        ended = occurrences.c.end_time
        status = occurrences.c.status
        duration = occurrences.c.duration_ms
        # Every status (the index's order): SQLite would take a status index for an IN list.
        edge = (
            select(status, func.count(), func.sum(duration), func.count(duration))
            .where(ended >= edge_from, ended < edge_to)
            .group_by(status)
        )
        m, h = finished_minutes.c, finished_hours.c
        minutes = (
            select(m.status, func.sum(m.n), func.sum(m.duration_sum), func.sum(m.duration_count))
            .where(m.minute >= first_minute, m.minute < first_hour)
            .group_by(m.status)
        )
        hours = (
            select(h.status, func.sum(h.n), func.sum(h.duration_sum), func.sum(h.duration_count))
            .where(h.hour >= first_hour)
            .group_by(h.status)
        )
        active = func.coalesce(func.sum(case((jobs.c.is_active, 1), else_=0)), 0)
        async with self._read() as conn:
            edges = (await conn.execute(edge)).all() if edge_from < edge_to else []
            rows = [*(await conn.execute(minutes)).all(), *(await conn.execute(hours)).all()]
            total, active_count = (await conn.execute(select(func.count(), active))).one()
        window: dict[int, list[float]] = {}
        for factor, part in ((sign, edges), (1, rows)):
            for code, n, dsum, dcount in part:
                into = window.setdefault(int(code), [0, 0.0, 0])
                into[0] += factor * int(n or 0)
                into[1] += factor * float(dsum or 0)
                into[2] += factor * int(dcount or 0)

        def count(*codes: OccurrenceStatus) -> int:
            return sum(int(window.get(int(c), (0, 0.0, 0))[0]) for c in codes)

        _, dsum, dcount = window.get(int(OccurrenceStatus.COMPLETED), (0, 0.0, 0))
        return StoreOverview(
            by_status=by_status,
            jobs=int(total),
            active_jobs=int(active_count),
            completed=count(OccurrenceStatus.COMPLETED),
            failed=count(*_FAILED_STATUSES),
            cancelled=count(OccurrenceStatus.CANCELLED),
            average_duration_ms=float(dsum) / dcount if dcount else None,
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
        failed = func.sum(case((status.in_([int(s) for s in _FAILED_STATUSES]), 1), else_=0))
        return (
            select(slot, completed, failed)
            .where(occurrences.c.end_time >= start, occurrences.c.end_time < end)
            .group_by(slot)
        )

    def bucketed_throughput_statement(
        self, start: datetime, bucket_seconds: int, buckets: int
    ) -> Select[Any] | None:
        """The same rows from the maintained per-hour or per-minute figures when ``start``
        and the bucket are whole hours or minutes (the API's are: its buckets are whole
        minutes from the epoch), else ``None``."""
        offset = start - EPOCH
        if offset % HOUR == timedelta(0) and bucket_seconds % 3600 == 0:
            table, at = finished_hours, finished_hours.c.hour
        elif offset % MINUTE == timedelta(0) and bucket_seconds % 60 == 0:
            table, at = finished_minutes, finished_minutes.c.minute
        else:
            return None
        first = offset // timedelta(seconds=1)
        end = first + bucket_seconds * buckets
        slot = ((at - first) // bucket_seconds).label("slot")
        status, n = table.c.status, table.c.n
        completed = func.sum(case((status == int(OccurrenceStatus.COMPLETED), n), else_=0))
        failed = func.sum(case((status.in_([int(s) for s in _FAILED_STATUSES]), n), else_=0))
        return select(slot, completed, failed).where(at >= first, at < end).group_by(slot)

    async def throughput(
        self, start: datetime, bucket_seconds: int, buckets: int
    ) -> list[ThroughputPoint]:
        bucket_seconds = max(1, int(bucket_seconds))
        buckets = max(0, int(buckets))
        stmt = self.bucketed_throughput_statement(start, bucket_seconds, buckets)
        if stmt is None:
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
        stmt = (
            select(job_tags.c.tag, func.count()).group_by(job_tags.c.tag).order_by(job_tags.c.tag)
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [TagCount(str(tag), int(n)) for tag, n in rows]
