"""The SQL store's statistics: the overview, throughput buckets and tag counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Select,
    SmallInteger,
    Table,
    case,
    cast,
    extract,
    func,
    literal,
    select,
    union_all,
)

from rota.core.models import OccurrenceStatus
from rota.core.records import StoreOverview, TagCount, ThroughputPoint
from rota.stores.schema import (
    finished_hours,
    finished_minutes,
    job_totals,
    occurrence_totals,
    occurrences,
    tag_counts,
)
from rota.stores.sql.aggregates import EPOCH, HOUR, MINUTE, minute_of, next_hour, next_minute
from rota.stores.sql.engine import SqlParts

_FAILED_STATUSES = (OccurrenceStatus.FAILED, OccurrenceStatus.TIMED_OUT)
HALF_MINUTE = timedelta(seconds=30)


_TOTALS, _JOBS, _EDGE, _MINUTES, _HOURS = range(5)
"""The parts of the overview's statement (its first column)."""


def _row(part: int, status: Any, n: Any, dsum: Any, dcount: Any) -> list[ColumnElement[Any]]:
    """A row of the overview's UNION: the types spelled out, the same in every part."""
    return [
        literal(part, SmallInteger()).label("part"),
        cast(status, SmallInteger()).label("status"),
        cast(n, BigInteger()).label("n"),
        cast(dsum, Float()).label("dsum"),
        cast(dcount, BigInteger()).label("dcount"),
    ]


def _totals_part() -> Select[Any]:
    t = occurrence_totals.c
    return select(*_row(_TOTALS, t.status, func.sum(t.n), 0.0, 0)).group_by(t.status)


def _jobs_part() -> Select[Any]:
    """The jobs and the active ones, from their maintained counts (a row per shard)."""
    t = job_totals.c
    return select(*_row(_JOBS, 0, func.sum(t.jobs), 0.0, func.sum(t.active)))


def _edge_part(start: datetime, end: datetime) -> Select[Any]:
    """Every status (the index's order): SQLite would take a status index for an IN list."""
    o = occurrences.c
    counts = (func.count(), func.sum(o.duration_ms), func.count(o.duration_ms))
    return (
        select(*_row(_EDGE, o.status, *counts))
        .where(o.end_time >= start, o.end_time < end)
        .group_by(o.status)
    )


def _figures_part(part: int, table: Table, first: int, end: int | None) -> Select[Any]:
    c = table.c
    at = c.minute if part == _MINUTES else c.hour
    sums = (func.sum(c.n), func.sum(c.duration_sum), func.sum(c.duration_count))
    stmt = select(*_row(part, c.status, *sums)).where(at >= first).group_by(c.status)
    return stmt if end is None else stmt.where(at < end)


class StatsQueries(SqlParts):
    """Statistics of the :class:`~rota.core.ports.Store` port."""

    # --- statistics -----------------------------------------------------------------------

    async def overview(self, since: datetime) -> StoreOverview:
        """One statement over the maintained aggregates (:mod:`rota.stores.sql.aggregates`):
        the totals by status; the window's whole hours from ``finished_hours``, the whole
        minutes before them from ``finished_minutes``, and only part of a minute (``since`` is
        seldom on one) from the ``(end_time, status)`` index; and the jobs from
        ``job_totals``."""
        # The part of a minute before the whole ones: added from the occurrences, or, when
        # ``since`` is in the first half of its minute, that whole minute from the figures
        # less the occurrences before ``since`` (at most half a minute of rows either way).
        lower, upper = minute_of(since), next_minute(since)
        cut = datetime.fromtimestamp(lower, UTC)
        if timedelta(0) < since - cut <= HALF_MINUTE:
            first_minute, sign, edge_from, edge_to = lower, -1, cut, since
        else:
            first_minute, edge_from, edge_to = upper, since, datetime.fromtimestamp(upper, UTC)
            sign = 1
        first_hour = next_hour(since)
        parts = [_totals_part(), _jobs_part()]
        if edge_from < edge_to:
            parts.append(_edge_part(edge_from, edge_to))
        parts.append(_figures_part(_MINUTES, finished_minutes, first_minute, first_hour))
        parts.append(_figures_part(_HOURS, finished_hours, first_hour, None))
        async with self._read() as conn:
            rows = (await conn.execute(union_all(*parts))).all()
        by_status = dict.fromkeys(OccurrenceStatus, 0)
        jobs_total = active_jobs = 0
        window: dict[int, list[float]] = {}
        for part, code, n, dsum, dcount in rows:
            if part == _TOTALS:
                by_status[OccurrenceStatus(code)] = int(n or 0)
                continue
            if part == _JOBS:
                jobs_total, active_jobs = int(n or 0), int(dcount or 0)
                continue
            factor = sign if part == _EDGE else 1
            into = window.setdefault(int(code), [0, 0.0, 0])
            into[0] += factor * int(n or 0)
            into[1] += factor * float(dsum or 0)
            into[2] += factor * int(dcount or 0)

        def count(*codes: OccurrenceStatus) -> int:
            return sum(int(window.get(int(c), (0, 0.0, 0))[0]) for c in codes)

        _, dsum, dcount = window.get(int(OccurrenceStatus.COMPLETED), (0, 0.0, 0))
        return StoreOverview(
            by_status=by_status,
            jobs=jobs_total,
            active_jobs=active_jobs,
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
        """From the maintained ``tag_counts`` (a few rows a tag), not the jobs."""
        t = tag_counts.c
        n = func.sum(t.n)
        stmt = select(t.tag, n).group_by(t.tag).having(n > 0).order_by(t.tag)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [TagCount(str(tag), int(n)) for tag, n in rows]
