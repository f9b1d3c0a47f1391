"""Maintained statistics: the occurrence counts and the finished occurrences per minute, kept
in the transaction of every write that adds, changes or removes an occurrence, so the
overview and a job's counts are a few rows to read instead of a scan of the history.

- ``occurrence_counts`` (job_id, status) -> n: a job's occurrences by status, for the
  statuses an occurrence settles in; the in-flight ones (Queued, Running: ``rows.ACTIVE``) are
  counted from the occurrences themselves when asked (the ``(job_id, status, id)`` index: as
  many entries as the job has queued or running). Counting them here cost every occurrence
  two more writes (its Queued row added to, then taken from) and left a row of zeros per
  job behind: a one-time job's history was two count rows, now one. The same row keeps the
  job's run statistics (migration 0031): ``runs``, how many times the status tracker took an
  occurrence of the job to this final status (never taken back: retention and retries
  leave it), and for Completed the sum and count of their durations; a job's
  ``total_executions``, ``success_count``, ``failure_count`` and ``average_duration_ms``
  are read from them (:mod:`rota.stores.sql.jobstats`), so a run's end writes no jobs row.
  A one-time job's fire is inserted *uncounted* (``occurrences.counted`` false, migration
  0033): it has no part in these rows, and the readers of a job's counts and statistics add
  it from the occurrence itself (its settled status; a run in its final status, with its
  duration when Completed), found through the partial index of the uncounted occurrences.
  Such an occurrence has been in a final status at most once (the one it is in): before it
  leaves one (a manual retry) or leaves the table (a purge, a dropped partition), it is
  *folded* into these rows under its row lock, its runs and durations kept as a counted
  one's are. Every job of a burst of one-time jobs then writes no count row at all.
- ``occurrence_totals`` (shard, status) -> n: the same over every job, in :data:`SHARDS`
  rows per status; each transaction adds to one shard chosen at random, so concurrent
  writers (several trackers, distributed) seldom wait on the same row. A read sums them.
- ``finished_minutes`` (minute, shard, status) -> n, duration sum and count: the
  occurrences with an ``end_time`` in that minute and a status of :data:`WINDOWED`, which is
  what the overview's window counts; ``finished_hours`` the same per hour. A window reads
  its whole hours, then the whole minutes before the first of them, then the occurrences
  of the part of a minute before those (the ``(end_time, status)`` index).
- ``job_totals`` (shard) -> jobs, active: the jobs, and those active, over :data:`SHARDS`
  rows the same way; added to by every write that creates or deletes a job or changes its
  ``is_active`` (create, bulk create, update, delete, a dispatch that retires a job, an
  auto-disable, a probe), in the write's own transaction, so the overview's job counts are
  a few rows to read however many jobs there are.
- ``tag_counts`` (tag, shard) -> n: the jobs holding each tag, kept by the writes that create,
  delete or retag a job; the tags in use and their counts are a read of these rows.
- ``job_type_counts`` (job_type, shard) -> n: the jobs of each type, kept by the writes that
  create, delete or change the type of a job; the search finds a text in the job types in use
  there (the text index leaves the type out: migration 0023).

Every change is an atomic ``n = n + excluded.n`` upsert, one statement per table per batch
(deltas summed in memory first), written last in its transaction and in key order: writers
never hold a counter row while waiting for another lock, so they cannot deadlock on them.
Occurrences outlive their job (no foreign key), so deleting a job changes no count, as
before; retention removes what it deletes (row purges and dropped partitions).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Final
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Float,
    SmallInteger,
    String,
    Table,
    Uuid,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.types import TypeEngine

from rota.core.models import OccurrenceStatus
from rota.stores.schema import (
    finished_hours,
    finished_minutes,
    job_totals,
    job_type_counts,
    occurrence_counts,
    occurrence_totals,
    tag_counts,
)
from rota.stores.sql.batches import hot_params, insert_values
from rota.stores.sql.engine import SqlParts
from rota.stores.sql.rows import ACTIVE

SHARDS: Final = 8
"""Rows per status of ``occurrence_totals`` and per minute and status of
``finished_minutes``."""
WINDOWED: Final = frozenset(
    int(s)
    for s in (
        OccurrenceStatus.COMPLETED,
        OccurrenceStatus.FAILED,
        OccurrenceStatus.TIMED_OUT,
        OccurrenceStatus.CANCELLED,
    )
)
"""The statuses the overview's window counts by ``end_time``."""
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MINUTE: Final = timedelta(minutes=1)
HOUR: Final = timedelta(hours=1)


def minute_of(at: datetime) -> int:
    """Epoch seconds of the start of ``at``'s minute (exact: no float rounding)."""
    return (at - EPOCH) // MINUTE * 60


