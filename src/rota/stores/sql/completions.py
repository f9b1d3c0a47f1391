"""Runs that completed, applied set-based: a status batch of ``Completed`` reports is one
statement over the batch's arrays on PostgreSQL (it locks the occurrences in id order, checks
each against its report, sets its end and appends its history in SQL), a read and one
statement over a JSON array on SQLite. No row is read into Python to be judged, and nothing
is built per occurrence but its statistics and its applied change.

It applies exactly what the rules of :mod:`rota.core.transitions` decide for the common
case, and only that: a ``Completed`` report of the attempt an occurrence is at, Queued or
Running (a worker's report of a short run folds its ``Running`` into it: the history then
shows both steps, the start at the report's ``startedAt``, else its time less its
duration). Every other record, and a report that finds its occurrence otherwise (an older or
newer attempt, already ended, unknown), goes through those rules (``StatusQueries``) in the
same transaction; the store's contract suite holds both to the same outcomes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.models import WAITING_POLICIES, OccurrenceStatus, StatusRecord
from rota.core.records import AppliedChange
from rota.stores.schema import from_utc_text, utc_text
from rota.stores.sql.aggregates import StatDeltas, durations
from rota.stores.sql.engine import _json_dumps

_COMPLETED = OccurrenceStatus.COMPLETED
_QUEUED, _RUNNING = int(OccurrenceStatus.QUEUED), int(OccurrenceStatus.RUNNING)
_WAITING = frozenset(int(p) for p in WAITING_POLICIES)
_STATUSES = {int(s): s for s in OccurrenceStatus}


def _entry(at: str, from_status: str, to_status: int) -> str:
    """A history entry (``rota.stores.sql.rows.change_entry``) in SQL, as JSON text (the
    entries of a completion are cast to ``jsonb`` once: ``jsonb_build_object`` cost PostgreSQL
    twice as much a row): its time as the naive UTC text the history keeps."""
    text = f"to_char(({at}) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
    return (
        f"""'{{"at": "' || {text} || '", "from": ' || {from_status} || ', "to": {to_status}, """
        """"attempt": ' || r.attempt || '}'"""
    )


def _entries(*entries: str) -> str:
    """History entries (:func:`_entry`) as one ``jsonb`` array."""
    return "('[' || " + " || ', ' || ".join(entries) + " || ']')::jsonb"


def _ended(row: str) -> str:
    """What a completion sets in the occurrence ``row`` (its alias) from its report ``r``,
    but its history (each dialect appends its own way)."""
    return f"""status = {int(_COMPLETED)},
    instance_id = coalesce(r.instance_id, {row}.instance_id),
    exception = r.exception,
    result = coalesce(r.result, {row}.result),
    duration_ms = r.duration_ms,
    end_time = r.at,
    start_time = coalesce({row}.start_time, r.started)"""


def _from_micros(column: str) -> str:
    """A time sent as microseconds since the epoch (:func:`_micros`), exactly, in SQL."""
    return f"'epoch'::timestamptz + {column} * interval '1 microsecond'"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime) -> int:
    """``at`` (aware) as whole microseconds since the epoch: what asyncpg sends of an
    ``int8`` costs a tenth of a ``timestamptz`` (0.9 µs a value, measured in
    ``bench/2026-11-30-distributed-cpu.md``), and the statement turns it back exactly."""
    d = at - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


_STARTED_AND_ENDED = _entries(
    _entry("r.started", str(_QUEUED), _RUNNING), _entry("r.at", str(_RUNNING), int(_COMPLETED))
)
"""A short run's report on a Queued occurrence: its start and its end."""
_ENDED_ONLY = _entries(_entry("r.at", "r.was_status", int(_COMPLETED)))

COMPLETE_RUNS = f"""
WITH r AS (
    SELECT id, attempt, {_from_micros("at_us")} AS at, {_from_micros("started_us")} AS started,
        instance_id, duration_ms, result, exception
    FROM unnest(
        $1::uuid[], $2::integer[], $3::bigint[], $4::bigint[],
        $5::varchar[], $6::double precision[], $7::json[], $8::text[]
    ) AS r(id, attempt, at_us, started_us, instance_id, duration_ms, result, exception)
), cur AS (
    SELECT r.*, o.scheduled_for, o.job_id, o.status AS was_status, o.end_time AS was_end,
        o.duration_ms AS was_duration
    FROM r JOIN occurrences o ON o.id = r.id
    WHERE o.attempt = r.attempt AND o.status IN ({_QUEUED}, {_RUNNING})
    ORDER BY o.id
    FOR UPDATE OF o
)
UPDATE occurrences o SET
    {_ended("o")},
    history = coalesce(o.history, '[]'::jsonb) || CASE
        WHEN r.was_status = {_QUEUED} AND r.instance_id IS NOT NULL THEN {_STARTED_AND_ENDED}
        ELSE {_ENDED_ONLY}
    END
FROM cur r LEFT JOIN jobs j ON j.id = r.job_id
WHERE o.id = r.id AND o.scheduled_for = r.scheduled_for
RETURNING o.id, o.job_id, o.job_type, o.worker_id, o.concurrency_policy, o.counted,
    r.was_status, r.was_end, r.was_duration,
    coalesce(j.consecutive_failures, 0) <> 0 OR coalesce(j.probing, false)
"""
"""The batch's completions: the arrays are the reports' occurrence ids, attempts, times and
starts (``startedAt``, else the time less the duration) in microseconds since the epoch
(:func:`_micros`), instances, durations, results (JSON text) and exceptions. Returns each
occurrence it completed, with its state before and whether its job has a failure streak or a
probe to end."""


