"""The SQL store's status application (the rules: :mod:`rota.core.transitions`), the
auto-disable streaks and log lines (the occurrences' reads: :mod:`.occurrences`)."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import (
    Row,
    func,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.autodisable import AutoDisableDefaults
from rota.core.models import Job, LogRecord, Occurrence, OccurrenceStatus, StatusRecord
from rota.core.records import DisabledJob, StatusResult
from rota.core.transitions import CURRENT_FIELDS, Current, StatusBatch, Streak, apply_records
from rota.stores.schema import (
    jobs,
    occurrences,
)
from rota.stores.sql.aggregates import RUN_STATUSES, AggregateQueries, StatDeltas, durations
from rota.stores.sql.completions import Completions, completions
from rota.stores.sql.engine import guard_errors
from rota.stores.sql.rows import (
    _AUTO_DISABLE_STATE,
    _to_occurrence,
    _unique,
    change_entry,
)
from rota.stores.sql.statements import (
    OCCURRENCE_KEYS,
    STREAK_KEYS,
    _fetch_in,
    _insert_logs_stmt,
    _reset_streaks_stmt,
    _update_occurrences_stmt,
    _update_streaks_stmt,
)

# --- status application (the rules: rota.core.transitions) ------------------------------------


def _occurrence_updates(batch: StatusBatch) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """The changed occurrences grouped by the columns they change (one statement each)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for occurrence_id, current in batch.current.items():
        if current.changed:
            columns = tuple(sorted(current.changed))
            groups[columns].append(
                {**current.changed, "id": occurrence_id, "key_at": current.scheduled_for}
            )
    return groups


