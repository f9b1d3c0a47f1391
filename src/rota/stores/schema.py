"""Table metadata of the SQL store (SQLite and PostgreSQL). Migrations live in
``rota/stores/migrations``; a test checks that ``upgrade head`` equals this metadata."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
    false,
    text,
    true,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.types import TypeEngine

from rota.stores.keytable import api_keys_table

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utc_text(value: datetime) -> str:
    """An aware datetime as SQLite stores it: naive UTC ISO text with microseconds
    (``2030-01-02 03:04:05.000006``, SQLAlchemy's SQLite format; it sorts as time does)."""
    if value.tzinfo is not UTC:
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: Rota stores aware UTC datetimes only")
        value = value.astimezone(UTC)
    return value.isoformat(" ", "microseconds")[:-6]


def from_utc_text(text: str) -> datetime:
    """A UTC time kept as naive ISO text (:func:`utc_text`, a history entry's ``at``) read
    back, aware."""
    return datetime.fromisoformat(text + "+00:00")


def aware_utc(value: datetime) -> datetime:
    """``value`` (aware) unchanged; ``ValueError`` for a naive datetime."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: Rota stores aware UTC datetimes only")
    return value


class _SqliteUtcText(sqlite.DATETIME):
    """SQLite ``DATETIME`` whose values :class:`UtcDateTime` converts itself (faster than
    parsing to a naive datetime and attaching the zone afterwards)."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes: ``timestamptz`` in PostgreSQL, naive UTC text in SQLite.

    Binding a naive datetime is a programming error and raises ``ValueError``.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return _SqliteUtcText()  # type: ignore[no-untyped-call]
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return utc_text(value)
        return aware_utc(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            return from_utc_text(value)
        result: datetime = value.astimezone(UTC)
        return result


def Json() -> JSON:
    """A JSON column whose Python ``None`` is SQL ``NULL``."""
    return JSON(none_as_null=True)


TAGS = Json().with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
"""A job's tags: ``jsonb`` on PostgreSQL (GIN-indexed), JSON text on SQLite."""

HISTORY = Json().with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
"""An occurrence's status history (migration 0029): a JSON array of its changes, oldest first
(see ``rota.stores.sql.rows.history_entry``), written with the row that changes."""

AutoId = BigInteger().with_variant(Integer(), "sqlite")
"""An autoincrementing key: ``bigint`` identity in PostgreSQL, ``INTEGER PRIMARY KEY`` (the
rowid) in SQLite."""


CODE_JOBS = text("source = 'code'")
"""The condition of the partial unique index on code-declared jobs' job types."""
UNRESOLVED = text("NOT resolved")
RECURRING = text("cron_expression IS NOT NULL OR interval_seconds IS NOT NULL")
AUTO_DISABLED = text("disabled_reason IS NOT NULL")
TIMED_PAUSE = text("paused_until IS NOT NULL")
ACTIVE = text("is_active")
INACTIVE = text("NOT is_active")
"""PostgreSQL: the conditions of the partial indexes on a job's state (migration 0024)."""
QUEUED_ONLY = text("status = 0")
"""The condition of the partial index of the Queued occurrences (migration 0026): the sweeps'
index holds the occurrences waiting for a worker, not the history. A statement that reads it
names the status as a literal (see ``rota.stores.sql.statements.status_in``)."""
NOT_COMPLETED = text("status <> 2")
"""PostgreSQL: the condition of the status indexes (migration 0034): a run's end adds no
entry to them; a list of Completed runs walks the ids, nearly every one a match. Their readers
name the statuses as literals (``statements.status_in``): a generic plan proves nothing."""
ENDED = text("end_time IS NOT NULL")
"""PostgreSQL: the condition of the ``(end_time, status)`` index (migration 0034): the runs
that ended (a range of end times implies it)."""
UNTAGGED = "'[]'::jsonb"
TAGGED = text(f"tags <> {UNTAGGED}")
"""PostgreSQL: the condition of the tags' GIN index (migration 0034): a job with no tags has
no entry, so that its creation and each of its fires (a new row version) write none. The
tag filter says it too (``rota.stores.sql.filters.tagged``)."""
UNCOUNTED = text("NOT counted")
"""The condition of the partial index of the occurrences kept out of ``occurrence_counts``
(a one-time job's fire: migration 0033). Its readers say it in the same words (SQLAlchemy
writes ``~counted`` as ``counted = 0`` on SQLite, which its planner does not match with it),
with no ``IN`` list and no ``GROUP BY`` on the status (``NOT IN`` instead): either takes
SQLite's planner to the ``(job_id, status, id)`` index, through every occurrence of a job."""


SEARCHED = ("display_name", "job_type", "description")
"""The jobs' columns ``?search=`` looks into (a case-insensitive substring of any)."""

TEXT_INDEXED = ("display_name", "description")
"""The searched columns the text index holds (migration 0023). The job type, the same for
many jobs, is found among the job types in use (``job_type_counts``), then by the
``(job_type, id)`` index."""

SEARCH_TABLE = "jobs_search"
"""SQLite: the FTS5 table (``trigram`` tokenizer, external content: ``jobs``' rowid) indexing
:data:`TEXT_INDEXED`, kept in step by triggers (migrations 0012, 0023); not declared here,
being a virtual table (with shadow tables ``jobs_search_data``, ``_idx``, ``_docsize``,
``_config``)."""


def _partial(name: str, *columns: str, where: TextClause, unique: bool = False) -> Index:
    """A partial index, with the same condition on both stores."""
    return Index(name, *columns, unique=unique, postgresql_where=where, sqlite_where=where)


def is_search_table(name: str) -> bool:
    """Whether ``name`` is SQLite's search table or one of its shadow tables."""
    return name == SEARCH_TABLE or name.startswith(f"{SEARCH_TABLE}_")


PARTITIONED_BY: dict[str, str] = {
    "occurrences": "scheduled_for",
    "occurrence_logs": "timestamp",
}
"""PostgreSQL: the tables partitioned by time (``RANGE`` on this column), with a default
partition each; see :mod:`rota.stores.partitions`."""


def build_metadata(*, partitioned: bool = False) -> MetaData:
    """A fresh :class:`MetaData` holding every table of the store.

    ``partitioned``: PostgreSQL's layout, where the tables of :data:`PARTITIONED_BY` are
    partitioned by time, so their primary keys and unique keys include the partition column
    (SQLite keeps single-column keys: its rowid is the autoincrementing ``INTEGER PRIMARY
    KEY``). Queries are the same for both: they are built on the plain :data:`metadata`.
    """
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    _jobs(metadata, postgres=partitioned)
    if partitioned:  # PostgreSQL: the jobs search's trigram index (SQLite: SEARCH_TABLE)
        Index(
            "ix_jobs_search",
            *(metadata.tables["jobs"].c[name] for name in TEXT_INDEXED),
            postgresql_using="gin",
            postgresql_ops=dict.fromkeys(TEXT_INDEXED, "gin_trgm_ops"),
        )
    _occurrences(metadata, partitioned=partitioned)
    _aggregates(metadata)
    _failed_occurrences(metadata)
    _security(metadata)
    api_keys_table(metadata, UtcDateTime, Json)
    _control(metadata)
    _notifications(metadata)
    _dependencies(metadata)
    return metadata


def _jobs(metadata: MetaData, *, postgres: bool) -> None:
    # A job's tags: its ``tags`` column. On PostgreSQL that is ``jsonb`` with a GIN index (the
    # tag filter is ``tags @> '["t"]'``); SQLite has no such index, so it also keeps a row
    # per (tag, job) in ``job_tags`` (migration 0013: before, PostgreSQL had those rows too,
    # about 230 bytes per job of two tags).
    # PostgreSQL keeps the values most jobs share as NULL (migration 0024: see
    # rota.core.jobfields.JobField.stored_default); SQLite keeps a 0 in no bytes, and a
    # column of its cannot lose NOT NULL without a copy of the table.
    compact = postgres
    # The schedule: the active jobs by their next fire (the dispatcher's and the hot
    # window's read, whatever buckets it asks for: their filter is on the rows), and the
    # jobs list's filters, each in the list's order (newest first, by id), so that a page
    # is a range of an index whatever the value and wherever its jobs are in time.
    # SQLite: (is_active, next_run_at), (is_active, id). PostgreSQL (migration 0024): the
    # same as partial indexes, each job in the one of its state (the inactive ones have no
    # schedule): 54 B a pending job instead of 72.
    by_state = (
        (
            Index("ix_jobs_schedule", "next_run_at", postgresql_where=ACTIVE),
            Index("ix_jobs_active", "id", postgresql_where=ACTIVE),
            Index("ix_jobs_inactive", "id", postgresql_where=INACTIVE),
        )
        if postgres
        else (Index(None, "is_active", "next_run_at"), Index(None, "is_active", "id"))
    )
    by_tag: tuple[Index, ...] = ()
    if postgres:
        by_tag = (
            Index(
                "ix_jobs_tags",
                "tags",
                postgresql_using="gin",
                postgresql_ops={"tags": "jsonb_path_ops"},
                postgresql_where=TAGGED,
            ),
        )
    Table(
        "jobs",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("job_type", String(200), nullable=False),
        Column("worker_id", String(200)),
        Column("display_name", String(500), nullable=False),
        Column("description", Text(), nullable=False),
        Column("tags", TAGS, nullable=False),
        Column("job_data", Json()),
        Column("cron_expression", String(200)),
        Column("time_zone", String(100), nullable=compact),
        Column("execute_at", UtcDateTime()),
        Column("is_active", Boolean(), nullable=False),
        Column("priority", SmallInteger(), nullable=False),
        Column("concurrency_policy", SmallInteger(), nullable=False),
        Column("misfire_policy", String(20), nullable=compact),
        Column("timeout_seconds", Float()),
        Column("max_retries", Integer()),
        Column("retry_delay_seconds", Float()),
        Column("next_run_at", UtcDateTime()),
        Column("bucket", Integer(), nullable=False),
        Column("version", Integer(), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("updated_at", UtcDateTime(), nullable=compact),
        Column("created_by", String(200)),
        Column("updated_by", String(200)),
        Column("total_executions", BigInteger(), nullable=compact),
        Column("success_count", BigInteger(), nullable=compact),
        Column("failure_count", BigInteger(), nullable=compact),
        Column("average_duration_ms", Float()),
        Column("duration_samples", BigInteger(), nullable=compact),
        Column("source", String(10), nullable=compact, server_default="api"),
        Column("declared_spec", Json()),
        Column("auto_disable_threshold", Integer()),
        Column("auto_disable_window_seconds", Float()),
        Column("auto_disable_cooldown_seconds", Float()),
        Column("consecutive_failures", Integer(), nullable=compact, server_default="0"),
        Column("last_failure_at", UtcDateTime()),
        Column("disabled_reason", Text()),
        Column("disabled_at", UtcDateTime()),
        Column("probing", Boolean(), nullable=False, server_default=false()),
        Column("zombie_policy", String(10)),
        Column("zombie_threshold_seconds", Float()),
        Column("interval_seconds", Integer()),
        Column("start_at", UtcDateTime()),
        Column("end_at", UtcDateTime()),
        Column("max_runs", Integer()),
        Column("run_count", Integer()),
        Column("jitter_seconds", Float()),
        Column("misfire_window_seconds", Float()),
        # the pause and skip state (migration 0017): NULL unless used
        Column("paused_at", UtcDateTime()),
        Column("paused_by", String(200)),
        Column("pause_note", Text()),
        Column("paused_until", UtcDateTime()),
        Column("skip_next", Integer()),
        Column("skip_note", Text()),
        *by_state,
        Index(None, "job_type", "id"),
        _partial("ix_jobs_auto_disabled", "id", where=AUTO_DISABLED),
        # At most one code-declared job per job type (API jobs of the type are not limited).
        _partial("uq_jobs_code_job_type", "job_type", where=CODE_JOBS, unique=True),
        # The timed pauses, by their end (the few jobs paused with an end: ended in seconds).
        _partial("ix_jobs_paused_until", "paused_until", where=TIMED_PAUSE),
        # The recurring (cron or interval) jobs of a bucket (silence and missed-fire checks),
        # without the one-time ones.
        _partial("ix_jobs_recurring", "bucket", "id", where=RECURRING),
        *by_tag,
    )
    Table(
        "job_versions",
        metadata,
        Column("job_id", Uuid(), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        Column("version", Integer(), nullable=False),
        Column("snapshot", Json(), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        PrimaryKeyConstraint("job_id", "version"),
    )
    if postgres:
        return
    # SQLite: one row per (tag, job), read by tag (the tag filter, the tag counts). A job's
    # own tags are its column: no index on ``job_id``, no foreign key (a cascade would scan
    # without one; the store deletes a job's rows by their keys), no rowid table beside the
    # key's tree (migration 0013).
    Table(
        "job_tags",
        metadata,
        Column("tag", String(200), nullable=False),
        Column("job_id", Uuid(), nullable=False),
        PrimaryKeyConstraint("tag", "job_id"),
        sqlite_with_rowid=False,
    )


def _keys(partitioned: bool, table: str, key: str) -> dict[str, Any]:
    """The primary key over ``key`` (and the partition column when partitioned) and, when
    partitioned, PostgreSQL's ``PARTITION BY RANGE``."""
    if not partitioned:
        return {"pk": PrimaryKeyConstraint(key), "kw": {}}
    column = PARTITIONED_BY[table]
    return {
        "pk": PrimaryKeyConstraint(key, column),
        "kw": {"postgresql_partition_by": f"RANGE ({column})"},
    }


def _occurrences(metadata: MetaData, *, partitioned: bool) -> None:
    # No foreign key to jobs: occurrences (and their logs) outlive deleted jobs.
    # The occurrence's own time is its partition column: (job, scheduled_for) stays unique.
    keys = _keys(partitioned, "occurrences", "id")
    Table(
        "occurrences",
        metadata,
        Column("id", Uuid(), nullable=False),
        Column("job_id", Uuid(), nullable=False),
        Column("job_type", String(200), nullable=False),
        Column("worker_id", String(200)),
        Column("status", SmallInteger(), nullable=False),
        Column("scheduled_for", UtcDateTime(), nullable=False),
        Column("due_at", UtcDateTime(), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("attempt", Integer(), nullable=False),
        Column("max_retries", Integer(), nullable=False),
        Column("priority", SmallInteger(), nullable=False),
        Column("timeout_seconds", Float()),
        Column("job_version", Integer(), nullable=False),
        Column("job_data", Json()),
        Column("dispatched_at", UtcDateTime()),
        Column("instance_id", String(300)),
        Column("start_time", UtcDateTime()),
        Column("end_time", UtcDateTime()),
        Column("duration_ms", Float()),
        Column("result", Json()),
        Column("exception", Text()),
        Column("skip_reason", String(50)),
        Column("last_heartbeat", UtcDateTime()),
        Column("trigger_reason", Text()),
        Column("concurrency_policy", SmallInteger(), nullable=False),
        Column("retry_delay_seconds", Float()),
        Column("traceparent", String(64)),
        Column("jitter_seconds", Float()),
        Column("history", HISTORY),
        Column("counted", Boolean(), nullable=False, server_default=true()),
        keys["pk"],
        UniqueConstraint("job_id", "scheduled_for"),
        Index(None, "job_id", "id"),
        # PostgreSQL (0034): no Completed run in the status indexes, no run not ended in the
        # end time's (a run's end is never a HOT update); SQLite keeps them whole.
        Index(None, "job_id", "status", "id", postgresql_where=NOT_COMPLETED),
        Index(None, "status", "id", postgresql_where=NOT_COMPLETED),
        # status: an equality for SQLite's planner, which has no statistics
        _partial("ix_occurrences_queued", "status", "dispatched_at", "due_at", where=QUEUED_ONLY),
        Index(None, "end_time", "status", postgresql_where=ENDED),
        _partial("ix_occurrences_uncounted", "job_id", where=UNCOUNTED),
        **keys["kw"],
    )
    keys = _keys(partitioned, "occurrence_logs", "seq")
    line_key = ["occurrence_id", "attempt", "line"] + (["timestamp"] if partitioned else [])
    Table(
        "occurrence_logs",
        metadata,
        Column("seq", AutoId, nullable=False, autoincrement=True),
        Column("occurrence_id", Uuid(), nullable=False),
        Column("timestamp", UtcDateTime(), nullable=False),
        Column("level", String(20), nullable=False),
        Column("message", Text(), nullable=False),
        Column("data", Json()),
        Column("category", String(200)),
        Column("attempt", Integer()),
        Column("line", Integer()),
        keys["pk"],
        Index(None, "occurrence_id", "seq"),
        # A line sent twice (replayed outbox, redelivered batch) is stored once; lines without
        # a number (NULLs never conflict) are all kept. Partitioned, the key holds the line's
        # timestamp too, which is the worker's and travels with the line, so a copy has it.
        Index("uq_occurrence_logs_line", *line_key, unique=True),
        **keys["kw"],
    )


def _aggregates(metadata: MetaData) -> None:
    """Statistics kept up to date in the transaction of every occurrence write (see
    :mod:`rota.stores.sql.aggregates`): counts by job and status, the same by status over a
    few shards (writers pick one at random, so they seldom wait on each other's row), and
    the finished occurrences per minute and per hour of their end (the overview's window:
    whole hours, then whole minutes, then the rest from the occurrences); and the jobs and
    active jobs, over the same few shards, kept by every write that adds or removes a job or
    changes whether it is active; and the jobs of each job type and holding each tag, per
    type or tag and shard, kept by every write that adds or removes a job or changes its type
    or tags."""
    Table(
        "occurrence_counts",
        metadata,
        Column("job_id", Uuid(), nullable=False),
        Column("status", SmallInteger(), nullable=False),
        Column("n", BigInteger(), nullable=False),
        Column("runs", BigInteger(), nullable=False, server_default="0"),
        Column("duration_sum", Float(), nullable=False, server_default="0"),
        Column("duration_count", BigInteger(), nullable=False, server_default="0"),
        PrimaryKeyConstraint("job_id", "status"),
    )
    Table(
        "occurrence_totals",
        metadata,
        Column("shard", SmallInteger(), nullable=False),
        Column("status", SmallInteger(), nullable=False),
        Column("n", BigInteger(), nullable=False),
        PrimaryKeyConstraint("shard", "status"),
    )
    Table(
        "finished_minutes",
        metadata,
        Column("minute", BigInteger(), nullable=False),  # epoch seconds of the minute's start
        Column("shard", SmallInteger(), nullable=False),
        Column("status", SmallInteger(), nullable=False),
        Column("n", BigInteger(), nullable=False),
        Column("duration_sum", Float(), nullable=False),
        Column("duration_count", BigInteger(), nullable=False),
        PrimaryKeyConstraint("minute", "shard", "status"),
    )
    Table(
        "finished_hours",
        metadata,
        Column("hour", BigInteger(), nullable=False),  # epoch seconds of the hour's start
        Column("shard", SmallInteger(), nullable=False),
        Column("status", SmallInteger(), nullable=False),
        Column("n", BigInteger(), nullable=False),
        Column("duration_sum", Float(), nullable=False),
        Column("duration_count", BigInteger(), nullable=False),
        PrimaryKeyConstraint("hour", "shard", "status"),
    )
    Table(
        "job_totals",
        metadata,
        Column("shard", SmallInteger(), nullable=False),
        Column("jobs", BigInteger(), nullable=False),
        Column("active", BigInteger(), nullable=False),
        PrimaryKeyConstraint("shard"),
    )
    _jobs_by(metadata, "job_type_counts", "job_type")
    _jobs_by(metadata, "tag_counts", "tag")


def _jobs_by(metadata: MetaData, name: str, key: str) -> None:
    """A count of jobs per ``key`` (a text of up to 200 characters), over shard rows."""
    Table(
        name,
        metadata,
        Column(key, String(200), nullable=False),
        Column("shard", SmallInteger(), nullable=False),
        Column("n", BigInteger(), nullable=False),
        PrimaryKeyConstraint(key, "shard"),
    )


def _control(metadata: MetaData) -> None:
    Table(
        "scheduler_control",
        metadata,
        Column("key", String(100), primary_key=True),
        Column("value", Json(), nullable=False),
        Column("updated_at", UtcDateTime(), nullable=False),
    )
    # A fire's batch committed for a dispatcher to publish (migration 0030): its occurrences
    # are inserted dispatched; this row, deleted once they are published, is what a sweep
    # resends from if it is still here at ``claim_until`` (the dispatcher died in between).
    Table(
        "dispatch_batches",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("claim_until", UtcDateTime(), nullable=False),
        Column("dispatched_at", UtcDateTime(), nullable=False),
        Column("occurrence_ids", Json(), nullable=False),
    )
    Table(
        "declared_job_types",
        metadata,
        Column("job_type", String(200), nullable=False),
        Column("worker_id", String(200), nullable=False),
        Column("first_declared_at", UtcDateTime(), nullable=False),
        Column("data_schema", Json(), nullable=True),  # the last one published (0032)
        Column("schema_published_at", UtcDateTime(), nullable=True),
        PrimaryKeyConstraint("job_type", "worker_id"),
    )
    Table(
        "idempotency_keys",
        metadata,
        Column("scope", String(64), primary_key=True),
        Column("fingerprint", String(64), nullable=False),
        Column("status", Integer(), nullable=True),
        Column("body", LargeBinary(), nullable=True),
        Column("headers", Json(), nullable=True),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("expires_at", UtcDateTime(), nullable=False),
        Index(None, "expires_at"),
    )


def _dependencies(metadata: MetaData) -> None:
    # Job dependencies and graph runs (migration 0018): a table of their own, so a job with
    # none costs nothing. Edges go with either job; graph runs outlive their jobs.
    Table(
        "job_dependencies",
        metadata,
        Column("job_id", Uuid(), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        Column("upstream_id", Uuid(), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        Column("rule", String(16), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        PrimaryKeyConstraint("job_id", "upstream_id"),
        Index(None, "upstream_id"),
    )
    Table(
        "graph_runs",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("root_job_id", Uuid(), nullable=False),
        Column("root_occurrence_id", Uuid(), nullable=False, unique=True),
        Column("status", String(16), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("finished_at", UtcDateTime()),
        Index(None, "status", "created_at"),
        Index(None, "root_job_id", "created_at"),
    )
    Table(
        "graph_run_nodes",
        metadata,
        Column("run_id", Uuid(), ForeignKey("graph_runs.id", ondelete="CASCADE"), nullable=False),
        Column("job_id", Uuid(), nullable=False),
        Column("occurrence_id", Uuid(), nullable=False, unique=True),
        Column("reason", Text()),
        Column("created_at", UtcDateTime(), nullable=False),
        PrimaryKeyConstraint("run_id", "job_id"),
    )


def _failed_occurrences(metadata: MetaData) -> None:
    Table(
        "failed_occurrences",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("occurrence_id", Uuid()),
        Column("job_id", Uuid()),
        Column("job_type", String(200), nullable=False),
        Column("failure_type", String(50), nullable=False),
        Column("exception", Text()),
        Column("job_data", Json()),
        Column("attempts", Integer(), nullable=False),
        Column("failed_at", UtcDateTime(), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("resolved", Boolean(), nullable=False),
        Column("resolved_at", UtcDateTime()),
        Column("resolved_by", String(200)),
        Column("resolution_note", Text()),
        Column("resolution_action", String(100)),
        Column("raw_message", Text()),
        Index(None, "occurrence_id"),
        # One unresolved record per occurrence: a repeated report of the same end adds nothing.
        _partial(
            "uq_failed_occurrences_unresolved", "occurrence_id", where=UNRESOLVED, unique=True
        ),
        # The list's filters, each in the list's order (newest first, by id).
        Index(None, "job_id", "id"),
        Index(None, "failure_type", "id"),
        Index(None, "resolved", "id"),
        Index(None, "failed_at"),
    )


def _security(metadata: MetaData) -> None:
    Table(
        "users",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("username", String(100), nullable=False),
        Column("password_hash", String(500), nullable=False),
        Column("role", String(20), nullable=False),
        Column("is_active", Boolean(), nullable=False),
        Column("failed_logins", Integer(), nullable=False, server_default="0"),
        Column("locked_until", UtcDateTime()),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("updated_at", UtcDateTime(), nullable=False),
        Column("login_check_until", UtcDateTime()),
        # Access tokens issued at or before it are refused (migration 0027).
        Column("tokens_valid_after", UtcDateTime()),
        UniqueConstraint("username"),
    )
    # Names that are not users, throttled like users (see ``SecurityQueries.reserve_login``).
    Table(
        "login_throttles",
        metadata,
        Column("name", String(100), primary_key=True),
        Column("failed_logins", Integer(), nullable=False, server_default="0"),
        Column("locked_until", UtcDateTime()),
        Column("check_until", UtcDateTime()),
        Column("updated_at", UtcDateTime(), nullable=False),
        Index(None, "updated_at"),
    )
    Table(
        "refresh_tokens",
        metadata,
        Column("token_hash", String(64), primary_key=True),
        Column("family_id", Uuid(), nullable=False),
        Column("user_id", Uuid(), ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        Column("issued_at", UtcDateTime(), nullable=False),
        Column("expires_at", UtcDateTime(), nullable=False),
        Column("used_at", UtcDateTime()),
        Column("revoked_at", UtcDateTime()),
        Index(None, "family_id"),
        Index(None, "user_id"),
        Index(None, "expires_at"),
    )
    # No foreign key to users: the log outlives deleted users (``actor`` is a username).
    Table(
        "audit_entries",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("at", UtcDateTime(), nullable=False),
        Column("actor", String(100), nullable=False),
        Column("action", String(100), nullable=False),
        Column("resource_type", String(50), nullable=False),
        Column("resource_id", String(200)),
        Column("before", Json()),
        Column("after", Json()),
        Index(None, "at"),
        Index(None, "actor", "id"),
        Index(None, "resource_type", "resource_id", "id"),
    )


PENDING_DELIVERIES = text("state = 'pending'")


def _notifications(metadata: MetaData) -> None:
    Table(
        "notify_subscriptions",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("name", String(200), nullable=False),
        Column("events", Json(), nullable=False),
        Column("channel", String(20), nullable=False),
        Column("job_id", Uuid()),
        Column("tag", String(200)),
        Column("url", Text()),
        Column("secret", Text()),
        Column("recipients", Json(), nullable=False),
        Column("threshold", Integer(), nullable=False, server_default="0"),
        Column("enabled", Boolean(), nullable=False),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("updated_at", UtcDateTime(), nullable=False),
        Column("created_by", String(100)),
    )
    Table(
        "notify_deliveries",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column(
            "subscription_id",
            Uuid(),
            ForeignKey("notify_subscriptions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        Column("event", String(50), nullable=False),
        Column("event_key", String(300), nullable=False),
        Column("payload", Json(), nullable=False),
        Column("state", String(20), nullable=False),
        Column("attempts", Integer(), nullable=False, server_default="0"),
        Column("next_attempt_at", UtcDateTime(), nullable=False),
        Column("claimed_by", String(200)),
        Column("claimed_until", UtcDateTime()),
        Column("created_at", UtcDateTime(), nullable=False),
        Column("finished_at", UtcDateTime()),
        Column("last_error", Text()),
        # The same notice made twice (two servers, a replayed report) is one delivery.
        UniqueConstraint("subscription_id", "event_key"),
        _partial("ix_notify_deliveries_due", "next_attempt_at", where=PENDING_DELIVERIES),
        Index(None, "finished_at"),
    )
    Table(
        "notify_attempts",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("delivery_id", Uuid(), nullable=False),
        Column(
            "subscription_id",
            Uuid(),
            ForeignKey("notify_subscriptions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        Column("event", String(50), nullable=False),
        Column("attempt", Integer(), nullable=False),
        Column("at", UtcDateTime(), nullable=False),
        Column("ok", Boolean(), nullable=False),
        Column("status_code", Integer()),
        Column("error", Text()),
        Index(None, "subscription_id", "at"),
    )


metadata = build_metadata()
"""The store's tables: plain declarations, no connection or state."""

partitioned_metadata = build_metadata(partitioned=True)
"""The same tables in PostgreSQL's layout (see :func:`build_metadata`)."""


def metadata_for(dialect: str) -> MetaData:
    """What ``rota migrate`` builds on this database: partitioned on PostgreSQL."""
    return partitioned_metadata if dialect == "postgresql" else metadata


jobs = metadata.tables["jobs"]
job_tags = metadata.tables["job_tags"]
job_versions = metadata.tables["job_versions"]
occurrences = metadata.tables["occurrences"]
occurrence_logs = metadata.tables["occurrence_logs"]
failed_occurrences = metadata.tables["failed_occurrences"]
occurrence_counts = metadata.tables["occurrence_counts"]
occurrence_totals = metadata.tables["occurrence_totals"]
finished_minutes = metadata.tables["finished_minutes"]
finished_hours = metadata.tables["finished_hours"]
job_totals = metadata.tables["job_totals"]
tag_counts = metadata.tables["tag_counts"]
job_type_counts = metadata.tables["job_type_counts"]
users = metadata.tables["users"]
refresh_tokens = metadata.tables["refresh_tokens"]
login_throttles = metadata.tables["login_throttles"]
audit_entries = metadata.tables["audit_entries"]
api_keys = metadata.tables["api_keys"]
scheduler_control = metadata.tables["scheduler_control"]
dispatch_batches = metadata.tables["dispatch_batches"]
declared_job_types = metadata.tables["declared_job_types"]
idempotency_keys = metadata.tables["idempotency_keys"]
job_dependencies = metadata.tables["job_dependencies"]
graph_runs = metadata.tables["graph_runs"]
graph_run_nodes = metadata.tables["graph_run_nodes"]
notification_subscriptions = metadata.tables["notify_subscriptions"]
notification_deliveries = metadata.tables["notify_deliveries"]
notification_attempts = metadata.tables["notify_attempts"]
