"""Rows <-> records: jobs (from the field table of :mod:`rota.core.jobfields`), occurrences,
status changes and failed occurrences; cursors, pages and id chunks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, Final, TypeVar
from uuid import UUID

from sqlalchemy import JSON, Row, Uuid

from rota.core.errors import ValidationError
from rota.core.jobfields import JOB_FIELDS, JobField, Part, Shape, version_snapshot
from rota.core.models import (
    ConcurrencyPolicy,
    FailedOccurrence,
    FailureType,
    Job,
    Occurrence,
    OccurrenceStatus,
    Priority,
    StatusChange,
)
from rota.core.records import Page, truncate_text
from rota.stores.schema import UtcDateTime, from_utc_text, jobs, utc_text
from rota.stores.sql.engine import _json_dumps

T = TypeVar("T")

ACTIVE = (int(OccurrenceStatus.QUEUED), int(OccurrenceStatus.RUNNING))
IN_CHUNK = 5000
"""Ids per ``IN (…)`` list: well below the bound-parameter limits of SQLite and asyncpg."""


# --- rows <-> records -------------------------------------------------------------------------

Codec = Callable[[Any], Any]
"""Converts one field's value between the record and its column."""


def _enum_value(member: Any) -> Any:
    """An enum member's value (an int or a string); ``None`` or a bare value as it is.
    (``_value_`` is the member's own attribute; ``value`` is a property, several times
    slower on Python 3.11, for every enum of every job a bulk create writes.)"""
    return getattr(member, "_value_", member)


def _encoder(field: JobField) -> Codec | None:
    """How a job field's value is written to its column (``None``: as it is)."""
    if field.shape is Shape.ENUM:
        return _enum_value
    if field.shape is Shape.TUPLE:
        return lambda value: None if value is None else list(value)
    if field.shape is Shape.MAPPING:
        return lambda value: None if value is None else dict(value)
    return None


def _decoder(field: JobField) -> Codec | None:
    """How a job field's value is read from its column (``None``: as it is; a mapping comes
    back as the dict it was written as; a ``NULL`` as the field's ``stored_default``)."""
    kind, default = field.enum, field.stored_default
    if kind is not None:
        return lambda value: default if value is None else kind(value)
    if field.shape is Shape.TUPLE:
        return tuple
    if default is not None:
        return lambda value: default if value is None else value
    return None


_Writes = tuple[Callable[[Job], tuple[Any, ...]], tuple[tuple[str, Codec | None], ...]]
"""What writes some fields of a job: their getter, and the column and encoder of each."""


def _writes(fields: Sequence[JobField]) -> _Writes:
    get = attrgetter(*(f.name for f in fields))  # one name: the value itself, not a tuple
    read = get if len(fields) > 1 else lambda job: (get(job),)
    return read, tuple((f.column, _encoder(f)) for f in fields)


_WRITE_PARTS = {part: _writes([f for f in JOB_FIELDS if f.part is part]) for part in Part}
_READS = tuple((f.name, f.column, _decoder(f)) for f in JOB_FIELDS)

_AUTO_DISABLE_STATE = tuple(f.column for f in JOB_FIELDS if f.part is Part.AUTO_DISABLE)
"""Job columns the status tracker keeps; ``update_job`` writes them only when asked."""

_STORE_ONLY_COLUMNS = ("duration_samples",)
"""Job columns that are no field of a job: the completed runs the average duration is over."""

_STORED_DEFAULTS = (
    *((f.column, _enum_value(d)) for f in JOB_FIELDS if (d := f.stored_default) is not None),
    ("duration_samples", 0),
)
"""The columns a compact store keeps as ``NULL`` when they hold this (encoded) value."""


def _job_columns(job: Job, part: Part) -> dict[str, Any]:
    """The columns of one part of a job, by column name."""
    read, codecs = _WRITE_PARTS[part]
    return {
        column: value if encode is None else encode(value)
        for (column, encode), value in zip(codecs, read(job), strict=True)
    }


def _job_definition(job: Job) -> dict[str, Any]:
    """The columns ``update_job`` replaces (not id, source, creation, or statistics)."""
    return _job_columns(job, Part.DEFINITION)


def _auto_disable_state(job: Job) -> dict[str, Any]:
    """The auto-disable state columns (kept by the status tracker)."""
    return _job_columns(job, Part.AUTO_DISABLE)