_SQLITE_REPORTS = """
    SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt,
        json_extract(value, '$[2]') AS at, json_extract(value, '$[3]') AS started,
        json_extract(value, '$[4]') AS instance_id, json_extract(value, '$[5]') AS duration_ms,
        json_extract(value, '$[6]') AS result, json_extract(value, '$[7]') AS exception
    FROM json_each(:reports)"""


def _sqlite_entry(at: str, from_status: str, to_status: int) -> str:
    return (
        f"json_object('at', {at}, 'to', {to_status}, 'attempt', r.attempt, 'from', {from_status})"
    )


COMPLETED_BEFORE_SQLITE = f"""
SELECT json_group_array(json_array(o.id, o.job_id, o.job_type, o.worker_id,
    o.concurrency_policy, o.counted, o.status, o.end_time, o.duration_ms,
    coalesce(j.consecutive_failures, 0) <> 0 OR coalesce(j.probing, 0)))
FROM ({_SQLITE_REPORTS}) r
CROSS JOIN occurrences o ON o.id = r.id
LEFT JOIN jobs j ON j.id = o.job_id
WHERE +o.attempt = r.attempt AND +o.status IN ({_QUEUED}, {_RUNNING})
"""
"""SQLite (one writer: nothing to lock), first: the occurrences the reports complete, as they
are (the columns :data:`COMPLETE_RUNS` returns). The reports are one JSON array, each
``[id, attempt, time, start, instance, duration, result as JSON text, exception]``, ids and
times as SQLite keeps them. The plan starts from the reports and finds each occurrence by its
id (``CROSS JOIN`` fixes the order; ``+`` keeps the status index out), whatever the table's
size."""

_HISTORY = "occurrences.history"
_APPENDED = f"""CASE
        WHEN occurrences.status = {_QUEUED} AND r.instance_id IS NOT NULL THEN json_array(
            {_sqlite_entry("r.started", str(_QUEUED), _RUNNING)},
            {_sqlite_entry("r.at", str(_RUNNING), int(_COMPLETED))})
        ELSE json_array({_sqlite_entry("r.at", "occurrences.status", int(_COMPLETED))})
    END"""

COMPLETE_RUNS_SQLITE = f"""
UPDATE occurrences SET
    {_ended("occurrences")},
    history = coalesce(
        substr(nullif({_HISTORY}, '[]'), 1, length({_HISTORY}) - 1) || ',', '['
    ) || substr({_APPENDED}, 2)
FROM ({_SQLITE_REPORTS}) r
WHERE occurrences.id = r.id AND +occurrences.attempt = r.attempt
    AND +occurrences.status IN ({_QUEUED}, {_RUNNING})
"""
"""SQLite, then: the same reports applied (the history's text spliced as
``history_append`` does); the id is the only index it can use, so each report finds its
occurrence by it."""


def completions(records: Sequence[StatusRecord]) -> bool:
    """Whether a status batch is one for :data:`COMPLETE_RUNS`: every record a
    ``Completed`` report with its duration (what a worker sends at the end of a run), no
    failure type, each of a different occurrence."""
    for record in records:
        if (
            record.status is not _COMPLETED
            or record.duration_ms is None
            or record.failure_type is not None
            or record.retry_at is not None
        ):
            return False
    return len({r.occurrence_id for r in records}) == len(records)