class StatusQueries(AggregateQueries):
    """Status, logs and occurrence reads of the :class:`~rota.core.ports.Store` port."""

    if TYPE_CHECKING:

        async def _record_final_failures(
            self, conn: AsyncConnection, batch: StatusBatch
        ) -> None: ...  # FailedQueries

    # --- status and logs ------------------------------------------------------------------

    async def apply_status(self, records: Sequence[StatusRecord]) -> StatusResult:
        if not records:
            return StatusResult()
        batch = None  # built before the writer is taken
        if self._seal is None and completions(records):
            batch = Completions(self._dialect, records)
        if self._hot is None or batch is None:  # PostgreSQL, or no completions: one transaction
            return await self._apply(records, batch)
        # SQLite: the completions are a transaction of their own, one call to the hot writer
        # (.hotwriter); the records they leave go through the rules in the next one.
        async with guard_errors():
            done = await self._hot.transaction(partial(self._complete_hot, batch))
        if done is None:  # a failure streak to end: all through the rules
            return await self._apply(records, None)
        rest = [r for r in records if r.occurrence_id not in done]
        result = await self._apply(rest, None) if rest else StatusResult()
        result.applied[:0] = batch.applied()
        return result

    def _complete_hot(self, batch: Completions, db: sqlite3.Connection) -> set[UUID] | None:
        """SQLite, on the hot writer's thread: the completions and their statistics."""
        deltas = StatDeltas()
        done = batch.run_sqlite(db, deltas)
        if done:
            self._write_aggregates_hot(db, deltas)
        return done

    async def _apply(
        self, records: Sequence[StatusRecord], batch: Completions | None
    ) -> StatusResult:
        """:meth:`apply_status` in one transaction (``batch``, PostgreSQL's: the completions
        among ``records`` first)."""
        deltas = StatDeltas()
        async with self._write() as conn:
            rest = records
            if batch is not None:
                done, streaks = await batch.run(conn, deltas)
                await self._reset_streaks(conn, streaks)
                rest = [r for r in records if r.occurrence_id not in done]
            result = await self._apply_rules(conn, rest, deltas) if rest else StatusResult()
            await self._write_aggregates(conn, deltas)
        if batch is not None:
            result.applied[:0] = batch.applied()
        return result

    async def _apply_rules(
        self, conn: AsyncConnection, records: Sequence[StatusRecord], deltas: StatDeltas
    ) -> StatusResult:
        """Apply ``records`` by the rules of :mod:`rota.core.transitions`: their occurrences
        read under lock, the outcome written, its statistics added to ``deltas``."""
        ids = _unique(r.occurrence_id for r in records)
        columns = [
            occurrences.c.id,
            *(occurrences.c[n] for n in CURRENT_FIELDS),
            occurrences.c.end_time,
            occurrences.c.counted,
            # whether the job has a failure streak or a probe a success would end (not
            # locked: a failure committed meanwhile is one that came after this batch)
            func.coalesce(jobs.c.consecutive_failures, 0).label("streak"),
            jobs.c.probing,
        ]
        with_job = occurrences.outerjoin(jobs, jobs.c.id == occurrences.c.job_id)
        rows = await _fetch_in(
            conn,
            lambda chunk: (
                select(*columns)
                .select_from(with_job)
                .where(self._member(occurrences.c.id, chunk))
                .order_by(occurrences.c.id)
                .with_for_update(of=occurrences)
            ),
            ids,
        )
        before = {r.id: (r.status, r.end_time, r.duration_ms, r.counted) for r in rows}
        end = 1 + len(CURRENT_FIELDS)  # the id, then the fields ``Current`` takes
        batch = apply_records({r[0]: Current(*r[1:end]) for r in rows}, records)
        _append_history(batch)
        _status_deltas(batch, before, deltas)
        streaks = {r.job_id for r in rows if r.streak or r.probing}
        disabled = await self._write_status_batch(conn, batch, deltas, streaks)
        await self._record_final_failures(conn, batch)
        return StatusResult(
            applied=batch.applied,
            ignored=batch.ignored,
            heartbeats=batch.heartbeats,
            disabled=disabled,
        )

    async def _write_status_batch(
        self, conn: AsyncConnection, batch: StatusBatch, deltas: StatDeltas, streaks: set[UUID]
    ) -> list[DisabledJob]:
        """Write the batch's occurrence changes and the jobs' failure streaks (the jobs it
        deactivates counted in ``deltas``; ``streaks``: the jobs with a failure streak or a
        probe, which a batch of successes ends); returns the jobs it disabled."""
        for columns, params in _occurrence_updates(batch).items():
            if self._seal is not None and "result" in columns:
                for param in params:
                    param["result"] = self._sealed_result(param["id"], param["result"])
            await self._fast.execute(
                conn,
                "update_occurrences:" + ",".join(columns),
                partial(_update_occurrences_stmt, columns),
                params,
                keys=OCCURRENCE_KEYS,
            )
        await self._reset_streaks(
            conn,
            [
                job_id
                for job_id, s in sorted(batch.stats.items())
                if s.only_successes and job_id in streaks
            ],
        )
        return await self._count_failures(conn, batch, deltas)

    async def _reset_streaks(self, conn: AsyncConnection, job_ids: Sequence[UUID]) -> None:
        """End the failure streak or probe of jobs a batch brought only successes."""
        if job_ids:
            resets = [{"b_id": job_id} for job_id in job_ids]
            await self._fast.execute(
                conn, "reset_streaks", _reset_streaks_stmt, resets, keys=STREAK_KEYS
            )

    async def _count_failures(
        self, conn: AsyncConnection, batch: StatusBatch, deltas: StatDeltas
    ) -> list[DisabledJob]:
        """Auto-disable: fold the batch's outcomes into the consecutive-failure state of each
        job that had a failure in it (read under lock, one UPDATE for all), disabling the jobs
        that reach their threshold. Jobs with only successes were reset already, if they had
        anything to reset."""
        failing = batch.failing_jobs
        if not failing:
            return []
        j = jobs.c
        columns = (
            j.id,
            j.bucket,
            j.is_active,
            j.next_run_at,
            j.auto_disable_threshold,
            j.auto_disable_window_seconds,
            *(j[name] for name in _AUTO_DISABLE_STATE),
        )
        rows = await _fetch_in(
            conn,
            lambda chunk: (
                select(*columns).where(self._member(j.id, chunk)).order_by(j.id).with_for_update()
            ),
            failing,
        )
        params: list[dict[str, Any]] = []
        disabled: list[DisabledJob] = []
        for row in rows:
            streak = _streak_of(row, self._auto_disable)
            streak.fold_all(batch.stats[row.id].outcomes)
            params.append(_streak_params(row.id, streak))
            deltas.activation(row.is_active, streak.is_active)
            if streak.disabled_now:
                assert streak.disabled_reason is not None
                disabled.append(
                    DisabledJob(job_id=row.id, bucket=row.bucket, reason=streak.disabled_reason)
                )
        if params:
            await conn.execute(_update_streaks_stmt(), params)
        return disabled

    async def append_logs(self, records: Sequence[LogRecord]) -> None:
        if not records:
            return
        ids = _unique(r.occurrence_id for r in records)
        async with self._write() as conn:
            rows = await _fetch_in(
                conn,
                lambda chunk: select(occurrences.c.id).where(self._member(occurrences.c.id, chunk)),
                ids,
            )
            known = {r.id for r in rows}
            lines = []
            numbered: set[tuple[UUID, int, int]] = set()
            for r in records:
                if r.occurrence_id not in known:
                    continue
                if r.attempt is not None and r.line is not None:
                    key = (r.occurrence_id, r.attempt, r.line)
                    if key in numbered:  # the same line twice in one batch
                        continue
                    numbered.add(key)
                lines.append(
                    {
                        "occurrence_id": r.occurrence_id,
                        "timestamp": r.timestamp,
                        "level": r.level,
                        "message": r.message,
                        "data": None if r.data is None else dict(r.data),
                        "category": r.category,
                        "attempt": r.attempt,
                        "line": r.line,
                    }
                )
            if lines:
                make = partial(_insert_logs_stmt, self._dialect)
                await self._fast.execute(conn, "insert_logs", make, lines)

    async def supersede_queued(
        self, job: Job, occurrence_ids: Sequence[UUID], max_retries: int
    ) -> list[Occurrence]:
        if not occurrence_ids:
            return []
        occ = occurrences.c
        stmt = (
            update(occurrences)
            .where(
                occ.id.in_(list(occurrence_ids)),
                occ.job_id == job.id,
                occ.status == int(OccurrenceStatus.QUEUED),
                occ.job_version < job.version,
            )
            .values(
                job_type=job.job_type,
                worker_id=job.worker_id,
                job_data=self._sealed_job_data(job.id, job.job_data),
                priority=int(job.priority),
                timeout_seconds=job.timeout_seconds,
                retry_delay_seconds=job.retry_delay_seconds,
                max_retries=max_retries,
                job_version=job.version,
            )
            .returning(*occurrences.c)
        )
        async with self._write() as conn:
            rows = (await conn.execute(stmt)).all()
        return sorted(
            (self._open_occurrence(_to_occurrence(r)) for r in rows), key=lambda o: o.scheduled_for
        )


