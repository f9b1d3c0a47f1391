"""Statement builders shared by the query mixins: chunked ``IN`` reads, the batch inserts and
updates, and the undispatched-occurrence query."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    Row,
    Select,
    Table,
    Uuid,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from rota.core.models import WAITING_POLICIES, OccurrenceStatus
from rota.stores.schema import (
    UtcDateTime,
    failed_occurrences,
    jobs,
    occurrence_logs,
    occurrences,
)
from rota.stores.sql.batches import hot_params, insert_values
from rota.stores.sql.rows import ACTIVE, _chunks

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


def _insert_stmt(table: Table, skip: tuple[str, ...] = (), *, unnest: bool = False) -> UpdateBase:
    types = {c.name: c.type for c in table.columns if c.name not in skip}
    return insert_values(insert(table), hot_params(types, unnest=unnest), unnest=unnest)


def _insert_or_skip_stmt(
    dialect: str,
    table: Table,
    *,
    skip: tuple[str, ...] = (),
    conflict_keys: Sequence[str] | None = None,
    unnest: bool = False,
) -> UpdateBase:
    """An INSERT of every column but ``skip`` (named, typed parameters; ``unnest``:
    PostgreSQL's form for a batch) that skips a row conflicting with a unique key
    (``conflict_keys``, else any) instead of failing."""
    types = {c.name: c.type for c in table.columns if c.name not in skip}
    values = hot_params(types, unnest=unnest)
    if dialect == "postgresql":
        pg = insert_values(postgresql.insert(table), values, unnest=unnest)
        return pg.on_conflict_do_nothing(index_elements=conflict_keys)
    lite = sqlite.insert(table).values(values)
    return lite.on_conflict_do_nothing(index_elements=conflict_keys)


def _insert_logs_stmt(dialect: str, *, unnest: bool = False) -> UpdateBase:
    """Log lines; a numbered line already stored (same occurrence, attempt, line) is skipped."""
    return _insert_or_skip_stmt(dialect, occurrence_logs, skip=("seq",), unnest=unnest)


ADVANCE_KEYS = ("b_id",)


def _advance_jobs_stmt(*, unnest: bool = False) -> UpdateBase:
    """Each planned job's next fire, activity and run count (key: ``ADVANCE_KEYS``)."""
    types = {"b_id": Uuid(), "b_next": UtcDateTime(), "b_active": Boolean(), "b_runs": Integer()}
    p = hot_params(types, unnest=unnest)
    return (
        update(jobs)
        .where(jobs.c.id == p["b_id"])
        .values(next_run_at=p["b_next"], is_active=p["b_active"], run_count=p["b_runs"])
    )


OCCURRENCE_KEYS = ("id", "key_at")


class history_append(FunctionElement[Any]):
    """``history`` with the entries of the JSON array ``appended`` after its own, in SQL: a
    status change is appended without the history being read (PostgreSQL: ``jsonb ||``;
    SQLite: the two arrays' texts spliced; a ``NULL`` or empty history is ``appended``)."""

    name = "history_append"
    inherit_cache = True
    type = occurrences.c.history.type


@compiles(history_append, "postgresql")
def _append_jsonb(element: history_append, compiler: SQLCompiler, **kw: Any) -> str:
    history, appended = (compiler.process(e, **kw) for e in element.clauses)
    return f"(coalesce({history}, '[]'::jsonb) || {appended})"


@compiles(history_append, "sqlite")
def _append_text(element: history_append, compiler: SQLCompiler, **kw: Any) -> str:
    # '[a,b]' + '[c]': '[a,b' || ',' || 'c]'; NULL or '[]' + '[c]': '[' || 'c]'. The entries
    # are objects, and the JSON texts are compact: each array ends with its own ']'.
    history, appended = (compiler.process(e, **kw) for e in element.clauses)
    head = f"substr(nullif({history}, '[]'), 1, length({history}) - 1) || ','"
    return f"(coalesce({head}, '[') || substr({appended}, 2))"


def _update_occurrences_stmt(columns: Sequence[str], *, unnest: bool = False) -> UpdateBase:
    """Set ``columns`` (parameters named after them) of the occurrence with parameters ``id``
    and ``key_at`` (``OCCURRENCE_KEYS``; ``key_at`` is its ``scheduled_for``: on PostgreSQL
    the executor then looks in the one time partition that holds the row, not in every
    partition). ``history`` is what is appended to the occurrence's history
    (:class:`history_append`), not the whole of it."""
    c = occurrences.c
    types = {"id": Uuid(), "key_at": UtcDateTime(), **{name: c[name].type for name in columns}}
    p = hot_params(types, unnest=unnest)
    key = and_(c.id == p["id"], c.scheduled_for == p["key_at"])
    values: dict[str, ColumnElement[Any]] = {name: p[name] for name in columns}
    if "history" in values:
        values["history"] = history_append(c.history, values["history"])
    return update(occurrences).where(key).values(values)


STREAK_KEYS = ("b_id",)


def _reset_streaks_stmt(*, unnest: bool = False) -> UpdateBase:
    """A batch brought a job only successes: its consecutive-failure count goes back to 0,
    and a probing job is enabled for good (its probe succeeded: the disable reason goes).
    A job with no failure counted and no probe is not written at all (the common case: a
    run's end writes no jobs row; its statistics are in ``occurrence_counts``)."""
    j = jobs.c
    zero = literal_column("0", type_=BigInteger())
    probing = func.coalesce(j.probing, false())  # PostgreSQL: NULL is false (migration 0024)
    p = hot_params({"b_id": Uuid()}, unnest=unnest)
    return (
        update(jobs)
        .where(
            j.id == p["b_id"],
            or_(func.coalesce(j.consecutive_failures, zero) != zero, probing),
        )
        .values(
            consecutive_failures=zero,
            probing=false(),
            disabled_reason=case((probing, null()), else_=j.disabled_reason),
            disabled_at=case((probing, null()), else_=j.disabled_at),
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


_MARK_DISPATCHED_PG = f"""
WITH marked AS (
    SELECT o.id, o.scheduled_for, v.due_at FROM {occurrences.name} AS o
    JOIN unnest(
        $2::UUID[], $3::TIMESTAMP WITH TIME ZONE[], $4::INTEGER[], $5::TIMESTAMP WITH TIME ZONE[]
    ) AS v(id, key_at, attempt, due_at)
        ON o.id = v.id AND o.scheduled_for = v.key_at AND o.attempt = v.attempt
    WHERE o.dispatched_at IS NULL
    ORDER BY o.id
    FOR UPDATE OF o
)
UPDATE {occurrences.name} SET dispatched_at = $1::TIMESTAMP WITH TIME ZONE, due_at = marked.due_at
FROM marked
WHERE {occurrences.name}.id = marked.id AND {occurrences.name}.scheduled_for = marked.scheduled_for
"""
"""PostgreSQL: mark a batch of published occurrences dispatched in one statement, locking
them in id order (the status tracker's order) first; each one's ``due_at`` is its own again
(the fire's claim ends)."""


def _mark_dispatched_stmt(at: datetime) -> UpdateBase:
    """SQLite: mark one published occurrence dispatched at ``at`` (run once per occurrence):
    only the attempt that was published, and only while it is still undispatched; its
    ``due_at`` is its own again (the fire's claim ends)."""
    c = occurrences.c
    return (
        update(occurrences)
        .where(
            c.id == bindparam("b_id", type_=Uuid()),
            c.scheduled_for == bindparam("b_key_at", type_=UtcDateTime()),
            c.attempt == bindparam("b_attempt", type_=Integer()),
            c.dispatched_at.is_(None),
        )
        .values(dispatched_at=at, due_at=bindparam("b_due", type_=UtcDateTime()))
    )


def status_in(column: ColumnElement[Any], statuses: Iterable[int]) -> ColumnElement[bool]:
    """``column`` is one of ``statuses``, written as literals: a statement that says
    ``status = 0`` in its text can read the partial index of the Queued occurrences
    (``ix_occurrences_queued``, migration 0026) on either store, and PostgreSQL's planner
    proves from the literals the condition of its partial status indexes
    (``schema.NOT_COMPLETED``, migration 0034). A bound parameter can do neither: a prepared
    statement's generic plan is made for any value, and SQLite does not look into parameters
    for a partial index."""
    values = sorted({int(s) for s in statuses})
    if len(values) == 1:
        return column == literal_column(str(values[0]))
    return column.in_([literal_column(str(v)) for v in values])


def _undispatched_stmt(due_before: datetime, limit: int) -> Select[Any]:
    """Queued, never dispatched, due (a claim, the sweep's or the fire's, holds ``due_at``
    past its end), not held behind an earlier active occurrence of a Queue-policy job;
    earliest due first."""
    occ = occurrences
    earlier = occurrences.alias("earlier")
    waiting = exists().where(
        earlier.c.job_id == occ.c.job_id,
        status_in(earlier.c.status, ACTIVE),
        earlier.c.id < occ.c.id,
    )
    return (
        select(occ)
        .where(
            status_in(occ.c.status, [OccurrenceStatus.QUEUED]),
            occ.c.dispatched_at.is_(None),
            occ.c.due_at <= due_before,
            or_(occ.c.concurrency_policy.not_in([int(p) for p in WAITING_POLICIES]), ~waiting),
        )
        .order_by(occ.c.due_at, occ.c.id)
        .limit(max(0, limit))
    )


def _insert_failed_stmt(dialect: str, *, unnest: bool = False) -> UpdateBase:
    """Failed-occurrence records; one that would give an occurrence a second unresolved record
    (the partial unique index) is skipped."""
    return _insert_or_skip_stmt(dialect, failed_occurrences, unnest=unnest)