def next_minute(at: datetime) -> int:
    """Epoch seconds of the first minute start at or after ``at``."""
    whole, rest = divmod(at - EPOCH, MINUTE)
    return (whole + (1 if rest else 0)) * 60


def next_hour(at: datetime) -> int:
    """Epoch seconds of the first hour start at or after ``at``."""
    whole, rest = divmod(at - EPOCH, HOUR)
    return (whole + (1 if rest else 0)) * 3600


RUN_STATUSES: Final = frozenset(int(s) for s in OccurrenceStatus if s.is_terminal)
"""The statuses an occurrence's run ends in: reaching one counts a run of its job."""
_COMPLETED: Final = int(OccurrenceStatus.COMPLETED)


def durations(duration_ms: float | None) -> tuple[float, int]:
    """One occurrence's duration as a (sum, count) pair."""
    return (0.0, 0) if duration_ms is None else (float(duration_ms), 1)


class StatDeltas:
    """The changes a transaction makes to the aggregates, summed before they are written.

    Two kinds: per job (``counts`` and ``runs``: ``occurrence_counts``, the counted
    occurrences only) and over every occurrence (``totals``, ``minutes``: the per-shard
    tables, the overview's, which count every occurrence alike)."""

    __slots__ = ("active", "counts", "jobs", "minutes", "runs", "tags", "totals", "types")

    def __init__(self) -> None:
        self.counts: defaultdict[tuple[UUID, int], int] = defaultdict(int)
        """(job, status) -> counted occurrences added (less those removed)."""
        self.runs: defaultdict[tuple[UUID, int], list[Any]] = defaultdict(lambda: [0, 0.0, 0])
        """(job, final status) -> runs that reached it, their duration sum and count."""
        self.totals: defaultdict[int, int] = defaultdict(int)
        """Status -> occurrences added (less those removed), counted or not."""
        self.minutes: defaultdict[tuple[int, int], list[Any]] = defaultdict(lambda: [0, 0.0, 0])
        self.jobs = 0
        """Jobs added (less those removed)."""
        self.active = 0
        """Active jobs added or activated (less those removed or deactivated)."""
        self.tags: defaultdict[str, int] = defaultdict(int)
        """Tag -> jobs holding it added (less those removed)."""
        self.types: defaultdict[str, int] = defaultdict(int)
        """Job type -> jobs of it added (less those removed)."""

    @classmethod
    def of_jobs(
        cls, jobs: Iterable[tuple[str, bool, Iterable[str] | None]], sign: int = 1
    ) -> StatDeltas:
        """Jobs added (``sign`` 1) or removed (-1), given the job type of each, whether it is
        active, and its tags."""
        deltas = cls()
        for job_type, is_active, tags in jobs:
            deltas.jobs += sign
            deltas.active += sign if is_active else 0
            deltas.types[job_type] += sign
            deltas.retag((), tags or (), sign)
        return deltas

    def retype(self, was: str, now: str) -> None:
        """A job's type changed from ``was`` to ``now`` (or did not)."""
        if was != now:
            self.types[was] -= 1
            self.types[now] += 1

    def retag(self, was: Iterable[str], now: Iterable[str], sign: int = 1) -> None:
        """A job's tags changed from ``was`` to ``now`` (each tag counted once a job)."""
        old, new = set(was), set(now)
        for tag in new - old:
            self.tags[tag] += sign
        for tag in old - new:
            self.tags[tag] -= sign

    def activation(self, was: bool, now: bool) -> None:
        """A job's ``is_active`` changed from ``was`` to ``now`` (or did not)."""
        self.active += int(bool(now)) - int(bool(was))

    def add(
        self,
        job_id: UUID,
        status: int,
        end_time: datetime | None,
        duration_ms: float | None,
        sign: int = 1,
        *,
        counted: bool = True,
    ) -> None:
        """Count (``sign`` 1) or uncount (-1) an occurrence in this state; in its job's
        counts only if it is ``counted``."""
        status = int(status)
        if counted:
            self.counts[(job_id, status)] += sign
        self.totals[status] += sign
        if end_time is not None and status in WINDOWED:
            bucket = self.minutes[(minute_of(end_time), status)]
            bucket[0] += sign
            if duration_ms is not None:
                bucket[1] += sign * float(duration_ms)
                bucket[2] += sign

    def ran(
        self,
        job_id: UUID,
        status: int,
        n: int = 1,
        duration_sum: float = 0.0,
        duration_count: int = 0,
    ) -> None:
        """``n`` runs of the job reached the final ``status`` (Completed ones with the sum
        and count of their durations)."""
        into = self.runs[(job_id, int(status))]
        into[0] += n
        if status == _COMPLETED:
            into[1] += duration_sum
            into[2] += duration_count

    def fold(
        self,
        job_id: UUID,
        status: int,
        n: int = 1,
        duration_sum: float = 0.0,
        duration_count: int = 0,
    ) -> None:
        """``n`` uncounted occurrences (``counted`` false) in this state written into their
        job's counts: what the readers added from their rows (their settled status; a run,
        in a final status). They are counted from then on."""
        status = int(status)
        if status not in ACTIVE:
            self.counts[(job_id, status)] += n
        if status in RUN_STATUSES:
            self.ran(job_id, status, n, duration_sum, duration_count)

    def add_rows(self, rows: Iterable[Any], sign: int = 1) -> None:
        """Each of ``rows`` (mappings or rows with job_id, status, end_time, duration_ms,
        counted)."""
        for r in rows:
            m = r if isinstance(r, dict) else r._mapping
            self.add(
                m["job_id"],
                m["status"],
                m["end_time"],
                m["duration_ms"],
                sign,
                counted=m["counted"],
            )

    def remove_rows(self, rows: Iterable[Any]) -> None:
        """Each of ``rows`` (as :meth:`add_rows` takes them) taken out of the state it is in:
        deleted (a purge), or leaving the final status it settled in (a manual retry, which
        counts it afresh in its new state). Uncounted ones are folded first, so that, as for
        a counted one, its job keeps the runs and durations."""
        for r in rows:
            m = r if isinstance(r, dict) else r._mapping
            if not m["counted"]:
                self.fold(m["job_id"], m["status"], 1, *durations(m["duration_ms"]))
            self.add(m["job_id"], m["status"], m["end_time"], m["duration_ms"], -1)

    def count_rows(self) -> list[dict[str, Any]]:
        """The rows of ``occurrence_counts``: the settled statuses only (not ``ACTIVE``)."""
        keys = {k for k, n in self.counts.items() if n and k[1] not in ACTIVE} | set(self.runs)
        none = (0, 0.0, 0)
        rows = []
        for job_id, status in sorted(keys):
            runs, dsum, dcount = self.runs.get((job_id, status), none)
            rows.append(
                {
                    "job_id": job_id,
                    "status": status,
                    "n": self.counts.get((job_id, status), 0),
                    "runs": runs,
                    "duration_sum": dsum,
                    "duration_count": dcount,
                }
            )
        return rows

    def total_rows(self, shard: int) -> list[dict[str, Any]]:
        return [
            {"shard": shard, "status": status, "n": n}
            for status, n in sorted(self.totals.items())
            if n
        ]

    def tag_rows(self, shard: int) -> list[dict[str, Any]]:
        return _keyed_rows("tag", shard, self.tags)

    def type_rows(self, shard: int) -> list[dict[str, Any]]:
        return _keyed_rows("job_type", shard, self.types)

    def job_rows(self, shard: int) -> list[dict[str, Any]]:
        if not (self.jobs or self.active):
            return []
        return [{"shard": shard, "jobs": self.jobs, "active": self.active}]

    def minute_rows(self, shard: int) -> list[dict[str, Any]]:
        return _time_rows("minute", shard, self.minutes)

    def hour_rows(self, shard: int) -> list[dict[str, Any]]:
        hours: defaultdict[tuple[int, int], list[Any]] = defaultdict(lambda: [0, 0.0, 0])
        for (minute, status), (n, dsum, dcount) in self.minutes.items():
            into = hours[(minute // 3600 * 3600, status)]
            into[0] += n
            into[1] += dsum
            into[2] += dcount
        return _time_rows("hour", shard, hours)


def _keyed_rows(key: str, shard: int, counts: dict[str, int]) -> list[dict[str, Any]]:
    """The rows of a (``key``, shard) -> n count table, in key order, zero deltas left out."""
    return [{key: value, "shard": shard, "n": n} for value, n in sorted(counts.items()) if n]


def _time_rows(
    key: str, shard: int, sums: dict[tuple[int, int], list[Any]]
) -> list[dict[str, Any]]:
    return [
        {
            key: at,
            "shard": shard,
            "status": status,
            "n": n,
            "duration_sum": dsum,
            "duration_count": dcount,
        }
        for (at, status), (n, dsum, dcount) in sorted(sums.items())
        if n or dcount
    ]


_TYPES: Final[dict[str, TypeEngine[Any]]] = {
    "job_id": Uuid(),
    "status": SmallInteger(),
    "shard": SmallInteger(),
    "minute": BigInteger(),
    "hour": BigInteger(),
    "n": BigInteger(),
    "runs": BigInteger(),
    "duration_sum": Float(),
    "duration_count": BigInteger(),
    "jobs": BigInteger(),
    "active": BigInteger(),
    "tag": String(200),
    "job_type": String(200),
}


def _add_stmt(dialect: str, table: Table, *, unnest: bool = False) -> UpdateBase:
    """``INSERT … ON CONFLICT (key) DO UPDATE SET x = x + excluded.x`` for every counter
    (``unnest``: PostgreSQL's form for a batch, whose keys are distinct)."""
    keys = [c.name for c in table.primary_key.columns]
    values = hot_params({c.name: _TYPES[c.name] for c in table.columns}, unnest=unnest)
    sums = [c.name for c in table.columns if c.name not in keys]
    if dialect == "postgresql":
        pg = insert_values(postgresql.insert(table), values, unnest=unnest)
        return pg.on_conflict_do_update(
            index_elements=keys, set_={n: table.c[n] + pg.excluded[n] for n in sums}
        )
    lite = sqlite.insert(table).values(values)
    return lite.on_conflict_do_update(
        index_elements=keys, set_={n: table.c[n] + lite.excluded[n] for n in sums}
    )


class AggregateQueries(SqlParts):
    """The writes (and the rebuild) of the maintained statistics."""

    async def _write_aggregates(self, conn: AsyncConnection, deltas: StatDeltas) -> None:
        """Add ``deltas`` in ``conn``'s transaction; call it last, after the transaction's
        other writes (or with the rows it writes after locked already). The tables in one
        order, each in key order: two writers never wait on each other's counter rows the
        other way round."""
        for table, rows in self._aggregate_rows(deltas):
            make = partial(_add_stmt, self._dialect, table)
            await self._fast.execute(conn, "add:" + table.name, make, rows)

    def _write_aggregates_hot(self, db: sqlite3.Connection, deltas: StatDeltas) -> None:
        """:meth:`_write_aggregates` in a transaction of the hot writer (SQLite; on its
        thread), with the same statements."""
        assert self._writer is not None
        dialect = self._writer.dialect
        for table, rows in self._aggregate_rows(deltas):
            make = partial(_add_stmt, self._dialect, table)
            sql, params = self._fast.sqlite_rows("add:" + table.name, make, dialect, rows)
            db.executemany(sql, params)

    def _aggregate_rows(self, deltas: StatDeltas) -> list[tuple[Table, list[dict[str, Any]]]]:
        """Each table's rows of ``deltas`` (the tables that have some), in the order
        :meth:`_write_aggregates` writes them."""
        shard = self._rng.randrange(SHARDS)
        tables = (
            (occurrence_counts, deltas.count_rows()),
            (finished_minutes, deltas.minute_rows(shard)),
            (finished_hours, deltas.hour_rows(shard)),
            (occurrence_totals, deltas.total_rows(shard)),
            (job_totals, deltas.job_rows(shard)),
            (job_type_counts, deltas.type_rows(shard)),
            (tag_counts, deltas.tag_rows(shard)),
        )
        return [(table, rows) for table, rows in tables if rows]

    async def _uncount_partition(self, conn: AsyncConnection, name: str) -> None:
        """PostgreSQL: take the occurrences of partition ``name`` (about to be dropped, and
        locked against writes) out of the aggregates; its uncounted ones folded first (their
        jobs keep their runs and durations, as a counted one's do)."""
        deltas = StatDeltas()
        counts = await conn.execute(
            text(
                "SELECT job_id, status, counted, count(*), "
                f"coalesce(sum(duration_ms), 0), count(duration_ms) FROM {name} "
                "GROUP BY job_id, status, counted"
            )
        )
        for job_id, status, counted, n, dsum, dcount in counts:
            if not counted:
                deltas.fold(job_id, status, int(n), float(dsum), int(dcount))
            deltas.counts[(job_id, int(status))] -= int(n)
            deltas.totals[int(status)] -= int(n)
        finished = await conn.execute(
            text(
                "SELECT floor(extract(epoch FROM end_time) / 60)::bigint * 60, status, count(*), "
                f"coalesce(sum(duration_ms), 0), count(duration_ms) FROM {name} "
                "WHERE end_time IS NOT NULL AND status = ANY(:windowed) GROUP BY 1, 2"
            ),
            {"windowed": sorted(WINDOWED)},
        )
        for minute, status, n, dsum, dcount in finished:
            deltas.minutes[(int(minute), int(status))] = [-int(n), -float(dsum), -int(dcount)]
        await self._write_aggregates(conn, deltas)
