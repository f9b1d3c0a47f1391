"""The SQL store's failed occurrences (dead letters): recorded from final failures and from
the broker, listed, resolved, retried."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.errors import ConflictError, NotFoundError
from rota.core.ids import new_id
from rota.core.models import FailedOccurrence, Occurrence, OccurrenceStatus, StatusChange, utcnow
from rota.core.records import FailedQuery, Page
from rota.core.transitions import StatusBatch, final_failures
from rota.stores.schema import failed_occurrences, occurrences
from rota.stores.sql import filters
from rota.stores.sql.aggregates import AggregateQueries, StatDeltas
from rota.stores.sql.rows import (
    _RETRYABLE,
    MANUAL_RETRY,
    RETRIED,
    _chunks,
    _decode_cursor,
    _failed_row,
    _page,
    _to_failed,
    _unique,
    history_entry,
)
from rota.stores.sql.statements import _fetch_in, _insert_failed_stmt

_QUEUED = OccurrenceStatus.QUEUED


class FailedQueries(AggregateQueries):
    """Failed occurrences of the :class:`~rota.core.ports.Store` port."""

    if TYPE_CHECKING:

        async def get_occurrence(self, occurrence_id: UUID) -> Occurrence: ...  # StatusQueries

    async def _record_final_failures(self, conn: AsyncConnection, batch: StatusBatch) -> None:
        """The dead-letter records of the occurrences this batch brought to a final failure
        (one INSERT; an occurrence that has an unresolved record already gets none)."""
        ends = final_failures(batch.changes)
        if not ends:
            return
        occ = occurrences.c
        rows = await _fetch_in(
            conn,
            lambda chunk: select(
                occ.id, occ.job_id, occ.job_type, occ.job_data, occ.exception
            ).where(self._member(occ.id, chunk)),
            list(ends),
        )
        created = utcnow()
        records = [
            _failed_row(
                FailedOccurrence(
                    id=new_id(),
                    occurrence_id=r.id,
                    job_id=r.job_id,
                    job_type=r.job_type,
                    failure_type=ends[r.id][0],
                    exception=r.exception,
                    job_data=r.job_data,
                    attempts=ends[r.id][1],
                    failed_at=ends[r.id][2],
                    created_at=created,
                )
            )
            for r in rows
        ]
        await self._insert_failed(conn, records)

    async def _insert_failed(self, conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            make = partial(_insert_failed_stmt, self._dialect)
            await self._fast.execute(conn, "insert_failed", make, rows)

    async def record_dead_letters(self, records: Sequence[FailedOccurrence]) -> int:
        if not records:
            return 0
        rows = [self._seal_failed_row(_failed_row(r)) for r in records]
        ids = _unique(r.id for r in records)
        async with self._write() as conn:
            before = await self._count_failed(conn, ids)
            await self._insert_failed(conn, rows)
            after = await self._count_failed(conn, ids)
        return after - before

    async def _count_failed(self, conn: AsyncConnection, ids: Sequence[UUID]) -> int:
        total = 0
        for chunk in _chunks(ids):
            stmt = select(func.count()).where(self._member(failed_occurrences.c.id, chunk))
            total += int((await conn.execute(stmt)).scalar_one())
        return total

    async def list_failed(self, query: FailedQuery) -> Page[FailedOccurrence]:
        limit = max(1, query.limit)
        f = failed_occurrences.c
        stmt = select(failed_occurrences).order_by(f.id.desc()).limit(limit + 1)
        if query.job_id is not None:
            stmt = stmt.where(f.job_id == query.job_id)
        if query.failure_types:
            stmt = stmt.where(f.failure_type.in_([t.value for t in query.failure_types]))
        if query.resolved is not None:
            stmt = stmt.where(f.resolved.is_(query.resolved))
        if query.failed_after is not None:
            stmt = stmt.where(f.failed_at >= query.failed_after)
        if query.failed_before is not None:
            stmt = stmt.where(f.failed_at < query.failed_before)
        stmt = stmt.where(*self._failed_filters(query))
        if query.cursor is not None:
            stmt = stmt.where(f.id < _decode_cursor(query.cursor))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return _page([self._open_failed(_to_failed(r)) for r in rows], limit, lambda r: r.id)

    def _failed_filters(self, query: FailedQuery) -> list[ColumnElement[bool]]:
        """The query filter's conditions (:mod:`rota.stores.sql.filters`); the worker group
        is the failed occurrence's job's."""
        f, d = failed_occurrences.c, self._dialect
        found = filters.in_range(f.attempts, query.attempt_min, query.attempt_max)
        if query.nothing:
            found.append(filters.nothing())
        if query.job_types:
            found.append(f.job_type.in_(query.job_types))
        if query.worker_ids:
            found.append(filters.of_workers(f.job_id, query.worker_ids))
        if query.job_refs:
            found.append(filters.of_jobs(f.job_id, query.job_refs))
        if query.tags:
            found.append(filters.of_tags(d, f.job_id, query.tags))
        sealed = self._seal is not None
        return found + filters.data_conditions(d, f.job_data, query.data, sealed=sealed)

    async def get_failed(self, failed_id: UUID) -> FailedOccurrence:
        stmt = select(failed_occurrences).where(failed_occurrences.c.id == failed_id)
        async with self._read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            raise NotFoundError("failed occurrence", failed_id)
        return self._open_failed(_to_failed(row))

    async def update_failed(
        self,
        failed_id: UUID,
        *,
        resolution_note: str | None = None,
        resolution_action: str | None = None,
        resolved: bool | None = None,
        resolved_by: str | None = None,
        now: datetime,
    ) -> FailedOccurrence:
        f = failed_occurrences.c
        async with self._write() as conn:
            stmt = select(failed_occurrences).where(f.id == failed_id).with_for_update()
            row = (await conn.execute(stmt)).first()
            if row is None:
                raise NotFoundError("failed occurrence", failed_id)
            stored = self._open_failed(_to_failed(row))
            values: dict[str, Any] = {}
            if resolution_note is not None:
                values["resolution_note"] = resolution_note
            if resolution_action is not None:
                values["resolution_action"] = resolution_action
            if resolved is True:
                values["resolved"] = True
                if not stored.resolved:
                    values["resolved_at"] = now
                if resolved_by is not None or not stored.resolved:
                    values["resolved_by"] = resolved_by
            elif resolved is False:
                values.update(resolved=False, resolved_at=None, resolved_by=None)
            if values:
                try:
                    await conn.execute(
                        update(failed_occurrences).where(f.id == failed_id).values(values)
                    )
                except IntegrityError as exc:
                    raise ConflictError(
                        f"occurrence {stored.occurrence_id} already has an unresolved "
                        "failed-occurrence record"
                    ) from exc
            row = (await conn.execute(select(failed_occurrences).where(f.id == failed_id))).one()
        return self._open_failed(_to_failed(row))

    async def delete_failed(self, failed_id: UUID) -> None:
        async with self._write() as conn:
            result = await conn.execute(
                delete(failed_occurrences).where(failed_occurrences.c.id == failed_id)
            )
            if result.rowcount == 0:
                raise NotFoundError("failed occurrence", failed_id)

    async def retry_failed(
        self, failed_id: UUID, now: datetime, by: str | None = None
    ) -> Occurrence:
        f = failed_occurrences.c
        occ = occurrences.c
        async with self._write() as conn:
            stmt = select(failed_occurrences).where(f.id == failed_id).with_for_update()
            row = (await conn.execute(stmt)).first()
            if row is None:
                raise NotFoundError("failed occurrence", failed_id)
            record = self._open_failed(_to_failed(row))
            occurrence_id = record.occurrence_id
            if occurrence_id is None:
                raise ConflictError(
                    f"failed occurrence {failed_id} is a poison message that names no "
                    "occurrence: there is nothing to retry"
                )
            stmt = (
                select(
                    occ.job_id,
                    occ.status,
                    occ.attempt,
                    occ.end_time,
                    occ.duration_ms,
                    occ.history,
                    occ.counted,
                )
                .where(occ.id == occurrence_id)
                .with_for_update()
            )
            current = (await conn.execute(stmt)).first()
            if current is None:
                raise ConflictError(f"occurrence {occurrence_id} no longer exists")
            status = OccurrenceStatus(current.status)
            if status not in _RETRYABLE:
                raise ConflictError(
                    f"occurrence {occurrence_id} is {status.name.title().replace('_', '')}: "
                    "only a Failed, TimedOut or Unknown occurrence can be retried"
                )
            attempt = int(current.attempt) + 1
            change = StatusChange(
                timestamp=now,
                from_status=status,
                to_status=_QUEUED,
                attempt=attempt,
                reason=MANUAL_RETRY,
            )
            await conn.execute(
                update(occurrences)
                .where(occ.id == occurrence_id)
                .values(
                    status=int(_QUEUED),
                    attempt=attempt,
                    due_at=now,
                    dispatched_at=None,
                    start_time=None,
                    end_time=None,
                    last_heartbeat=None,
                    duration_ms=None,
                    history=[*(current.history or ()), history_entry(change)],
                    counted=True,
                )
            )
            await conn.execute(
                update(failed_occurrences)
                .where(or_(f.id == failed_id, (f.occurrence_id == occurrence_id) & ~f.resolved))
                .values(
                    resolved=True,
                    resolved_at=func.coalesce(f.resolved_at, now),
                    resolved_by=by,
                    resolution_action=RETRIED,
                )
            )
            deltas = StatDeltas()
            deltas.remove_rows([current])  # it leaves the status it settled in
            deltas.add(current.job_id, int(_QUEUED), None, None)
            await self._write_aggregates(conn, deltas)
        return await self.get_occurrence(occurrence_id)
