"""The SQL store: one SQLAlchemy Core (async) implementation for SQLite and PostgreSQL.

The dialect-specific parts are few and named:

- SQLite (aiosqlite): WAL, ``synchronous=NORMAL``, a busy timeout, foreign keys on. Writes go
  through one writer connection, serialized by an asyncio lock, in ``BEGIN IMMEDIATE``
  transactions; reads use a small pool of other connections (WAL readers never block).
- PostgreSQL (asyncpg): one pool for reads and writes; rows being claimed are locked with
  ``FOR UPDATE SKIP LOCKED`` (SQLite's compiler renders no locking clause, which is right: its
  writer lock already serializes the writes).

Hot paths write each batch with one statement per table (executemany / multi-row VALUES).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any, TypeVar
from uuid import UUID

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    Float,
    Integer,
    Row,
    Select,
    Table,
    Uuid,
    and_,
    any_,
    bindparam,
    case,
    cast,
    column,
    delete,
    event,
    exists,
    extract,
    false,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy import table as sa_table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.sql.dml import UpdateBase

from rota.core.autodisable import (
    AutoDisableDefaults,
    probe_due,
)
from rota.core.errors import (
    BackendUnavailableError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from rota.core.ids import new_id
from rota.core.jobfields import JOB_FIELDS, JobField, Part, Shape
from rota.core.models import (
    ConcurrencyPolicy,
    DispatcherState,
    FailedOccurrence,
    FailureType,
    Job,
    JobSource,
    JobVersion,
    LogRecord,
    Occurrence,
    OccurrenceStatus,
    Priority,
    StatusChange,
    StatusRecord,
    ZombiePolicy,
    utcnow,
)
from rota.core.planning import FirePlan
from rota.core.ports import Store
from rota.core.records import (
    DisabledJob,
    DispatchResult,
    DueEntry,
    FailedQuery,
    FirePlanner,
    JobQuery,
    OccurrenceQuery,
    Page,
    PartitionReport,
    PartitionUpkeep,
    ProbeScan,
    PurgeBatch,
    StaleOccurrence,
    StatusResult,
    StoreOverview,
    TagCount,
    ThroughputPoint,
    truncate_text,
)
from rota.core.transitions import (
    CURRENT_FIELDS,
    Current,
    StatusBatch,
    Streak,
    apply_records,
    final_failures,
)
from rota.stores import partitions
from rota.stores.schema import (
    PARTITIONED_BY,
    UtcDateTime,
    aware_utc,
    failed_occurrences,
    job_tags,
    job_versions,
    jobs,
    occurrence_logs,
    occurrences,
    scheduler_control,
    status_changes,
    utc_text,
)
from rota.stores.sql_security import SecurityQueries
from rota.stores.urls import dialect_of, sqlite_path, to_async_url

log = logging.getLogger(__name__)

T = TypeVar("T")

ACTIVE = (int(OccurrenceStatus.QUEUED), int(OccurrenceStatus.RUNNING))
IN_CHUNK = 5000
"""Ids per ``IN (…)`` list: well below the bound-parameter limits of SQLite and asyncpg."""


# --- engines ----------------------------------------------------------------------------------


def _json_loads(value: Any) -> Any:
    """Parse stored JSON. SQLite gives a column declared ``JSON`` numeric affinity, so a bare
    JSON number comes back already converted to an int or float: take it as it is."""
    if isinstance(value, int | float):
        return value
    return orjson.loads(value)


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def create_store_engine(
    url: str,
    *,
    writer: bool = True,
    pool_size: int = 5,
    foreign_keys: bool = True,
    busy_timeout_ms: int = 10_000,
) -> AsyncEngine:
    """An async engine for a user URL (``sqlite:///…`` or ``postgresql://…``).

    For SQLite: ``writer`` connections open ``BEGIN IMMEDIATE`` transactions, others plain
    ``BEGIN``; ``foreign_keys`` is turned off only for migrations (batch table rebuilds).
    """
    async_url = to_async_url(url)
    common: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": _json_loads}
    if dialect_of(url) == "postgresql":
        return create_async_engine(
            async_url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=True,
            pool_recycle=1800,
            **common,
        )
    engine = create_async_engine(
        async_url, pool_size=pool_size, max_overflow=0 if writer else pool_size, **common
    )
    _configure_sqlite(engine, writer=writer, foreign_keys=foreign_keys, busy_ms=busy_timeout_ms)
    return engine


def _configure_sqlite(
    engine: AsyncEngine, *, writer: bool, foreign_keys: bool, busy_ms: int
) -> None:
    pragmas = (
        f"PRAGMA busy_timeout={int(busy_ms)}",
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=NORMAL",
        "PRAGMA cache_size=-65536",
        "PRAGMA temp_store=MEMORY",
        f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}",
    )
    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    def on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the driver; ``on_begin`` emits our own BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    def on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(begin)

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)


_DRIVER_MODULES = frozenset({"asyncpg", "aiosqlite", "sqlite3"})
"""Top-level modules of the database drivers, whose own exceptions mean the store failed."""


@asynccontextmanager
async def guard_errors() -> AsyncIterator[None]:
    """Translate driver errors: duplicates -> ``ConflictError``, everything else the database
    or the network raised -> ``BackendUnavailableError``."""
    try:
        yield
    except IntegrityError as exc:
        raise ConflictError(f"conflicts with stored data: {exc.orig}") from exc
    except DBAPIError as exc:
        cause = exc.orig if exc.orig is not None else exc
        raise BackendUnavailableError(f"database error: {type(cause).__name__}: {cause}") from exc
    except (PoolTimeoutError, OSError, TimeoutError) as exc:
        raise BackendUnavailableError(f"database unreachable: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        # A driver error SQLAlchemy does not wrap: asyncpg raises its own while connecting
        # (``CannotConnectNowError`` while PostgreSQL starts or stops, ``TooManyConnections``…).
        if type(exc).__module__.split(".")[0] in _DRIVER_MODULES:
            raise BackendUnavailableError(
                f"database unreachable: {type(exc).__name__}: {exc}"
            ) from exc
        raise


# --- hot batch writes -------------------------------------------------------------------------


def _uuid_hex(value: UUID | None) -> str | None:
    return None if value is None else value.hex


def _sqlite_datetime(value: datetime | None) -> str | None:
    return None if value is None else utc_text(value)


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else aware_utc(value)


def _json_or_null(value: Any) -> str | None:
    return None if value is None else _json_dumps(value)


_Converter = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Prepared:
    sql: str
    values: Callable[[dict[str, Any]], Any]
    """A row's parameters in statement order (``operator.itemgetter``)."""
    single: bool
    """One parameter: ``values`` returns it bare, not in a tuple."""
    converters: tuple[tuple[int, _Converter], ...]
    """Positions whose value the driver needs converted."""
    columnar: str | None = None
    """PostgreSQL: the same statement over ``unnest`` of one array per parameter (one
    execution for the whole batch instead of one per row)."""
    keys: tuple[int, ...] = ()
    """Positions of the parameters in an UPDATE's WHERE clause: the columnar form is used
    only when no two rows share them (``UPDATE … FROM`` would apply just one of them)."""


_CAST = re.compile(r"\$(\d+)::(TIMESTAMP WITH TIME ZONE|DOUBLE PRECISION|[A-Z]+)")


def _columnar(sql: str) -> tuple[str, tuple[int, ...]] | None:
    """The ``unnest`` form of a compiled PostgreSQL INSERT … VALUES or UPDATE … WHERE whose
    parameters are all ``$n::TYPE``, and the positions of an UPDATE's key parameters;
    ``None`` for any other shape."""
    types: dict[int, str] = {}
    for number, type_ in _CAST.findall(sql):
        types.setdefault(int(number), type_)
    if not types or sorted(types) != list(range(1, len(types) + 1)):
        return None
    arrays = ", ".join(f"${n}::{types[n]}[]" for n in sorted(types))
    if sql.startswith("INSERT INTO "):
        head, sep, rest = sql.partition(" VALUES (")
        values, close, tail = rest.partition(")")
        if not sep or not close or _CAST.sub("", values).strip(", ") != "":
            return None
        tail = tail.split(" RETURNING ", 1)[0]
        return f"{head} SELECT * FROM unnest({arrays}){tail}", ()
    if sql.startswith("UPDATE "):
        sets, sep, where = sql.partition(" WHERE ")
        if not sep:
            return None
        names = ", ".join(f"p{n}" for n in sorted(types))
        keys = tuple(sorted({int(n) - 1 for n, _ in _CAST.findall(where)}))

        def column(match: re.Match[str]) -> str:
            return f"v.p{match[1]}"

        body = f"{_CAST.sub(column, sets)} FROM unnest({arrays}) AS v({names})"
        return f"{body} WHERE {_CAST.sub(column, where)}", keys
    return None


class _FastBatches:
    """``executemany`` of hot statements with driver-level parameters.

    On batches of thousands of rows SQLAlchemy's per-row parameter processing costs more than
    the database's work. These statements are compiled once per store; their parameters are
    converted here exactly as the column types convert them (UUIDs: hex text in SQLite; UTC
    datetimes: naive ISO text in SQLite; JSON: text) and handed to the driver as tuples.
    Every parameter of such a statement must be a named ``bindparam`` with a type.
    """

    def __init__(self, dialect: str) -> None:
        sqlite = dialect == "sqlite"
        self._uuid: _Converter | None = _uuid_hex if sqlite else None
        self._datetime: _Converter = _sqlite_datetime if sqlite else _aware
        self._prepared: dict[str, _Prepared] = {}

    async def execute(
        self,
        conn: AsyncConnection,
        key: str,
        make: Callable[[], UpdateBase],
        rows: Sequence[dict[str, Any]],
    ) -> int:
        """Run the statement ``make()`` (cached under ``key``) once per row; returns the
        driver's row count (``-1`` when it reports none)."""
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = self._prepare(make(), conn)
        params = self._params(prepared, rows)
        if prepared.columnar is not None and len(params) > 1 and _distinct(params, prepared.keys):
            arrays = tuple(list(column) for column in zip(*params, strict=True))
            result = await conn.exec_driver_sql(prepared.columnar, arrays)
        else:
            result = await conn.exec_driver_sql(prepared.sql, params)
        return int(result.rowcount)

    @staticmethod
    def _params(prepared: _Prepared, rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
        values = prepared.values
        if prepared.single:
            conv = prepared.converters[0][1] if prepared.converters else None
            return [(values(r) if conv is None else conv(values(r)),) for r in rows]
        if not prepared.converters:
            return [values(r) for r in rows]
        out: list[tuple[Any, ...]] = []
        converters = prepared.converters
        for row in rows:
            params = list(values(row))
            for index, conv in converters:
                params[index] = conv(params[index])
            out.append(tuple(params))
        return out

    def _prepare(self, stmt: UpdateBase, conn: AsyncConnection) -> _Prepared:
        compiled = stmt.compile(dialect=conn.dialect)
        names = compiled.positiontup
        if not names:
            raise TypeError("fast batches need a positional paramstyle and parameters")
        converters: list[tuple[int, _Converter]] = []
        for index, name in enumerate(names):
            bind = compiled.binds[name]
            if not bind.required:
                raise TypeError(f"parameter {name} of a fast batch has a fixed value")
            conv = self._converter(bind.type)
            if conv is not None:
                converters.append((index, conv))
        columnar = _columnar(compiled.string) if conn.dialect.name == "postgresql" else None
        return _Prepared(
            compiled.string,
            itemgetter(*names),
            len(names) == 1,
            tuple(converters),
            None if columnar is None else columnar[0],
            () if columnar is None else columnar[1],
        )

    def _converter(self, type_: Any) -> _Converter | None:
        if isinstance(type_, UtcDateTime):
            return self._datetime
        if isinstance(type_, Uuid):
            return self._uuid
        if isinstance(type_, JSON):
            return _json_or_null
        return None


def _distinct(params: Sequence[tuple[Any, ...]], keys: tuple[int, ...]) -> bool:
    """Whether no two rows share their values at ``keys``."""
    if not keys:
        return True
    if len(keys) == 1:
        key = keys[0]
        return len({row[key] for row in params}) == len(params)
    return len({tuple(row[i] for i in keys) for row in params}) == len(params)


# --- rows <-> records -------------------------------------------------------------------------

Codec = Callable[[Any], Any]
"""Converts one field's value between the record and its column."""


def _enum_value(member: Any) -> Any:
    """An enum member's value (an int or a string); ``None`` or a bare value as it is."""
    return getattr(member, "value", member)


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
    back as the dict it was written as)."""
    kind = field.enum
    if kind is not None:
        return lambda value: None if value is None else kind(value)
    if field.shape is Shape.TUPLE:
        return tuple
    return None


_Writes = tuple[Callable[[Job], tuple[Any, ...]], tuple[tuple[str, Codec | None], ...]]
"""What writes some fields of a job: their getter, and the column and encoder of each."""


def _writes(fields: Sequence[JobField]) -> _Writes:
    get = attrgetter(*(f.name for f in fields))  # one name: the value itself, not a tuple
    read = get if len(fields) > 1 else lambda job: (get(job),)
    return read, tuple((f.column, _encoder(f)) for f in fields)


_WRITE_ALL = _writes(JOB_FIELDS)
_WRITE_PARTS = {part: _writes([f for f in JOB_FIELDS if f.part is part]) for part in Part}
_READS = tuple((f.name, f.column, _decoder(f)) for f in JOB_FIELDS)

_AUTO_DISABLE_STATE = tuple(f.column for f in JOB_FIELDS if f.part is Part.AUTO_DISABLE)
"""Job columns the status tracker keeps; ``update_job`` writes them only when asked."""

_STORE_ONLY_COLUMNS = ("duration_samples",)
"""Job columns that are no field of a job: the completed runs the average duration is over."""


def _job_columns(job: Job, part: Part | None = None) -> dict[str, Any]:
    """The columns of one part of a job (``None``: of every part), by column name."""
    read, codecs = _WRITE_ALL if part is None else _WRITE_PARTS[part]
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


def _job_row(job: Job) -> dict[str, Any]:
    row = _job_columns(job)
    row["duration_samples"] = 0 if job.average_duration_ms is None else job.success_count
    return row


def _to_job(row: Row[Any]) -> Job:
    m = row._mapping
    return Job(
        **{
            name: m[column] if decode is None else decode(m[column])
            for name, column, decode in _READS
        }
    )


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


_VERSIONED = tuple(f for f in JOB_FIELDS if f.versioned)


def _snapshot(job: Job) -> dict[str, Any]:
    """The versioned fields of a job under their API names (a date-time as ISO text)."""
    snapshot: dict[str, Any] = {}
    for versioned in _VERSIONED:
        value = getattr(job, versioned.name)
        snapshot[versioned.api] = value.isoformat() if isinstance(value, datetime) else value
    return snapshot


def _occurrence_row(occ: Occurrence, policy: ConcurrencyPolicy) -> dict[str, Any]:
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
        "dispatched_at": occ.dispatched_at,
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
        "concurrency_policy": int(policy),
    }


def _to_occurrence(row: Row[Any], changes: tuple[StatusChange, ...] = ()) -> Occurrence:
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
        status_changes=changes,
    )


def _change_row(occurrence_id: UUID, change: StatusChange) -> dict[str, Any]:
    return {
        "occurrence_id": occurrence_id,
        "timestamp": change.timestamp,
        "from_status": None if change.from_status is None else int(change.from_status),
        "to_status": int(change.to_status),
        "attempt": change.attempt,
        "reason": change.reason,
    }


def _to_change(row: Row[Any]) -> StatusChange:
    m = row._mapping
    from_status = m["from_status"]
    return StatusChange(
        timestamp=m["timestamp"],
        from_status=None if from_status is None else OccurrenceStatus(from_status),
        to_status=OccurrenceStatus(m["to_status"]),
        attempt=m["attempt"],
        reason=m["reason"],
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


_FAILED_STATUSES = (int(OccurrenceStatus.FAILED), int(OccurrenceStatus.TIMED_OUT))
_DISPATCHER_KEY = "dispatcher"

# --- status application (the rules: rota.core.transitions) ------------------------------------

_QUEUED = OccurrenceStatus.QUEUED


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


# --- the store --------------------------------------------------------------------------------


_DEFAULT_LOGS = sa_table(
    "occurrence_logs_default",
    column("seq", BigInteger()),
    column("timestamp", UtcDateTime()),
)
"""PostgreSQL: the default partition of ``occurrence_logs`` (lines outside every period)."""


class SqlStore(SecurityQueries, Store):
    """The :class:`~rota.core.ports.Store` on SQLite (embedded) or PostgreSQL (distributed).

    ``url`` is a plain user URL (``sqlite:///path/rota.db``, ``postgresql://…``); the schema
    must be migrated first (:func:`rota.stores.migrate.upgrade`).
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        busy_timeout_ms: int = 10_000,
        auto_disable: AutoDisableDefaults | None = None,
    ) -> None:
        """``auto_disable``: the global auto-disable defaults (default: 5 failures in 60 min,
        no probe)."""
        self._url = url
        self._auto_disable = auto_disable or AutoDisableDefaults()
        self._dialect = dialect_of(url)
        self._pool_size = pool_size
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None
        self._write_lock = asyncio.Lock() if self._dialect == "sqlite" else None
        self._fast = _FastBatches(self._dialect)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._dialect

    def _member(self, column: ColumnElement[Any], ids: Sequence[UUID]) -> ColumnElement[bool]:
        """``column IN ids``. On PostgreSQL ``column = ANY($1)`` with one array parameter:
        the statement text is the same for every batch, so neither SQLAlchemy (which renders
        one placeholder per element of an expanding ``IN``) nor the server (which parses and
        plans every new text) repeats work per batch, and asyncpg reuses its prepared
        statement."""
        if self._dialect == "postgresql":
            return column == any_(bindparam(None, list(ids), type_=postgresql.ARRAY(Uuid())))
        return column.in_(ids)

    # --- connections ----------------------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            return
        if self._dialect == "sqlite":
            path = sqlite_path(self._url)
            if path is None or not path.is_file():
                # Connecting would create an empty, unmigrated database file.
                raise BackendUnavailableError(
                    f"no SQLite database at {path}: run `rota migrate` first"
                )
            self._writer = self._engine(writer=True, pool_size=1)
            self._reader = self._engine(writer=False, pool_size=max(2, self._pool_size // 2))
        else:
            self._writer = self._reader = self._engine(writer=True, pool_size=self._pool_size)
        try:
            await self.ping()
        except BaseException:
            await self.close()
            raise

    def _engine(self, *, writer: bool, pool_size: int) -> AsyncEngine:
        return create_store_engine(
            self._url, writer=writer, pool_size=pool_size, busy_timeout_ms=self._busy_timeout_ms
        )

    async def close(self) -> None:
        writer, reader = self._writer, self._reader
        self._writer = self._reader = None
        if writer is not None:
            await writer.dispose()
        if reader is not None and reader is not writer:
            await reader.dispose()

    async def ping(self) -> None:
        async with self._read() as conn:
            await conn.exec_driver_sql("SELECT 1")

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        engine = self._reader
        if engine is None:
            raise RuntimeError("SqlStore is not open: call open() first")
        async with guard_errors(), engine.connect() as conn:
            yield conn

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        engine = self._writer
        if engine is None:
            raise RuntimeError("SqlStore is not open: call open() first")
        async with guard_errors():
            if self._write_lock is None:
                async with engine.begin() as conn:
                    yield conn
            else:
                async with self._write_lock, engine.begin() as conn:
                    yield conn

    # --- jobs -----------------------------------------------------------------------------

    async def create_jobs(self, jobs_: Sequence[Job]) -> None:
        if not jobs_:
            return
        tags = [{"tag": t, "job_id": j.id} for j in jobs_ for t in dict.fromkeys(j.tags)]
        rows = [_job_row(j) for j in jobs_]
        async with self._write() as conn:
            if len(rows) == 1:
                await conn.execute(insert(jobs), rows)
            else:  # a bulk create: driver-level parameters (one unnest on PostgreSQL)
                await self._fast.execute(conn, "insert_jobs", partial(_insert_stmt, jobs), rows)
            if tags:
                await self._fast.execute(
                    conn, "insert_job_tags", partial(_insert_stmt, job_tags), tags
                )

    async def get_job(self, job_id: UUID) -> Job:
        async with self._read() as conn:
            row = (await conn.execute(select(jobs).where(jobs.c.id == job_id))).first()
        if row is None:
            raise NotFoundError("job", job_id)
        return _to_job(row)

    async def list_jobs(self, query: JobQuery) -> Page[Job]:
        limit = max(1, query.limit)
        stmt = select(jobs).order_by(jobs.c.id.desc()).limit(limit + 1)
        if query.search:
            text = query.search
            stmt = stmt.where(
                or_(
                    jobs.c.display_name.icontains(text, autoescape=True),
                    jobs.c.job_type.icontains(text, autoescape=True),
                    jobs.c.description.icontains(text, autoescape=True),
                )
            )
        if query.tag is not None:
            tagged = select(job_tags.c.job_id).where(job_tags.c.tag == query.tag)
            stmt = stmt.where(jobs.c.id.in_(tagged))
        if query.job_type is not None:
            stmt = stmt.where(jobs.c.job_type == query.job_type)
        if query.is_active is not None:
            stmt = stmt.where(jobs.c.is_active == query.is_active)
        if query.auto_disabled is not None:
            reason = jobs.c.disabled_reason
            stmt = stmt.where(reason.is_not(None) if query.auto_disabled else reason.is_(None))
        if query.cursor is not None:
            stmt = stmt.where(jobs.c.id < _decode_cursor(query.cursor))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return _page([_to_job(r) for r in rows], limit, lambda j: j.id)

    async def update_job(self, job: Job, *, expected_version: int, with_state: bool = False) -> Job:
        async with self._write() as conn:
            stmt = select(jobs).where(jobs.c.id == job.id).with_for_update()
            row = (await conn.execute(stmt)).first()
            if row is None:
                raise NotFoundError("job", job.id)
            stored = _to_job(row)
            if stored.version != expected_version:
                raise ConflictError(
                    f"job {job.id} is at version {stored.version}, not {expected_version}"
                )
            if job.version > expected_version:
                await conn.execute(
                    insert(job_versions).values(
                        job_id=job.id,
                        version=stored.version,
                        snapshot=_snapshot(stored),
                        created_at=utcnow(),
                    )
                )
            values = _job_definition(job)
            if with_state:
                values.update(_auto_disable_state(job))
            await conn.execute(update(jobs).where(jobs.c.id == job.id).values(values))
            if set(job.tags) != set(stored.tags):
                await self._replace_tags(conn, job)
            row = (await conn.execute(select(jobs).where(jobs.c.id == job.id))).one()
        return _to_job(row)

    @staticmethod
    async def _replace_tags(conn: AsyncConnection, job: Job) -> None:
        await conn.execute(delete(job_tags).where(job_tags.c.job_id == job.id))
        tags = [{"tag": t, "job_id": job.id} for t in dict.fromkeys(job.tags)]
        if tags:
            await conn.execute(insert(job_tags), tags)

    async def delete_job(self, job_id: UUID) -> None:
        async with self._write() as conn:
            # Versions and tags go by ON DELETE CASCADE; also deleted explicitly so a database
            # whose foreign keys are off (SQLite) is not left with orphans.
            await conn.execute(delete(job_versions).where(job_versions.c.job_id == job_id))
            await conn.execute(delete(job_tags).where(job_tags.c.job_id == job_id))
            result = await conn.execute(delete(jobs).where(jobs.c.id == job_id))
            if result.rowcount == 0:
                raise NotFoundError("job", job_id)

    async def code_jobs(self) -> list[Job]:
        stmt = select(jobs).where(jobs.c.source == JobSource.CODE.value).order_by(jobs.c.job_type)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_to_job(r) for r in rows]

    async def job_versions(self, job_id: UUID) -> list[JobVersion]:
        stmt = (
            select(job_versions)
            .where(job_versions.c.job_id == job_id)
            .order_by(job_versions.c.version)
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            JobVersion(
                job_id=r.job_id, version=r.version, snapshot=r.snapshot, created_at=r.created_at
            )
            for r in rows
        ]

    # --- auto-disable probes ---------------------------------------------------------------

    async def due_probes(
        self,
        now: datetime,
        defaults: AutoDisableDefaults,
        *,
        after: UUID | None = None,
        limit: int = 500,
    ) -> ProbeScan:
        j = jobs.c
        limit = max(1, limit)
        stmt = (
            select(jobs)
            .where(
                j.disabled_reason.is_not(None),
                j.disabled_at.is_not(None),
                j.is_active.is_(False),
                j.probing.is_(False),
                j.cron_expression.is_not(None),
            )
            .order_by(j.id)
            .limit(limit)
        )
        if defaults.cooldown_seconds is None:  # only jobs with a cooldown of their own
            stmt = stmt.where(j.auto_disable_cooldown_seconds.is_not(None))
        if after is not None:
            stmt = stmt.where(j.id > after)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        candidates = [_to_job(r) for r in rows]
        # The cooldown is per job (or the default): compared here rather than with interval
        # arithmetic that differs between SQLite and PostgreSQL.
        due = [job for job in candidates if probe_due(job, defaults, now)]
        return ProbeScan(due=due, after=candidates[-1].id if len(candidates) == limit else None)

    async def release_probe(
        self,
        job_id: UUID,
        *,
        seen_disabled_at: datetime,
        seen_version: int,
        next_run_at: datetime | None,
        at: datetime,
    ) -> Job | None:
        j = jobs.c
        stmt = (
            update(jobs)
            .where(
                j.id == job_id,
                j.is_active.is_(False),
                j.probing.is_(False),
                j.disabled_reason.is_not(None),
                j.disabled_at == seen_disabled_at,
                j.version == seen_version,
            )
            .values(is_active=True, probing=True, next_run_at=next_run_at, updated_at=at)
        )
        async with self._write() as conn:
            if (await conn.execute(stmt)).rowcount != 1:
                return None
            row = (await conn.execute(select(jobs).where(j.id == job_id))).one()
        return _to_job(row)

    # --- scheduling -----------------------------------------------------------------------

    async def due_jobs(
        self, until: datetime, buckets: Sequence[int] | None, limit: int
    ) -> list[DueEntry]:
        if buckets is not None and not buckets:
            return []
        stmt = (
            select(jobs.c.id, jobs.c.bucket, jobs.c.next_run_at)
            .where(jobs.c.is_active.is_(True), jobs.c.next_run_at <= until)
            .order_by(jobs.c.next_run_at, jobs.c.id)
            .limit(max(0, limit))
        )
        if buckets is not None:
            stmt = stmt.where(jobs.c.bucket.in_(list(buckets)))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [DueEntry(r.id, r.bucket, r.next_run_at) for r in rows]

    async def dispatch_due(
        self, job_ids: Sequence[UUID], now: datetime, planner: FirePlanner
    ) -> DispatchResult:
        ids = _unique(job_ids)
        if not ids:
            return DispatchResult()
        async with self._write() as conn:
            claimed = await self._claim_jobs(conn, ids)
            next_runs = await self._absent_jobs(conn, [i for i in ids if i not in claimed])
            due: list[Job] = []
            for job in claimed.values():
                if job.is_active and job.next_run_at is not None and job.next_run_at <= now:
                    due.append(job)
                else:
                    next_runs[job.id] = _due_entry(job.id, job.bucket, job)
            active = await self._active_counts(conn, [j.id for j in due])
            plans = _plan_all(due, active, now, planner, next_runs)
            inserted = await self._insert_planned(conn, due, plans)
            await self._advance_jobs(conn, due, plans)
        for job in due:
            if job.id in plans:
                plan = plans[job.id]
                next_runs[job.id] = _due_entry(job.id, job.bucket, plan)
        return _classify(due, plans, active, inserted, next_runs)

    async def _claim_jobs(self, conn: AsyncConnection, ids: Sequence[UUID]) -> dict[UUID, Job]:
        """The requested jobs, locked; rows locked by another transaction are passed over."""
        rows = await _fetch_in(
            conn,
            lambda chunk: (
                select(*_PLANNING_COLUMNS)
                .where(self._member(jobs.c.id, chunk))
                .order_by(jobs.c.id)
                .with_for_update(skip_locked=True)
            ),
            ids,
        )
        return {r[0]: _to_planning_job(r) for r in rows}

    async def _absent_jobs(
        self, conn: AsyncConnection, ids: Sequence[UUID]
    ) -> dict[UUID, DueEntry | None]:
        """``None`` for each requested id that is gone; ids locked elsewhere are left out."""
        if not ids:
            return {}
        if self._dialect == "sqlite":  # no row locks: a missing row is a deleted job
            return dict.fromkeys(ids)
        rows = await _fetch_in(
            conn, lambda chunk: select(jobs.c.id).where(self._member(jobs.c.id, chunk)), ids
        )
        locked = {r.id for r in rows}
        return {i: None for i in ids if i not in locked}

    async def _active_counts(self, conn: AsyncConnection, ids: Sequence[UUID]) -> dict[UUID, int]:
        if not ids:
            return {}
        rows = await _fetch_in(
            conn,
            lambda chunk: (
                select(occurrences.c.job_id, func.count())
                .where(
                    self._member(occurrences.c.job_id, chunk),
                    occurrences.c.status.in_(ACTIVE),
                )
                .group_by(occurrences.c.job_id)
            ),
            ids,
        )
        return {r[0]: int(r[1]) for r in rows}

    async def _insert_planned(
        self, conn: AsyncConnection, due: Sequence[Job], plans: dict[UUID, FirePlan]
    ) -> set[UUID]:
        """Insert the planned occurrences (a fire already recorded is skipped by the unique
        key) and the creation status change of each one inserted; returns the ids inserted."""
        rows = [
            _occurrence_row(occ, job.concurrency_policy)
            for job in due
            if job.id in plans
            for occ in plans[job.id].occurrences
        ]
        if not rows:
            return set()
        count = await self._fast.execute(conn, "insert_planned", self._insert_planned_stmt, rows)
        planned = [row["id"] for row in rows]
        if count == len(rows):
            inserted = set(planned)
        else:  # some fires were recorded before, or the driver does not count: ask
            found = await _fetch_in(
                conn,
                lambda chunk: select(occurrences.c.id).where(self._member(occurrences.c.id, chunk)),
                planned,
            )
            inserted = {r.id for r in found}
        changes = [
            _change_row(occ.id, change)
            for plan in plans.values()
            for occ in plan.occurrences
            if occ.id in inserted
            for change in occ.status_changes
        ]
        if changes:
            await self._fast.execute(conn, "insert_changes", _insert_changes_stmt, changes)
        return inserted

    def _insert_planned_stmt(self) -> UpdateBase:
        return _insert_or_skip_stmt(
            self._dialect, occurrences, conflict_keys=["job_id", "scheduled_for"]
        )

    async def _advance_jobs(
        self, conn: AsyncConnection, due: Sequence[Job], plans: dict[UUID, FirePlan]
    ) -> None:
        params = [
            {
                "b_id": job.id,
                "b_next": plans[job.id].next_run_at,
                "b_active": plans[job.id].is_active,
            }
            for job in due
            if job.id in plans
        ]
        if params:
            await self._fast.execute(conn, "advance_jobs", _advance_jobs_stmt, params)

    async def insert_occurrences(self, occurrences_: Sequence[Occurrence]) -> None:
        if not occurrences_:
            return
        job_ids = _unique(o.job_id for o in occurrences_)
        changes = [_change_row(o.id, c) for o in occurrences_ for c in o.status_changes]
        async with self._write() as conn:
            rows = await _fetch_in(
                conn,
                lambda chunk: select(jobs.c.id, jobs.c.concurrency_policy).where(
                    jobs.c.id.in_(chunk)
                ),
                job_ids,
            )
            policies = {r.id: ConcurrencyPolicy(r.concurrency_policy) for r in rows}
            await conn.execute(
                insert(occurrences),
                [
                    _occurrence_row(o, policies.get(o.job_id, ConcurrencyPolicy.SKIP))
                    for o in occurrences_
                ],
            )
            if changes:
                await conn.execute(insert(status_changes), changes)

    async def mark_dispatched(self, published: Sequence[Occurrence], at: datetime) -> None:
        if not published:
            return
        c = occurrences.c
        # Only the attempt that was published, and only while it is still undispatched: a
        # mark that arrives after the attempt failed and was requeued as the next one (its
        # ``dispatched_at`` cleared for the sweeper) must not hide that retry.
        stmt = (
            update(occurrences)
            .where(
                c.id == bindparam("b_id", type_=Uuid()),
                c.scheduled_for == bindparam("b_key_at", type_=UtcDateTime()),
                c.attempt == bindparam("b_attempt", type_=Integer()),
                c.dispatched_at.is_(None),
            )
            .values(dispatched_at=at)
        )
        seen: set[UUID] = set()
        params: list[dict[str, Any]] = []
        for o in published:
            if o.id not in seen:
                seen.add(o.id)
                params.append({"b_id": o.id, "b_key_at": o.scheduled_for, "b_attempt": o.attempt})
        async with self._write() as conn:
            await conn.execute(stmt, params)

    async def undispatched(
        self, due_before: datetime, limit: int, *, created_before: datetime | None = None
    ) -> list[Occurrence]:
        stmt = _undispatched_stmt(due_before, limit, created_before)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_to_occurrence(r) for r in rows]

    async def claim_undispatched(
        self,
        due_before: datetime,
        limit: int,
        *,
        created_before: datetime | None = None,
        claim_until: datetime,
    ) -> list[Occurrence]:
        # PostgreSQL: the rows are locked (others skip them) until the claim commits, and a
        # row claimed meanwhile fails the re-checked ``due_at`` condition. SQLite: the writer
        # lock serializes claimers.
        stmt = _undispatched_stmt(due_before, limit, created_before).with_for_update(
            skip_locked=True, of=occurrences
        )
        async with self._write() as conn:
            rows = (await conn.execute(stmt)).all()
            ids = [r.id for r in rows]
            for chunk in _chunks(ids):
                await conn.execute(
                    update(occurrences)
                    .where(occurrences.c.id.in_(chunk))
                    .values(due_at=claim_until)
                )
        return [_to_occurrence(r) for r in rows]

    async def finish_claim(
        self,
        claimed: Sequence[Occurrence],
        claim_until: datetime,
        *,
        dispatched_at: datetime | None,
    ) -> None:
        if not claimed:
            return
        c = occurrences.c
        stmt = (
            update(occurrences)
            .where(
                c.id == bindparam("b_id", type_=Uuid()),
                c.attempt == bindparam("b_attempt", type_=Integer()),
                c.due_at == claim_until,
                c.dispatched_at.is_(None),
            )
            .values(due_at=bindparam("b_due", type_=UtcDateTime()), dispatched_at=dispatched_at)
        )
        params = [{"b_id": o.id, "b_attempt": o.attempt, "b_due": o.due_at} for o in claimed]
        async with self._write() as conn:
            await conn.execute(stmt, params)

    async def stale_occurrences(
        self,
        now: datetime,
        *,
        running_threshold: float,
        queued_threshold: float,
        limit: int,
    ) -> list[StaleOccurrence]:
        # Running rows are few (bounded by the workers' slots): the (status, id) index finds
        # them, and each one's silence is compared with its job's threshold. Queued rows may
        # be many (a backlog): the (status, dispatched_at, due_at) index cuts them down to
        # those dispatched before the global Queued threshold first.
        occ, j = occurrences.c, jobs.c
        joined = occurrences.outerjoin(jobs, j.id == occ.job_id)
        own = j.zombie_threshold_seconds
        last_sign = func.coalesce(occ.last_heartbeat, occ.start_time, occ.created_at)
        limit = max(0, limit)
        running = (
            select(occurrences, j.zombie_policy, own)
            .select_from(joined)
            .where(
                occ.status == int(OccurrenceStatus.RUNNING),
                self._silence(last_sign, now) > func.coalesce(own, running_threshold),
            )
            .order_by(last_sign, occ.id)
            .limit(limit)
        )
        queued_before = now - timedelta(seconds=queued_threshold)
        queued = (
            select(occurrences, j.zombie_policy, own)
            .select_from(joined)
            .where(
                occ.status == int(OccurrenceStatus.QUEUED),
                occ.dispatched_at.is_not(None),
                occ.dispatched_at < queued_before,
                or_(own.is_(None), self._silence(occ.dispatched_at, now) > own),
            )
            .order_by(occ.dispatched_at, occ.id)
            .limit(limit)
        )
        async with self._read() as conn:
            rows = [*(await conn.execute(running)).all(), *(await conn.execute(queued)).all()]
        found = [
            StaleOccurrence(
                occurrence=_to_occurrence(r),
                zombie_policy=None if r.zombie_policy is None else ZombiePolicy(r.zombie_policy),
                zombie_threshold_seconds=r.zombie_threshold_seconds,
            )
            for r in rows
        ]
        found.sort(key=lambda s: (_last_sign(s.occurrence), s.occurrence.id))
        return found[:limit]

    def _silence(self, since: ColumnElement[Any], now: datetime) -> ColumnElement[Any]:
        """Seconds from ``since`` (a UTC datetime column) to ``now``, in SQL."""
        if self._dialect == "postgresql":
            moment = bindparam(None, now, type_=UtcDateTime())
            return func.extract("epoch", moment - since)
        moment = bindparam(None, utc_text(now))
        return (func.julianday(moment) - func.julianday(since)) * literal_column("86400.0")

    async def reset_dispatch(self, statuses: Sequence[OccurrenceStatus]) -> int:
        if not statuses:
            return 0
        stmt = (
            update(occurrences)
            .where(
                occurrences.c.status.in_([int(s) for s in statuses]),
                occurrences.c.dispatched_at.is_not(None),
            )
            .values(dispatched_at=None)
        )
        async with self._write() as conn:
            result = await conn.execute(stmt)
        return int(result.rowcount)

    # --- status and logs ------------------------------------------------------------------

    async def apply_status(self, records: Sequence[StatusRecord]) -> StatusResult:
        if not records:
            return StatusResult()
        ids = _unique(r.occurrence_id for r in records)
        columns = [occurrences.c.id, *(occurrences.c[n] for n in CURRENT_FIELDS)]
        async with self._write() as conn:
            rows = await _fetch_in(
                conn,
                lambda chunk: (
                    select(*columns)
                    .where(self._member(occurrences.c.id, chunk))
                    .order_by(occurrences.c.id)
                    .with_for_update()
                ),
                ids,
            )
            batch = apply_records({oid: Current(*rest) for oid, *rest in rows}, records)
            disabled = await self._write_status_batch(conn, batch)
            await self._record_final_failures(conn, batch)
        return StatusResult(
            applied=batch.applied,
            ignored=batch.ignored,
            heartbeats=batch.heartbeats,
            disabled=disabled,
        )

    async def _write_status_batch(
        self, conn: AsyncConnection, batch: StatusBatch
    ) -> list[DisabledJob]:
        """Write the batch's occurrence changes and job statistics; returns the jobs it
        disabled."""
        for columns, params in _occurrence_updates(batch).items():
            await self._fast.execute(
                conn,
                "update_occurrences:" + ",".join(columns),
                partial(_update_occurrences_stmt, columns),
                params,
            )
        if batch.changes:
            await self._fast.execute(conn, "insert_changes", _insert_changes_stmt, batch.changes)
        stats = [
            {
                "b_id": job_id,
                "b_total": s.total,
                "b_success": s.success,
                "b_failure": s.failure,
                "b_dsum": s.duration_sum,
                "b_dcount": s.duration_count,
                "b_reset": s.only_successes,
            }
            for job_id, s in sorted(batch.stats.items())
        ]
        if stats:
            await self._fast.execute(conn, "update_stats", _update_stats_stmt, stats)
        return await self._count_failures(conn, batch)

    async def _count_failures(self, conn: AsyncConnection, batch: StatusBatch) -> list[DisabledJob]:
        """Auto-disable: fold the batch's outcomes into the consecutive-failure state of each
        job that had a failure in it (read under lock, one UPDATE for all), disabling the jobs
        that reach their threshold. Jobs with only successes were reset by the statistics
        statement already, without a read."""
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

    async def get_occurrence(self, occurrence_id: UUID) -> Occurrence:
        async with self._read() as conn:
            row = (
                await conn.execute(select(occurrences).where(occurrences.c.id == occurrence_id))
            ).first()
            if row is None:
                raise NotFoundError("occurrence", occurrence_id)
            changes = (
                await conn.execute(
                    select(status_changes)
                    .where(status_changes.c.occurrence_id == occurrence_id)
                    .order_by(status_changes.c.id)
                )
            ).all()
        return _to_occurrence(row, tuple(_to_change(c) for c in changes))

    async def list_occurrences(self, query: OccurrenceQuery) -> Page[Occurrence]:
        """Filters: ``scheduled_after <= scheduled_for < scheduled_before``."""
        limit = max(1, query.limit)
        occ = occurrences
        stmt = select(occ).order_by(occ.c.id.desc()).limit(limit + 1)
        if query.job_id is not None:
            stmt = stmt.where(occ.c.job_id == query.job_id)
        if query.statuses:
            stmt = stmt.where(occ.c.status.in_([int(s) for s in query.statuses]))
        if query.scheduled_after is not None:
            stmt = stmt.where(occ.c.scheduled_for >= query.scheduled_after)
        if query.scheduled_before is not None:
            stmt = stmt.where(occ.c.scheduled_for < query.scheduled_before)
        if query.cursor is not None:
            stmt = stmt.where(occ.c.id < _decode_cursor(query.cursor))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return _page([_to_occurrence(r) for r in rows], limit, lambda o: o.id)

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
        """Every asked status (every status when none is given) with its count, zeros included."""
        stmt = select(occurrences.c.status, func.count()).group_by(occurrences.c.status)
        if statuses:
            stmt = stmt.where(occurrences.c.status.in_([int(s) for s in statuses]))
        if job_id is not None:
            stmt = stmt.where(occurrences.c.job_id == job_id)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        counts = dict.fromkeys(statuses or tuple(OccurrenceStatus), 0)
        for status, count in rows:
            counts[OccurrenceStatus(status)] = int(count)
        return counts

    # --- failed occurrences (dead letters) ------------------------------------------------

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
        stmt = (
            select(job_tags.c.tag, func.count()).group_by(job_tags.c.tag).order_by(job_tags.c.tag)
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [TagCount(str(tag), int(n)) for tag, n in rows]

    # --- control --------------------------------------------------------------------------

    async def dispatcher_state(self) -> DispatcherState:
        stmt = select(scheduler_control.c.value).where(scheduler_control.c.key == _DISPATCHER_KEY)
        async with self._read() as conn:
            value = (await conn.execute(stmt)).scalar_one_or_none()
        if not isinstance(value, dict):
            return DispatcherState()
        changed = value.get("changedAt")
        return DispatcherState(
            paused=bool(value.get("paused")),
            reason=value.get("reason"),
            by=value.get("by"),
            changed_at=None if changed is None else datetime.fromisoformat(changed),
        )

    async def set_dispatcher_state(self, state: DispatcherState) -> None:
        value = {
            "paused": state.paused,
            "reason": state.reason,
            "by": state.by,
            "changedAt": None if state.changed_at is None else state.changed_at.isoformat(),
        }
        now = utcnow()
        async with self._write() as conn:
            done = await conn.execute(
                update(scheduler_control)
                .where(scheduler_control.c.key == _DISPATCHER_KEY)
                .values(value=value, updated_at=now)
            )
            if done.rowcount == 0:
                await conn.execute(
                    insert(scheduler_control).values(
                        key=_DISPATCHER_KEY, value=value, updated_at=now
                    )
                )

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
        rows = [_failed_row(r) for r in records]
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
        if query.cursor is not None:
            stmt = stmt.where(f.id < _decode_cursor(query.cursor))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return _page([_to_failed(r) for r in rows], limit, lambda r: r.id)

    async def get_failed(self, failed_id: UUID) -> FailedOccurrence:
        stmt = select(failed_occurrences).where(failed_occurrences.c.id == failed_id)
        async with self._read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            raise NotFoundError("failed occurrence", failed_id)
        return _to_failed(row)

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
            stored = _to_failed(row)
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
        return _to_failed(row)

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
            record = _to_failed(row)
            occurrence_id = record.occurrence_id
            if occurrence_id is None:
                raise ConflictError(
                    f"failed occurrence {failed_id} is a poison message that names no "
                    "occurrence: there is nothing to retry"
                )
            stmt = select(occ.status, occ.attempt).where(occ.id == occurrence_id).with_for_update()
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
                )
            )
            change = StatusChange(
                timestamp=now,
                from_status=status,
                to_status=_QUEUED,
                attempt=attempt,
                reason=MANUAL_RETRY,
            )
            await conn.execute(insert(status_changes), [_change_row(occurrence_id, change)])
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
        return await self.get_occurrence(occurrence_id)

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
        stmt = select(o.id, o.created_at, held).where(o.status == int(status))
        if after is not None:
            stmt = stmt.where(o.id > after)
        stmt = stmt.order_by(o.id).limit(limit)  # the (status, id) index, oldest first
        async with self._write() as conn:
            rows = (await conn.execute(stmt)).all()
            doomed = [r.id for r in rows if r.created_at < created_before and not r.held]
            for chunk in _chunks(doomed):
                await conn.execute(
                    delete(status_changes).where(
                        self._member(status_changes.c.occurrence_id, chunk)
                    )
                )
                if with_logs:
                    await conn.execute(
                        delete(occurrence_logs).where(
                            self._member(occurrence_logs.c.occurrence_id, chunk)
                        )
                    )
                await conn.execute(delete(occurrences).where(self._member(o.id, chunk)))
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
                    conn, now, upkeep.occurrences_kept_since
                )
            async with self._write() as conn:
                dropped += await partitions.drop_history_partitions(conn, now, upkeep.logs_before)
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
        stmt = select(jobs).where(
            j.bucket.in_(list(buckets)), j.cron_expression.is_not(None), j.is_active
        )
        if after is not None:
            stmt = stmt.where(j.id > after)
        async with self._read() as conn:
            rows = (await conn.execute(stmt.order_by(j.id).limit(limit))).all()
        return [_to_job(r) for r in rows]

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