def _job_row(job: Job, *, compact: bool = False) -> dict[str, Any]:
    """A new job's row, by column name, values as the column types take them. ``compact``
    (PostgreSQL, migration 0024): the values every new job shares are ``NULL`` (see
    ``JobField.stored_default``), and so are ``updated_at`` and ``updated_by`` while they
    are the creation's."""
    return dict(zip(JOB_COLUMNS, _ROWS[compact](job), strict=True))


JOB_COLUMNS = tuple(c.name for c in jobs.columns)
"""The ``jobs`` table's columns in order: the order of a new job's records."""


def _record_writer(
    json_text: Codec | None = None,
    *,
    compact: bool,
    uuid_text: Codec | None = None,
    moment_text: Codec | None = None,
) -> Callable[[Job], tuple[Any, ...]]:
    """What makes a new job's record for a bulk insert: its values in the order of the
    ``jobs`` table's columns (``compact``: PostgreSQL's shared values as ``NULL``), and, for
    a driver called directly, the JSON columns as their text (``json_text``) and SQLite's ids
    and times as text (``uuid_text``, ``moment_text``). Built in one pass over the job (issue
    19: a bulk create's rows by name were a tenth of its server time)."""
    by_column = {f.column: f for f in JOB_FIELDS}
    if [n for n in JOB_COLUMNS if n not in by_column] != list(_STORE_ONLY_COLUMNS):
        raise RuntimeError("the jobs table's store-only columns changed: update _record_writer")
    samples = JOB_COLUMNS.index("duration_samples")  # inserted last, at its column
    columns = {c.name: c for c in jobs.columns}
    fields = [by_column[n] for n in JOB_COLUMNS if n in by_column]
    get_all = attrgetter(*(f.name for f in fields))
    defaults = dict(_STORED_DEFAULTS) if compact else {}
    texts = {UtcDateTime: moment_text, Uuid: uuid_text, JSON: json_text}
    steps = []
    for i, f in enumerate(fields):
        text = next(
            (t for kind, t in texts.items() if isinstance(columns[f.column].type, kind)), None
        )
        steps.extend(_record_steps(i, f, defaults, text))
    at = {f.name: i for i, f in enumerate(fields)}
    updated = (at["updated_at"], at["updated_by"])

    def record(job: Job) -> tuple[Any, ...]:
        values = list(get_all(job))
        if compact and job.updated_at == job.created_at and job.updated_by == job.created_by:
            values[updated[0]] = values[updated[1]] = None
        for i, step in steps:
            values[i] = step(values[i])
        count = 0 if job.average_duration_ms is None else job.success_count
        values.insert(samples, (count or None) if compact else count)
        return tuple(values)

    return record


def _record_steps(
    i: int, field: JobField, defaults: dict[str, Any], text: Codec | None
) -> list[tuple[int, Codec]]:
    """The conversions of one field's value into its record value, in order."""
    out: list[tuple[int, Codec]] = []
    encode = _encoder(field)
    if encode is not None:
        out.append((i, encode))
    if field.column in defaults:  # (an encoded value against the encoded default)
        default = defaults[field.column]
        out.append((i, lambda value: None if value == default else value))
    if text is not None:
        out.append((i, lambda value: None if value is None else text(value)))
    return out


_ROWS = {compact: _record_writer(compact=compact) for compact in (False, True)}
"""A new job's values for a statement (SQLAlchemy converts them), by ``compact``."""
_copy_record = _record_writer(_json_dumps, compact=True)
"""A new job's compact COPY record (PostgreSQL; see :func:`_record_writer`)."""
_sqlite_record = _record_writer(
    _json_dumps, compact=False, uuid_text=attrgetter("hex"), moment_text=utc_text
)
"""A new job's executemany parameters (SQLite; see :func:`_record_writer`)."""


def _to_job(row: Row[Any]) -> Job:
    m = row._mapping
    fields = {
        name: m[column] if decode is None else decode(m[column]) for name, column, decode in _READS
    }
    if fields["updated_at"] is None:  # a compact row never changed: its creation's
        fields["updated_at"], fields["updated_by"] = fields["created_at"], fields["created_by"]
    return Job(**fields)


_PLANNING = tuple((f.name, f.column, _decoder(f)) for f in JOB_FIELDS if f.planned)
_PLANNING_COLUMNS = tuple(jobs.c[column] for _, column, _ in _PLANNING)
"""What the fire planner reads of a job, the id first."""