def _append_history(batch: StatusBatch) -> None:
    """The history entries of the batch's changes of each changed occurrence, appended to its
    history by the statement that changes it, which does not read the history
    (:class:`~rota.stores.sql.statements.history_append`)."""
    for change in batch.changes:
        changed = batch.current[change["occurrence_id"]].changed
        entries = changed.get("history")
        if entries is None:
            entries = changed["history"] = []
        entries.append(
            change_entry(
                change["timestamp"],
                change["from_status"],
                change["to_status"],
                change["attempt"],
                change["reason"],
            )
        )


def _status_deltas(
    batch: StatusBatch,
    before: dict[UUID, tuple[int, datetime | None, float | None, bool]],
    deltas: StatDeltas,
) -> None:
    """What the batch changed in the aggregates, added to ``deltas``: each occurrence whose
    status, end or duration changed is uncounted as it was and counted as it is, and one
    that reached a final status adds a run to its job (a final status is left by no status
    record: at most once a batch). An uncounted occurrence (``counted`` false) changes its
    job's counts and runs in nothing: they are read from its row."""
    for occurrence_id, current in batch.current.items():
        changed = current.changed
        if not ("status" in changed or "end_time" in changed or "duration_ms" in changed):
            continue
        status, end_time, duration, counted = before[occurrence_id]
        now = changed.get("status", status)
        deltas.add(current.job_id, status, end_time, duration, -1, counted=counted)
        deltas.add(
            current.job_id,
            now,
            changed.get("end_time", end_time),
            changed.get("duration_ms", duration),
            counted=counted,
        )
        if counted and "status" in changed and now in RUN_STATUSES:
            deltas.ran(current.job_id, now, 1, *durations(current.duration_ms))


def _streak_of(row: Row[Any], defaults: AutoDisableDefaults) -> Streak:
    m = row._mapping
    return Streak.of(
        defaults,
        threshold=m["auto_disable_threshold"],
        window_seconds=m["auto_disable_window_seconds"],
        consecutive_failures=m["consecutive_failures"] or 0,  # NULL: 0 (migration 0024)
        last_failure_at=m["last_failure_at"],
        is_active=m["is_active"],
        next_run_at=m["next_run_at"],
        probing=m["probing"],
        disabled_reason=m["disabled_reason"],
        disabled_at=m["disabled_at"],
    )


def _streak_params(job_id: UUID, streak: Streak) -> dict[str, Any]:
    return {
        "b_id": job_id,
        "b_count": streak.count,
        "b_last": streak.last_failure_at,
        "b_active": streak.is_active,
        "b_next": streak.next_run_at,
        "b_probing": streak.probing,
        "b_reason": streak.disabled_reason,
        "b_disabled_at": streak.disabled_at,
    }