def _last_sign(occurrence: Occurrence) -> datetime:
    """When a stale occurrence last showed life: its heartbeat or start (Running), its
    dispatch (Queued)."""
    if occurrence.status is OccurrenceStatus.QUEUED and occurrence.dispatched_at is not None:
        return occurrence.dispatched_at
    return occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at


def _undispatched_stmt(
    due_before: datetime, limit: int, created_before: datetime | None
) -> Select[Any]:
    """Queued, never dispatched, due, not held behind an earlier active occurrence of a
    Queue-policy job; earliest due first."""
    occ = occurrences
    earlier = occurrences.alias("earlier")
    waiting = exists().where(
        earlier.c.job_id == occ.c.job_id,
        earlier.c.status.in_(ACTIVE),
        earlier.c.id < occ.c.id,
    )
    stmt = (
        select(occ)
        .where(
            occ.c.status == int(OccurrenceStatus.QUEUED),
            occ.c.dispatched_at.is_(None),
            occ.c.due_at <= due_before,
            or_(occ.c.concurrency_policy != int(ConcurrencyPolicy.QUEUE), ~waiting),
        )
        .order_by(occ.c.due_at, occ.c.id)
        .limit(max(0, limit))
    )
    if created_before is not None:
        stmt = stmt.where(occ.c.created_at <= created_before)
    return stmt