def _to_planning_job(row: Row[Any]) -> Job:
    """A job with its definition only (what a planner needs); display fields, audit fields
    and statistics keep their defaults. Loading fewer columns keeps dispatch cheap."""
    return Job(
        **{
            name: value if decode is None else decode(value)
            for (name, _, decode), value in zip(_PLANNING, row, strict=True)
        }
    )


def _snapshot(job: Job) -> dict[str, Any]:
    """The versioned fields of a job under their API names (JSON values)."""
    return version_snapshot(job)


def _last_sign(occurrence: Occurrence) -> datetime:
    """When a stale occurrence last showed life: its heartbeat or start (Running), its
    dispatch (Queued)."""
    if occurrence.status is OccurrenceStatus.QUEUED and occurrence.dispatched_at is not None:
        return occurrence.dispatched_at
    return occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at


UNSTARTED_COLUMNS: Final = (
    "instance_id",
    "start_time",
    "duration_ms",
    "result",
    "exception",
    "last_heartbeat",
)
"""An occurrence's columns that stay empty until a worker takes it: a new fire's insert
leaves them out (fewer arrays to encode and unnest; a Skipped fire's ``end_time`` is set, so
it is not among them)."""


def _occurrence_row(
    occ: Occurrence,
    policy: ConcurrencyPolicy,
    dispatched_at: datetime | None = None,
    *,
    counted: bool = True,
) -> dict[str, Any]:
    """The row of ``occ``; ``dispatched_at``: inserted dispatched then (a batch's, sent by
    the dispatcher that commits it); ``counted`` false: kept out of its job's
    ``occurrence_counts`` rows (a one-time job's fire: ``rota.stores.sql.aggregates``)."""
    return {
        "id": occ.id,
        "job_id": occ.job_id,
        "job_type": occ.job_type,
        "worker_id": occ.worker_id,
        "status": int(occ.status),
        "scheduled_for": occ.scheduled_for,
        "due_at": occ.due_at,
        "created_at": occ.created_at,
        "attempt": occ.attempt,
        "max_retries": occ.max_retries,
        "priority": int(occ.priority),
        "timeout_seconds": occ.timeout_seconds,
        "job_version": occ.job_version,
        "job_data": occ.job_data,
        "dispatched_at": dispatched_at or occ.dispatched_at,
        "instance_id": occ.instance_id,
        "start_time": occ.start_time,
        "end_time": occ.end_time,
        "duration_ms": occ.duration_ms,
        "result": occ.result,
        "exception": occ.exception,
        "skip_reason": occ.skip_reason,
        "last_heartbeat": occ.last_heartbeat,
        "trigger_reason": occ.trigger_reason,
        "retry_delay_seconds": occ.retry_delay_seconds,
        "traceparent": occ.traceparent,
        "jitter_seconds": occ.jitter_seconds,
        "concurrency_policy": int(policy),
        "history": [history_entry(c) for c in occ.status_changes] or None,
        "counted": counted,
    }


def _to_occurrence(row: Row[Any], *, with_history: bool = False) -> Occurrence:
    """The occurrence of ``row``; its status history (``status_changes``) only when asked
    (the lists leave it out)."""
    m = row._mapping
    return Occurrence(
        id=m["id"],
        job_id=m["job_id"],
        job_type=m["job_type"],
        worker_id=m["worker_id"],
        status=OccurrenceStatus(m["status"]),
        scheduled_for=m["scheduled_for"],
        due_at=m["due_at"],
        created_at=m["created_at"],
        attempt=m["attempt"],
        max_retries=m["max_retries"],
        priority=Priority(m["priority"]),
        timeout_seconds=m["timeout_seconds"],
        job_version=m["job_version"],
        job_data=m["job_data"],
        dispatched_at=m["dispatched_at"],
        instance_id=m["instance_id"],
        start_time=m["start_time"],
        end_time=m["end_time"],
        duration_ms=m["duration_ms"],
        result=m["result"],
        exception=m["exception"],
        skip_reason=m["skip_reason"],
        last_heartbeat=m["last_heartbeat"],
        trigger_reason=m["trigger_reason"],
        retry_delay_seconds=m["retry_delay_seconds"],
        traceparent=m["traceparent"],
        jitter_seconds=m.get("jitter_seconds"),
        status_changes=to_changes(m["history"]) if with_history else (),
    )


