"""The SQL store's occurrence reads: one occurrence, a page of them (with the query filter),
an occurrence's log lines, and the counts by status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Select,
    func,
    literal_column,
    select,
    union_all,
)

from rota.core.errors import NotFoundError
from rota.core.models import LogRecord, Occurrence, OccurrenceStatus
from rota.core.records import OccurrenceQuery, Page
from rota.stores.schema import (
    UNCOUNTED,
    occurrence_counts,
    occurrence_logs,
    occurrence_totals,
    occurrences,
)
from rota.stores.sql import filters
from rota.stores.sql.engine import SqlParts
from rota.stores.sql.rows import ACTIVE, _decode_cursor, _page, _to_occurrence
from rota.stores.sql.statements import status_in


class OccurrenceQueries(SqlParts):
    """The occurrence reads of the :class:`~rota.core.ports.Store` port."""

    async def get_occurrence(self, occurrence_id: UUID) -> Occurrence:
        async with self._read() as conn:
            row = (
                await conn.execute(select(occurrences).where(occurrences.c.id == occurrence_id))
            ).first()
            if row is None:
                raise NotFoundError("occurrence", occurrence_id)
        return self._open_occurrence(_to_occurrence(row, with_history=True))

    async def list_occurrences(self, query: OccurrenceQuery) -> Page[Occurrence]:
        """Filters: ``scheduled_after <= scheduled_for < scheduled_before``."""
        limit = max(1, query.limit)
        occ = occurrences
        stmt = select(occ).order_by(occ.c.id.desc()).limit(limit + 1)
        if query.job_id is not None:
            stmt = stmt.where(occ.c.job_id == query.job_id)
        if query.statuses:
            stmt = stmt.where(status_in(occ.c.status, query.statuses))
        if query.scheduled_after is not None:
            stmt = stmt.where(occ.c.scheduled_for >= query.scheduled_after)
        if query.scheduled_before is not None:
            stmt = stmt.where(occ.c.scheduled_for < query.scheduled_before)
        stmt = stmt.where(*self._occurrence_filters(query))
        if query.cursor is not None:
            stmt = stmt.where(occ.c.id < _decode_cursor(query.cursor))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return _page(
            [self._open_occurrence(_to_occurrence(r)) for r in rows], limit, lambda o: o.id
        )

    def _occurrence_filters(self, query: OccurrenceQuery) -> list[ColumnElement[bool]]:
        """The query filter's conditions (:mod:`rota.stores.sql.filters`)."""
        occ, d = occurrences.c, self._dialect
        found = filters.in_range(occ.attempt, query.attempt_min, query.attempt_max)
        if query.nothing:
            found.append(filters.nothing())
        if query.job_types:
            found.append(occ.job_type.in_(query.job_types))
        if query.worker_ids:
            found.append(occ.worker_id.in_(query.worker_ids))
        if query.job_refs:
            found.append(filters.of_jobs(occ.job_id, query.job_refs))
        if query.tags:
            found.append(filters.of_tags(d, occ.job_id, query.tags))
        sealed = self._seal is not None
        return found + filters.data_conditions(d, occ.job_data, query.data, sealed=sealed)

    async def occurrence_logs(
        self, occurrence_id: UUID, *, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, LogRecord]]:
        logs = occurrence_logs
        stmt = (
            select(logs)
            .where(logs.c.occurrence_id == occurrence_id, logs.c.seq > after)
            .order_by(logs.c.seq)
            .limit(max(0, limit))
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            (
                int(r.seq),
                LogRecord(
                    occurrence_id=r.occurrence_id,
                    timestamp=r.timestamp,
                    level=r.level,
                    message=r.message,
                    data=r.data,
                    category=r.category,
                    attempt=r.attempt,
                    line=r.line,
                ),
            )
            for r in rows
        ]

    async def count_occurrences(
        self, statuses: Sequence[OccurrenceStatus] = (), job_id: UUID | None = None
    ) -> dict[OccurrenceStatus, int]:
        """Every asked status (every status when none is given) with its count, zeros included:
        from the maintained counts (:mod:`rota.stores.sql.aggregates`), not the occurrences;
        a job's in-flight ones (``ACTIVE``) and uncounted ones from its occurrences, in the
        same statement."""
        asked = [int(s) for s in statuses or OccurrenceStatus]
        stmt: Select[Any] | CompoundSelect[Any]
        if job_id is None:
            t = occurrence_totals.c
            stmt = select(t.status, func.sum(t.n)).where(t.status.in_(asked)).group_by(t.status)
        else:
            c, o = occurrence_counts.c, occurrences.c
            settled = [s for s in asked if s not in ACTIVE]
            live = [s for s in asked if s in ACTIVE]
            parts = []
            if settled:
                parts.append(select(c.status, c.n).where(c.job_id == job_id, c.status.in_(settled)))
                # one row per uncounted one, through the partial index (read as
                # ``schema.UNCOUNTED`` says)
                parts.append(
                    select(o.status, literal_column("1")).where(
                        o.job_id == job_id, UNCOUNTED, o.status.not_in(ACTIVE)
                    )
                )
            if live:
                parts.append(
                    select(o.status, func.count())
                    .where(o.job_id == job_id, status_in(o.status, live))
                    .group_by(o.status)
                )
            stmt = parts[0] if len(parts) == 1 else union_all(*parts)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        counts = dict.fromkeys(statuses or tuple(OccurrenceStatus), 0)
        for status, count in rows:
            if OccurrenceStatus(status) in counts:  # an uncounted one's status may not be asked
                counts[OccurrenceStatus(status)] += int(count)
        return counts