# --- statement helpers ------------------------------------------------------------------------


async def _fetch_in(
    conn: AsyncConnection,
    make: Callable[[Sequence[UUID]], Select[Any]],
    ids: Sequence[UUID],
) -> list[Row[Any]]:
    """Run ``make(chunk)`` for each chunk of ``ids`` (one statement for a normal batch)."""
    rows: list[Row[Any]] = []
    for chunk in _chunks(ids):
        rows.extend((await conn.execute(make(chunk))).all())
    return rows


def _insert_stmt(table: Table, skip: tuple[str, ...] = ()) -> UpdateBase:
    return insert(table).values(
        {c.name: bindparam(c.name, type_=c.type) for c in table.columns if c.name not in skip}
    )


def _insert_changes_stmt() -> UpdateBase:
    return _insert_stmt(status_changes, skip=("id",))


def _insert_or_skip_stmt(
    dialect: str,
    table: Table,
    *,
    skip: tuple[str, ...] = (),
    conflict_keys: Sequence[str] | None = None,
) -> UpdateBase:
    """An INSERT of every column but ``skip`` (named, typed parameters) that skips a row
    conflicting with a unique key (``conflict_keys``, else any) instead of failing."""
    values = {c.name: bindparam(c.name, type_=c.type) for c in table.columns if c.name not in skip}
    if dialect == "postgresql":
        pg = postgresql.insert(table).values(values)
        return pg.on_conflict_do_nothing(index_elements=conflict_keys)
    lite = sqlite.insert(table).values(values)
    return lite.on_conflict_do_nothing(index_elements=conflict_keys)