# An occurrence's status history is a JSON array in its row (``history``, migration 0029),
# appended to by the statement that changes the occurrence. Each entry: ``at`` (UTC, as
# :func:`~rota.stores.schema.utc_text` writes it), ``to`` and ``attempt``, and ``from`` and
# ``reason`` when they are not null; statuses as their codes.


def history_entry(change: StatusChange) -> dict[str, Any]:
    """The history entry of ``change``."""
    return change_entry(
        change.timestamp,
        None if change.from_status is None else int(change.from_status),
        int(change.to_status),
        change.attempt,
        change.reason,
    )


def change_entry(
    at: datetime, from_status: int | None, to_status: int, attempt: int, reason: str | None
) -> dict[str, Any]:
    """A history entry from its parts (statuses as their codes)."""
    entry: dict[str, Any] = {"at": utc_text(at), "to": to_status, "attempt": attempt}
    if from_status is not None:
        entry["from"] = from_status
    if reason is not None:
        entry["reason"] = reason
    return entry


def to_changes(history: Sequence[dict[str, Any]] | None) -> tuple[StatusChange, ...]:
    """The status changes of a stored history, oldest first (``NULL``: none)."""
    if not history:
        return ()
    return tuple(
        StatusChange(
            timestamp=from_utc_text(e["at"]),
            from_status=None if e.get("from") is None else OccurrenceStatus(e["from"]),
            to_status=OccurrenceStatus(e["to"]),
            attempt=e["attempt"],
            reason=e.get("reason"),
        )
        for e in history
    )


def _encode_cursor(last_id: UUID) -> str:
    return last_id.hex


def _decode_cursor(cursor: str) -> UUID:
    try:
        return UUID(hex=cursor)
    except ValueError:
        raise ValidationError("invalid cursor", field="cursor") from None


def _page(items: list[T], limit: int, key: Callable[[T], UUID]) -> Page[T]:
    if len(items) > limit:
        items = items[:limit]
        return Page(items=items, next_cursor=_encode_cursor(key(items[-1])))
    return Page(items=items)


def _chunks(ids: Sequence[T], size: int = IN_CHUNK) -> Iterable[Sequence[T]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def _unique(ids: Iterable[UUID]) -> list[UUID]:
    return list(dict.fromkeys(ids))


# --- failed occurrences (dead letters) --------------------------------------------------------

MANUAL_RETRY = "manual retry"
"""The reason of the status change :meth:`SqlStore.retry_failed` records."""
RETRIED = "retried"
"""The resolution action of a failed occurrence that was retried."""
_RETRYABLE = frozenset(
    {OccurrenceStatus.FAILED, OccurrenceStatus.TIMED_OUT, OccurrenceStatus.UNKNOWN}
)
_FAILURE_TYPES = {t.value: t for t in FailureType}


def _failed_row(record: FailedOccurrence) -> dict[str, Any]:
    return {
        "id": record.id,
        "occurrence_id": record.occurrence_id,
        "job_id": record.job_id,
        "job_type": record.job_type,
        "failure_type": record.failure_type.value,
        "exception": truncate_text(record.exception),
        "job_data": record.job_data,
        "attempts": record.attempts,
        "failed_at": record.failed_at,
        "created_at": record.created_at,
        "resolved": record.resolved,
        "resolved_at": record.resolved_at,
        "resolved_by": record.resolved_by,
        "resolution_note": record.resolution_note,
        "resolution_action": record.resolution_action,
        "raw_message": truncate_text(record.raw_message),
    }


def _to_failed(row: Row[Any]) -> FailedOccurrence:
    m = row._mapping
    failure = m["failure_type"]
    return FailedOccurrence(
        id=m["id"],
        occurrence_id=m["occurrence_id"],
        job_id=m["job_id"],
        job_type=m["job_type"],
        failure_type=_FAILURE_TYPES.get(failure, FailureType.POISON),
        exception=m["exception"],
        job_data=m["job_data"],
        attempts=m["attempts"],
        failed_at=m["failed_at"],
        created_at=m["created_at"],
        resolved=bool(m["resolved"]),
        resolved_at=m["resolved_at"],
        resolved_by=m["resolved_by"],
        resolution_note=m["resolution_note"],
        resolution_action=m["resolution_action"],
        raw_message=m["raw_message"],
    )
