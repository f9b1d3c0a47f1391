"""Plain one-time fires, set-based on PostgreSQL: the jobs of a dispatch batch that
:class:`~rota.core.planning.PlainFires` describes are claimed, fired and moved on by one
statement: their rows locked in id order (``SKIP LOCKED``, as the planner's claim), each
one's occurrence inserted with its values copied from the job's row in SQL, its next fire
cleared. No job row is read into Python and no plan is built per job; the occurrences come
back for the dispatcher to send.

It fires exactly what :func:`~rota.core.planning.plan_fires` plans for such a job, and only
that: every job the statement leaves (recurring, paused, late, busy, undeclared, locked
elsewhere, a fire already recorded) is planned one by one in the same transaction. The
store's contract suite holds both to the same outcomes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.ids import new_id
from rota.core.jobfields import JOB_FIELDS
from rota.core.models import (
    ConcurrencyPolicy,
    MisfirePolicy,
    Occurrence,
    OccurrenceStatus,
    Priority,
    StatusChange,
)
from rota.core.planning import PlainFires
from rota.stores.schema import from_utc_text, utc_text
from rota.stores.sql.engine import _json_dumps, _json_loads
from rota.stores.sql.rows import ACTIVE, change_entry

_QUEUED = OccurrenceStatus.QUEUED
_STORED_MISFIRE = MisfirePolicy(
    str(next(f.stored_default for f in JOB_FIELDS if f.name == "misfire_policy"))
)
"""What a ``NULL`` misfire policy means (a compact row's)."""
_LATE_RUNS = ", ".join(f"'{p.value}'" for p in (MisfirePolicy.FIRE_ONCE, MisfirePolicy.CATCH_UP))


def _plain(job: Callable[[str], str], active: str) -> str:
    """The conditions of a plain fire on the job row ``j`` (``job``: how a parameter is
    written, by its name; ``active``: the occurrences' active statuses)."""
    return f"""j.is_active AND j.next_run_at <= {job("horizon")}
        AND j.cron_expression IS NULL AND j.interval_seconds IS NULL
        AND j.paused_at IS NULL AND coalesce(j.skip_next, 0) = 0
        AND coalesce(j.jitter_seconds, 0) = 0
        AND (j.max_runs IS NULL OR j.max_runs > coalesce(j.run_count, 0))
        AND (
            coalesce(j.misfire_policy, '{_STORED_MISFIRE.value}') IN ({_LATE_RUNS})
            OR j.next_run_at >= {job("now")}
            OR (j.misfire_window_seconds IS NULL AND j.next_run_at >= {job("late_before")})
        )
        AND NOT EXISTS (
            SELECT 1 FROM occurrences o WHERE o.job_id = j.id AND o.status IN ({active})
        )"""


_ACTIVE = ", ".join(map(str, ACTIVE))
_SKIP = int(ConcurrencyPolicy.SKIP)
_COLUMNS = """id, job_id, job_type, worker_id, status, scheduled_for, due_at, created_at,
        attempt, max_retries, priority, timeout_seconds, job_version, job_data, dispatched_at,
        retry_delay_seconds, concurrency_policy, history, counted"""
_RETURNED = """id, job_id, job_type, worker_id, scheduled_for, max_retries, priority,
        timeout_seconds, job_version, job_data, dispatched_at, retry_delay_seconds"""
_PG_PARAMS = (
    "jobs",
    "ids",
    "types",
    "groups",
    "default_types",
    "default_retries",
    "default_timeouts",
    "horizon",
    "now",
    "late_before",
    "default_max_retries",
    "sent",
    "mark_skip",
    "history",
)
""":data:`FIRE_PLAIN`'s parameters in their order (``$1`` …)."""
_PG = {name: f"${i}" for i, name in enumerate(_PG_PARAMS, start=1)}

FIRE_PLAIN = f"""
WITH p AS (
    SELECT * FROM unnest({_PG["jobs"]}::uuid[], {_PG["ids"]}::uuid[]) AS p(job_id, id)
), declared AS (
    SELECT * FROM unnest({_PG["types"]}::text[], {_PG["groups"]}::text[])
        AS d(job_type, worker_id)
), type_defaults AS (
    SELECT * FROM unnest(
        {_PG["default_types"]}::text[], {_PG["default_retries"]}::integer[],
        {_PG["default_timeouts"]}::double precision[]
    ) AS t(job_type, max_retries, timeout_seconds)
), j AS (
    SELECT p.id AS occurrence_id, j.id, j.job_type, j.worker_id, j.next_run_at, j.priority,
        j.timeout_seconds, j.max_retries, j.retry_delay_seconds, j.version, j.job_data,
        j.concurrency_policy
    FROM (SELECT * FROM p ORDER BY job_id) p
    CROSS JOIN LATERAL (
        SELECT * FROM jobs j
        WHERE j.id = p.job_id AND {_plain(_PG.__getitem__, _ACTIVE)}
            AND EXISTS (
                SELECT 1 FROM declared d
                WHERE d.job_type = j.job_type
                    AND (j.worker_id IS NULL OR d.worker_id = j.worker_id)
            )
        OFFSET 0
    ) j
    FOR UPDATE OF j SKIP LOCKED
), fired AS (
    INSERT INTO occurrences ({_COLUMNS})
    SELECT j.occurrence_id, j.id, j.job_type, j.worker_id, {int(_QUEUED)}, j.next_run_at,
        j.next_run_at, {_PG["now"]}, 1,
        coalesce(j.max_retries, t.max_retries, {_PG["default_max_retries"]}), j.priority,
        coalesce(j.timeout_seconds, t.timeout_seconds), j.version, j.job_data,
        CASE WHEN {_PG["sent"]} OR ({_PG["mark_skip"]} AND j.concurrency_policy = {_SKIP})
            THEN {_PG["now"]} END,
        j.retry_delay_seconds, j.concurrency_policy, {_PG["history"]}::jsonb, false
    FROM j LEFT JOIN type_defaults t ON t.job_type = j.job_type
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING {_RETURNED}
), moved AS (
    UPDATE jobs SET next_run_at = NULL WHERE id = ANY(ARRAY(SELECT job_id FROM fired))
)
SELECT * FROM fired
"""
"""PostgreSQL: the batch's plain fires, in one statement. Each job is looked up by its id
from the batch (``LATERAL … OFFSET 0``, in id order, each locked as it is found): a plan the
planner may choose from the schedule index reads every due job for every batch, and the dead
index entries of the jobs fired before them (found by ``auto_explain`` in a 100,000-job
bench: 1.5 s a batch of 2,000). Parameters: the jobs and a new
occurrence id for each, the declared (type, group) pairs, the types' declared defaults, the
horizon, now, the misfire cutoff, the default ``max_retries``, whether the fires are inserted
dispatched (the caller sends them), whether a Skip-policy one is, and the creation's
history. Returns each occurrence inserted; a job it does not return is untouched."""

FIRE_PLAIN_SQLITE = f"""
INSERT INTO occurrences ({_COLUMNS})
SELECT json_extract(p.value, '$[1]'), j.id, j.job_type, j.worker_id, {int(_QUEUED)},
    j.next_run_at, j.next_run_at, :now, 1,
    coalesce(j.max_retries, json_extract(t.value, '$[1]'), :default_max_retries), j.priority,
    coalesce(j.timeout_seconds, json_extract(t.value, '$[2]')), j.version, j.job_data,
    CASE WHEN :sent OR (:mark_skip AND j.concurrency_policy = {_SKIP}) THEN :now END,
    j.retry_delay_seconds, j.concurrency_policy, :history, 0
FROM json_each(:jobs) p
CROSS JOIN jobs j ON j.id = json_extract(p.value, '$[0]')
LEFT JOIN json_each(:type_defaults) t ON json_extract(t.value, '$[0]') = j.job_type
WHERE {_plain(lambda name: ":" + name, _ACTIVE)}
    AND EXISTS (
        SELECT 1 FROM json_each(:declared) d
        WHERE json_extract(d.value, '$[0]') = j.job_type
            AND (j.worker_id IS NULL OR json_extract(d.value, '$[1]') = j.worker_id)
    )
ON CONFLICT (job_id, scheduled_for) DO NOTHING
"""
"""SQLite (one writer: nothing to lock): the batch's plain fires inserted, the same values
from JSON arrays of the same parameters (ids and times as SQLite keeps them); the plan starts
from the batch (``CROSS JOIN`` fixes the order) and finds each job by its id. What it
inserted is read by :data:`FIRED_SQLITE`, and its jobs are moved on by
:data:`CLEAR_NEXT_SQLITE`."""

FIRED_SQLITE = f"""
SELECT json_group_array(json_array({", ".join("o." + c.strip() for c in _RETURNED.split(","))}))
FROM json_each(:jobs) p
CROSS JOIN occurrences o ON o.id = json_extract(p.value, '$[1]')
"""
"""SQLite: the occurrences :data:`FIRE_PLAIN_SQLITE` inserted (each fire's id was chosen
before), as one JSON array in one row: ``RETURNING`` would step SQLite once per row, and
each step gives up the interpreter's lock and takes it back from the busy event loop."""

CLEAR_NEXT_SQLITE = (
    "UPDATE jobs SET next_run_at = NULL WHERE id IN (SELECT value FROM json_each(:jobs))"
)


class PlainFire:
    """One dispatch batch's plain fires, in three steps so that the writer's transaction
    holds only the statements: the parameters are built before it (the constructor), the
    statements run in it (PostgreSQL :meth:`run`: :data:`FIRE_PLAIN`; SQLite
    :meth:`run_sqlite`, on the hot writer's thread: :data:`FIRE_PLAIN_SQLITE`,
    :data:`FIRED_SQLITE` and :data:`CLEAR_NEXT_SQLITE`), and the occurrences are built after
    it (:meth:`occurrences`).

    ``sent``: the occurrences are inserted dispatched ``plain.now`` (the caller publishes
    them)."""

    __slots__ = ("_dialect", "_known", "_params", "_rows", "now")

    def __init__(
        self,
        dialect: str,
        job_ids: Sequence[UUID],
        horizon: datetime,
        plain: PlainFires,
        *,
        sent: bool,
    ) -> None:
        now = self.now = plain.now
        history = _json_dumps([change_entry(now, None, int(_QUEUED), 1, None)])
        ids = [new_id() for _ in job_ids]
        self._dialect = dialect
        self._rows: list[Any] = []
        self._known: dict[str, UUID] = {}
        self._params: Any
        if dialect == "sqlite":
            pairs = [(j.hex, i.hex) for j, i in zip(job_ids, ids, strict=True)]
            # The rows come back with their ids as text: mapped to the ids given, not parsed.
            known = self._known
            known.update(zip((i for _, i in pairs), ids, strict=True))
            known.update(zip((j for j, _ in pairs), job_ids, strict=True))
            self._params = {
                "jobs": _json_dumps(pairs),
                "declared": _json_dumps(plain.declared),
                "type_defaults": _json_dumps(plain.type_defaults),
                "horizon": utc_text(horizon),
                "now": utc_text(now),
                "late_before": utc_text(plain.late_before),
                "default_max_retries": plain.default_max_retries,
                "sent": int(sent),
                "mark_skip": int(plain.mark_skip),
                "history": history,
            }
            return
        declared_types, declared_groups = _columns(plain.declared, 2)
        default_types, default_retries, default_timeouts = _columns(plain.type_defaults, 3)
        values = {
            "jobs": list(job_ids),
            "ids": ids,
            "types": declared_types,
            "groups": declared_groups,
            "default_types": default_types,
            "default_retries": default_retries,
            "default_timeouts": default_timeouts,
            "horizon": horizon,
            "now": now,
            "late_before": plain.late_before,
            "default_max_retries": plain.default_max_retries,
            "sent": sent,
            "mark_skip": plain.mark_skip,
            "history": history,
        }
        self._params = tuple(values[name] for name in _PG_PARAMS)

    async def run(self, conn: AsyncConnection) -> list[UUID]:
        """PostgreSQL: fire, in ``conn``'s transaction; returns the jobs fired (a job it does
        not return is untouched)."""
        self._rows = rows = list((await conn.exec_driver_sql(FIRE_PLAIN, self._params)).all())
        return [r[1] for r in rows]

    def run_sqlite(self, db: sqlite3.Connection) -> list[UUID]:
        """SQLite: fire, in ``db``'s transaction (on the hot writer's thread); returns the
        jobs fired (a job it does not return is untouched)."""
        params = self._params
        db.execute(FIRE_PLAIN_SQLITE, params)
        (fired,) = db.execute(FIRED_SQLITE, {"jobs": params["jobs"]}).fetchone()
        raw = _json_loads(fired)
        if not raw:
            return []
        self._rows = raw
        db.execute(CLEAR_NEXT_SQLITE, {"jobs": _json_dumps([r[1] for r in raw])})
        known = self._known
        return [known[r[1]] for r in raw]

    def ids(self) -> list[UUID]:
        """The occurrences :meth:`run` inserted."""
        if self._dialect != "sqlite":
            return [r[0] for r in self._rows]
        known = self._known
        return [known[r[0]] for r in self._rows]

    def occurrences(self) -> list[Occurrence]:
        """The occurrences :meth:`run` inserted, each with its creation in its history."""
        now = self.now
        changes = (StatusChange(timestamp=now, from_status=None, to_status=_QUEUED),)
        return [
            Occurrence(
                id=r[0],
                job_id=r[1],
                job_type=r[2],
                worker_id=r[3],
                status=_QUEUED,
                scheduled_for=r[4],
                due_at=r[4],
                created_at=now,
                max_retries=r[5],
                priority=Priority(r[6]),
                timeout_seconds=r[7],
                job_version=r[8],
                job_data=r[9],
                dispatched_at=r[10],
                retry_delay_seconds=r[11],
                status_changes=changes,
            )
            for r in self._typed_rows()
        ]

    def _typed_rows(self) -> Sequence[Sequence[Any]]:
        """The rows inserted with their values as PostgreSQL's driver gives them (ids, times,
        JSON decoded)."""
        if self._dialect != "sqlite":
            return self._rows
        known = self._known
        return [
            (
                known[r[0]],
                known[r[1]],
                r[2],
                r[3],
                from_utc_text(r[4]),
                r[5],
                r[6],
                r[7],
                r[8],
                None if r[9] is None else _json_loads(r[9]),  # JSON text in the column
                None if r[10] is None else from_utc_text(r[10]),
                r[11],
            )
            for r in self._rows
        ]


def _columns(rows: Sequence[tuple[object, ...]], width: int) -> tuple[list[object], ...]:
    """``rows`` as one list per column (``width`` of them)."""
    if not rows:
        return tuple([] for _ in range(width))
    return tuple(list(column) for column in zip(*rows, strict=True))