def _insert_logs_stmt(dialect: str) -> UpdateBase:
    """Log lines; a numbered line already stored (same occurrence, attempt, line) is skipped."""
    return _insert_or_skip_stmt(dialect, occurrence_logs, skip=("seq",))


def _advance_jobs_stmt() -> UpdateBase:
    return (
        update(jobs)
        .where(jobs.c.id == bindparam("b_id", type_=Uuid()))
        .values(
            next_run_at=bindparam("b_next", type_=UtcDateTime()),
            is_active=bindparam("b_active", type_=Boolean()),
        )
    )


def _update_occurrences_stmt(columns: Sequence[str]) -> UpdateBase:
    """Set ``columns`` (parameters named after them) of the occurrence with parameters ``id``
    and ``key_at`` (its ``scheduled_for``: on PostgreSQL the executor then looks in the one
    time partition that holds the row, not in every partition)."""
    c = occurrences.c
    values = {name: bindparam(name, type_=c[name].type) for name in columns}
    key = and_(
        c.id == bindparam("id", type_=Uuid()),
        c.scheduled_for == bindparam("key_at", type_=UtcDateTime()),
    )
    return update(occurrences).where(key).values(values)


def _update_stats_stmt() -> UpdateBase:
    """Add a batch's counts to the job's statistics. ``b_reset`` (the batch brought only
    successes): the consecutive-failure count goes back to 0, and a probing job is enabled
    for good (its probe succeeded: the disable reason goes)."""
    j = jobs.c
    reset = bindparam("b_reset", type_=Boolean())
    dcount = bindparam("b_dcount", type_=Integer())
    dsum = bindparam("b_dsum", type_=Float())
    samples = j.duration_samples + dcount
    known = func.coalesce(j.average_duration_ms * j.duration_samples, literal_column("0.0"))
    average = case(
        (samples > j.duration_samples, (known + dsum) / samples),
        else_=j.average_duration_ms,
    )
    return (
        update(jobs)
        .where(j.id == bindparam("b_id", type_=Uuid()))
        .values(
            total_executions=j.total_executions + bindparam("b_total", type_=Integer()),
            success_count=j.success_count + bindparam("b_success", type_=Integer()),
            failure_count=j.failure_count + bindparam("b_failure", type_=Integer()),
            duration_samples=samples,
            average_duration_ms=average,
            consecutive_failures=case((reset, literal_column("0")), else_=j.consecutive_failures),
            probing=case((reset, false()), else_=j.probing),
            disabled_reason=case((and_(reset, j.probing), null()), else_=j.disabled_reason),
            disabled_at=case((and_(reset, j.probing), null()), else_=j.disabled_at),
        )
    )


