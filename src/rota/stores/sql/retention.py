"""The SQL store's retention (purges, PostgreSQL time partitions) and the reads that find
silent recurring jobs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from sqlalchemy import BigInteger, ColumnElement, column, delete, exists, func, or_, select
from sqlalchemy import table as sa_table

from rota.core.models import Job, OccurrenceStatus
from rota.core.records import PartitionReport, PartitionUpkeep, PurgeBatch, WatchedSchedule
from rota.stores import partitions
from rota.stores.schema import (
    PARTITIONED_BY,
    UtcDateTime,
    failed_occurrences,
    jobs,
    occurrence_logs,
    occurrences,
)
from rota.stores.sql.aggregates import AggregateQueries, StatDeltas
from rota.stores.sql.rows import _chunks, _to_job, _unique
from rota.stores.sql.statements import status_in

_DEFAULT_LOGS = sa_table(
    "occurrence_logs_default",
    column("seq", BigInteger()),
    column("timestamp", UtcDateTime()),
)
"""PostgreSQL: the default partition of ``occurrence_logs`` (lines outside every period)."""


def _recurring() -> ColumnElement[bool]:
    """A cron or interval job: the predicate of the ``ix_jobs_recurring`` partial index."""
    return or_(jobs.c.cron_expression.is_not(None), jobs.c.interval_seconds.is_not(None))


class RetentionQueries(AggregateQueries):
    """Retention and silence reads of the :class:`~rota.core.ports.Store` port."""

    # --- retention and silence ------------------------------------------------------------

    async def purge_occurrences(
        self,
        status: OccurrenceStatus,
        created_before: datetime,
        limit: int,
        after: UUID | None = None,
        *,
        with_logs: bool = True,
    ) -> PurgeBatch:
        if not status.is_terminal:
            raise ValueError(f"only final occurrences are purged, not {status.name}")
        o = occurrences.c
        f = failed_occurrences.c
        held = exists().where(f.occurrence_id == o.id, ~f.resolved).label("held")
        stmt = select(o.id, o.created_at, held).where(status_in(o.status, [status]))
        if after is not None:
            stmt = stmt.where(o.id > after)
        stmt = stmt.order_by(o.id).limit(limit)  # the (status, id) index, oldest first
        async with self._write() as conn:
            rows = (await conn.execute(stmt)).all()
            doomed = [r.id for r in rows if r.created_at < created_before and not r.held]
            deltas = StatDeltas()
            for chunk in _chunks(doomed):
                if with_logs:
                    await conn.execute(
                        delete(occurrence_logs).where(
                            self._member(occurrence_logs.c.occurrence_id, chunk)
                        )
                    )
                gone = await conn.execute(
                    delete(occurrences)
                    .where(self._member(o.id, chunk))
                    .returning(o.job_id, o.status, o.end_time, o.duration_ms, o.counted)
                )
                deltas.remove_rows(gone)
            await self._write_aggregates(conn, deltas)
        done = len(rows) < limit or any(r.created_at >= created_before for r in rows)
        return PurgeBatch(deleted=len(doomed), next_after=None if done else rows[-1].id)

    @property
    def time_partitioned(self) -> bool:
        return self._dialect == "postgresql"

    async def maintain_partitions(self, now: datetime, upkeep: PartitionUpkeep) -> PartitionReport:
        if not self.time_partitioned:
            return PartitionReport()
        spans = partitions.periods(now, now, upkeep.period, ahead=upkeep.ahead)
        created: list[str] = []
        for table in PARTITIONED_BY:
            async with self._write() as conn:
                created += await partitions.create_table_partitions(conn, table, spans)
        dropped: list[str] = []
        if upkeep.drop:
            async with self._write() as conn:
                dropped += await partitions.drop_occurrence_partitions(
                    conn, now, upkeep.occurrences_kept_since, before_drop=self._uncount_partition
                )
            async with self._write() as conn:
                dropped += await partitions.drop_log_partitions(conn, now, upkeep.logs_before)
        return PartitionReport(created=tuple(created), dropped=tuple(dropped))

    async def purge_logs(self, before: datetime, limit: int) -> int:
        # Partitioned by time, whole partitions go (maintain_partitions): only the lines that
        # fell into the default partition are deleted row by row.
        logs = _DEFAULT_LOGS if self.time_partitioned else occurrence_logs
        lg = logs.c
        head = select(lg.seq, lg.timestamp).order_by(lg.seq).limit(limit).subquery("head")
        doomed = select(head.c.seq).where(head.c.timestamp < before)
        async with self._write() as conn:
            result = await conn.execute(delete(logs).where(lg.seq.in_(doomed)))
        return int(result.rowcount or 0)

    async def purge_failed(self, resolved_before: datetime, limit: int) -> int:
        f = failed_occurrences.c
        doomed = (
            select(f.id)
            .where(f.resolved, f.resolved_at < resolved_before)
            .order_by(f.resolved_at)
            .limit(limit)
        )
        async with self._write() as conn:
            ids = list((await conn.execute(doomed)).scalars())
            if not ids:
                return 0
            await conn.execute(delete(failed_occurrences).where(self._member(f.id, ids)))
        return len(ids)

    async def recurring_jobs(
        self, buckets: Sequence[int], limit: int, after: UUID | None = None
    ) -> list[Job]:
        if not buckets:
            return []
        j = jobs.c
        stmt = select(jobs).where(j.bucket.in_(list(buckets)), _recurring(), j.is_active)
        if after is not None:
            stmt = stmt.where(j.id > after)
        async with self._read() as conn:
            rows = (await conn.execute(stmt.order_by(j.id).limit(limit))).all()
        return [self._open_job(_to_job(r)) for r in rows]

    async def jobs_with_fires(
        self, job_ids: Sequence[UUID], start: datetime, end: datetime
    ) -> set[UUID]:
        o = occurrences.c
        found: set[UUID] = set()
        async with self._read() as conn:
            for chunk in _chunks(_unique(job_ids)):
                stmt = (
                    select(o.job_id)
                    .where(
                        self._member(o.job_id, chunk),
                        o.scheduled_for >= start,
                        o.scheduled_for <= end,
                    )
                    .distinct()
                )
                found.update((await conn.execute(stmt)).scalars())
        return found

    async def watched_schedules(
        self,
        buckets: Sequence[int],
        since: datetime,
        until: datetime,
        limit: int,
        after: UUID | None = None,
    ) -> list[WatchedSchedule]:
        if not buckets:
            return []
        j = jobs.c
        o = occurrences.c
        # Per job, a backward walk of the (job_id, scheduled_for) unique index.
        last_fire = (
            select(func.max(o.scheduled_for))
            .where(
                o.job_id == j.id,
                o.scheduled_for >= since,
                o.scheduled_for <= until,
                o.trigger_reason.is_(None),
            )
            .scalar_subquery()
        )
        stmt = select(
            j.id,
            j.job_type,
            j.display_name,
            j.cron_expression,
            j.interval_seconds,
            func.coalesce(j.time_zone, "UTC").label("time_zone"),  # NULL: UTC (0024)
            j.execute_at,
            j.created_at,
            func.coalesce(j.updated_at, j.created_at).label("updated_at"),
            j.start_at,
            j.end_at,
            j.max_runs,
            j.run_count,
            last_fire.label("last_fire"),
        ).where(
            j.bucket.in_(list(buckets)),
            _recurring(),
            j.is_active,
            j.paused_at.is_(None),  # a paused job's fires are not expected to run
        )
        if after is not None:
            stmt = stmt.where(j.id > after)
        async with self._read() as conn:
            rows = (await conn.execute(stmt.order_by(j.id).limit(limit))).all()
        return [
            WatchedSchedule(
                job_id=r.id,
                job_type=r.job_type,
                display_name=r.display_name,
                cron_expression=r.cron_expression,
                interval_seconds=r.interval_seconds,
                time_zone=r.time_zone,
                execute_at=r.execute_at,
                created_at=r.created_at,
                updated_at=r.updated_at,
                last_fire=r.last_fire,
                start_at=r.start_at,
                end_at=r.end_at,
                max_runs=r.max_runs,
                run_count=r.run_count,
            )
            for r in rows
        ]