class Completions:
    """A status batch of ``Completed`` reports (:func:`completions` holds) that find their
    occurrence at their attempt, Queued or Running, applied set-based, in three steps so
    that the writer's transaction holds only the statements and the statistics: the reports'
    parameters are built before it (the constructor), applied in it (PostgreSQL :meth:`run`:
    :data:`COMPLETE_RUNS`; SQLite :meth:`run_sqlite`, on the hot writer's thread:
    :data:`COMPLETED_BEFORE_SQLITE` and :data:`COMPLETE_RUNS_SQLITE`), and the changes
    applied are built after it (:meth:`applied`)."""

    __slots__ = ("_done", "_params", "_records")

    def __init__(self, dialect: str, records: Sequence[StatusRecord]) -> None:
        self._records = records
        self._done: dict[UUID, tuple[Any, ...]] = {}
        self._params: Any
        if dialect == "sqlite":
            hexes = [r.occurrence_id.hex for r in records]
            known = dict(zip(hexes, (r.occurrence_id for r in records), strict=True))
            self._params = (_sqlite_reports(records, hexes), known)
            return
        arrays: tuple[list[object], ...] = ([], [], [], [], [], [], [], [])
        ids, attempts, ats, starts, instances, durations_, results, exceptions = arrays
        for r in records:
            ids.append(r.occurrence_id)
            attempts.append(r.attempt)
            ats.append(_micros(r.timestamp))
            starts.append(_micros(_start(r)))
            instances.append(r.instance_id)
            durations_.append(r.duration_ms)
            results.append(None if r.result is None else _json_dumps(r.result))
            exceptions.append(r.exception)
        self._params = arrays

    async def run(self, conn: AsyncConnection, deltas: StatDeltas) -> tuple[set[UUID], list[UUID]]:
        """PostgreSQL: apply the reports in ``conn``'s transaction, their statistics into
        ``deltas``. Returns the occurrences they completed, and the jobs among theirs with a
        failure streak or a probe, which these successes end (``_reset_streaks_stmt``)."""
        result = await conn.exec_driver_sql(COMPLETE_RUNS, self._params)
        self._done = {row[0]: tuple(row) for row in result.all()}
        return set(self._done), self._count(deltas)

    def run_sqlite(self, db: sqlite3.Connection, deltas: StatDeltas) -> set[UUID] | None:
        """SQLite: apply the reports in ``db``'s transaction (on the hot writer's thread),
        their statistics into ``deltas``; returns the occurrences they completed. ``None``,
        with nothing written, when one of their jobs has a failure streak or a probe to end:
        the caller applies the batch through the rules (``StatusQueries``) instead."""
        reports, known = self._params
        (found,) = db.execute(COMPLETED_BEFORE_SQLITE, {"reports": reports}).fetchone()
        rows = orjson.loads(found)
        if any(row[9] for row in rows):
            return None
        if rows:
            db.execute(COMPLETE_RUNS_SQLITE, {"reports": reports})
        done = self._done
        for row in rows:
            occurrence_id = known[row[0]]  # the report's id, not parsed again
            end = row[7]
            done[occurrence_id] = (
                occurrence_id,
                UUID(row[1]),
                row[2],
                row[3],
                row[4],
                bool(row[5]),
                row[6],
                None if end is None else from_utc_text(end),
                row[8],
                False,
            )
        self._count(deltas)
        return set(done)

    def _count(self, deltas: StatDeltas) -> list[UUID]:
        """The statistics of the occurrences completed into ``deltas``; returns the jobs
        among theirs with a failure streak or a probe."""
        streaks: list[UUID] = []
        for r, row in self._completed():
            job_id, counted, before, end_before, duration_before, streak = (
                row[1],
                row[5],
                row[6],
                row[7],
                row[8],
                row[9],
            )
            duration = r.duration_ms
            deltas.add(job_id, before, end_before, duration_before, -1, counted=counted)
            deltas.add(job_id, _COMPLETED, r.timestamp, duration, counted=counted)
            if counted:
                deltas.ran(job_id, _COMPLETED, 1, *durations(duration))
            if streak:
                streaks.append(job_id)
        return sorted(set(streaks))

    def applied(self) -> list[AppliedChange]:
        """The changes :meth:`run` applied, in the reports' order."""
        applied: list[AppliedChange] = []
        for r, row in self._completed():
            occurrence_id, job_id, job_type, worker_id, policy, _counted, before = row[:7]
            applied.append(
                AppliedChange(
                    occurrence_id=occurrence_id,
                    job_id=job_id,
                    from_status=_STATUSES[before],
                    to_status=_COMPLETED,
                    attempt=r.attempt,
                    job_type=job_type,
                    worker_id=worker_id,
                    instance_id=r.instance_id,
                    queue_policy=policy in _WAITING,
                )
            )
        return applied

    def _completed(self) -> Iterator[tuple[StatusRecord, tuple[Any, ...]]]:
        """Each report that completed its occurrence, with the occurrence's row as it was,
        in the reports' order."""
        done = self._done
        for r in self._records:
            row = done.get(r.occurrence_id)
            if row is not None:
                yield r, row


def _start(record: StatusRecord) -> datetime:
    """When the run a completion reports started: its ``startedAt``, else its time less its
    duration (:func:`~rota.core.transitions.folded_start`, ``apply_change``)."""
    duration = record.duration_ms
    assert duration is not None  # completions() holds
    return record.started_at or record.timestamp - timedelta(milliseconds=duration)


def _sqlite_reports(records: Sequence[StatusRecord], hexes: Sequence[str]) -> str:
    """The reports as :data:`COMPLETED_BEFORE_SQLITE` takes them (``hexes``: their
    occurrences' ids as SQLite keeps them): one JSON array."""
    return _json_dumps(
        [
            [
                h,
                r.attempt,
                utc_text(r.timestamp),
                utc_text(_start(r)),
                r.instance_id,
                r.duration_ms,
                None if r.result is None else _json_dumps(r.result),
                r.exception,
            ]
            for h, r in zip(hexes, records, strict=True)
        ]
    )