def _update_streaks_stmt() -> UpdateBase:
    j = jobs.c
    return (
        update(jobs)
        .where(j.id == bindparam("b_id", type_=Uuid()))
        .values(
            consecutive_failures=bindparam("b_count", type_=Integer()),
            last_failure_at=bindparam("b_last", type_=UtcDateTime()),
            is_active=bindparam("b_active", type_=Boolean()),
            next_run_at=bindparam("b_next", type_=UtcDateTime()),
            probing=bindparam("b_probing", type_=Boolean()),
            disabled_reason=bindparam("b_reason", type_=j.disabled_reason.type),
            disabled_at=bindparam("b_disabled_at", type_=UtcDateTime()),
        )
    )


def _streak_of(row: Row[Any], defaults: AutoDisableDefaults) -> Streak:
    m = row._mapping
    return Streak.of(
        defaults,
        threshold=m["auto_disable_threshold"],
        window_seconds=m["auto_disable_window_seconds"],
        consecutive_failures=m["consecutive_failures"],
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


def _due_entry(job_id: UUID, bucket: int, state: Job | FirePlan) -> DueEntry | None:
    if not state.is_active or state.next_run_at is None:
        return None
    return DueEntry(job_id, bucket, state.next_run_at)


def _plan_all(
    due: Sequence[Job],
    active: dict[UUID, int],
    now: datetime,
    planner: FirePlanner,
    next_runs: dict[UUID, DueEntry | None],
) -> dict[UUID, FirePlan]:
    """Plan each due job. A job whose planning fails is left as it is (logged, reported with
    no next fire so the index drops it until the loader finds it due again)."""
    plans: dict[UUID, FirePlan] = {}
    for job in due:
        try:
            plans[job.id] = planner(job, active.get(job.id, 0), now)
        except Exception:
            log.exception("planning job %s failed; it stays due", job.id, extra={"job_id": job.id})
            next_runs[job.id] = None
    return plans


def _classify(
    due: Sequence[Job],
    plans: dict[UUID, FirePlan],
    active: dict[UUID, int],
    inserted: set[UUID],
    next_runs: dict[UUID, DueEntry | None],
) -> DispatchResult:
    """Sort the inserted occurrences into queued, held (Queue policy, behind an earlier active
    occurrence) and skipped."""
    queued: list[Occurrence] = []
    held: list[Occurrence] = []
    skipped: list[Occurrence] = []
    for job in due:
        plan = plans.get(job.id)
        if plan is None:
            continue
        waits = job.concurrency_policy is ConcurrencyPolicy.QUEUE
        busy = active.get(job.id, 0) > 0
        for occ in plan.occurrences:
            if occ.id not in inserted:
                continue
            if occ.status is not OccurrenceStatus.QUEUED:
                skipped.append(occ)
            elif waits and busy:
                held.append(occ)
            else:
                queued.append(occ)
                busy = True
    return DispatchResult(queued=queued, held=held, skipped=skipped, next_runs=next_runs)


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


def _insert_failed_stmt(dialect: str) -> UpdateBase:
    """Failed-occurrence records; one that would give an occurrence a second unresolved record
    (the partial unique index) is skipped."""
    return _insert_or_skip_stmt(dialect, failed_occurrences)
