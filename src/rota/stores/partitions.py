"""PostgreSQL's time partitions of ``occurrences`` (by ``scheduled_for``, their status history
in their rows) and ``occurrence_logs`` (by ``timestamp``).

Each table has one range partition per period (a UTC day, ISO week or calendar month), named
``<table>_p<YYYYMMDD>`` after the day the period starts, and a ``<table>_default`` partition for
rows outside every period (so an insert never fails for want of a partition). The upkeep:

- **creates** the partitions of the current period and ``ahead`` periods after it (a period
  that would overlap an existing partition, or whose rows are already in the default partition,
  is left out: those rows stay in the default partition and retention deletes them row by row);
- **drops** a partition when nothing in it is to be kept: an ``occurrences`` partition when it
  holds no occurrence that is not final, none whose status is kept longer than its age, and
  none with an unresolved dead letter; a log partition when it ends before the log retention
  cutoff or a day before the oldest occurrence partition still there begins (its rows can only
  belong to occurrences already gone).

A drop waits at most ``LOCK_TIMEOUT`` for its locks (dropping a partition locks the parent
table briefly) and otherwise waits for the next run. Everything here runs on the caller's
connection in the caller's transaction.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.models import OccurrenceStatus
from rota.stores.schema import PARTITIONED_BY, UtcDateTime

log = logging.getLogger(__name__)

PERIODS = ("day", "week", "month")
LOCK_TIMEOUT = "2s"
MARGIN = timedelta(days=1)
"""How far log lines may reach before their occurrence's partition (timestamps are the
workers' clocks, occurrences may be created shortly before their time)."""

OCCURRENCES = "occurrences"
BeforeDrop = Callable[[AsyncConnection, str], Awaitable[None]]
"""Called with a partition's name in the savepoint that drops it, just before the drop."""
LOGS = "occurrence_logs"

_BOUNDS = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    start: datetime | None
    """``None``: the default partition (or a range this module does not understand)."""
    end: datetime | None


def period_start(at: datetime, period: str) -> datetime:
    """The UTC start of the period holding ``at``."""
    day = at.astimezone(UTC).date()
    if period == "day":
        start = day
    elif period == "week":
        start = day - timedelta(days=day.weekday())
    elif period == "month":
        start = day.replace(day=1)
    else:
        raise ValueError(f"unknown partition period {period!r}; one of {', '.join(PERIODS)}")
    return datetime(start.year, start.month, start.day, tzinfo=UTC)


def next_period(start: datetime, period: str) -> datetime:
    """The start of the period after the one starting at ``start``."""
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(days=7)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def periods(
    first: datetime, last: datetime, period: str, *, ahead: int = 0
) -> list[tuple[datetime, datetime]]:
    """The periods from the one holding ``first`` to the one holding ``last``, and ``ahead``
    more after it."""
    start = period_start(first, period)
    spans = []
    while start <= last or ahead > 0:
        if start > last:
            ahead -= 1
        end = next_period(start, period)
        spans.append((start, end))
        start = end
    return spans


def partition_name(table: str, start: datetime) -> str:
    return f"{table}_p{start:%Y%m%d}"


def create_partition_sql(table: str, start: datetime, end: datetime) -> str:
    """``CREATE TABLE`` of the partition of ``table`` for ``[start, end)`` (our own names and
    times only: nothing here comes from a user)."""
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, start)} PARTITION OF {table} "
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


def create_default_sql(table: str) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table}_default PARTITION OF {table} DEFAULT"


_PARTITION_NAME = re.compile(rf"^({'|'.join(PARTITIONED_BY)})_(p\d{{8}}|default)$")


def is_partition_name(name: str) -> bool:
    """Whether ``name`` is one of the time partitions' tables."""
    return _PARTITION_NAME.match(name) is not None


async def list_partitions(conn: AsyncConnection, table: str) -> list[Partition]:
    """The partitions of ``table``, oldest first, the default (and any other) last."""
    rows = await conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": table},
    )
    found = []
    for name, bound in rows:
        match = _BOUNDS.search(bound or "")
        if match is None:
            found.append(Partition(name, None, None))
            continue
        start, end = (datetime.fromisoformat(v).astimezone(UTC) for v in match.groups())
        found.append(Partition(name, start, end))
    return sorted(
        found, key=lambda p: (p.start is None, p.start or datetime.max.replace(tzinfo=UTC))
    )


async def create_table_partitions(
    conn: AsyncConnection, table: str, spans: list[tuple[datetime, datetime]]
) -> list[str]:
    """Create the default partition and one per span that overlaps no existing partition;
    returns the names created. A span whose rows already sit in the default partition is
    skipped with a warning (PostgreSQL refuses it)."""
    existing = await list_partitions(conn, table)
    created = []
    if not any(p.start is None for p in existing):
        await conn.execute(text(create_default_sql(table)))
        created.append(f"{table}_default")
    ranges = [(p.start, p.end) for p in existing if p.start is not None and p.end is not None]
    for start, end in spans:
        if any(start < other_end and other_start < end for other_start, other_end in ranges):
            continue
        name = partition_name(table, start)
        try:
            async with conn.begin_nested():
                await conn.execute(text(create_partition_sql(table, start, end)))
        except DBAPIError as exc:
            log.warning("partition %s not created (rows of its range may be in the default "
                        "partition; they stay there): %s", name, exc.orig)  # fmt: skip
            continue
        created.append(name)
        ranges.append((start, end))
    return created


async def _holds_kept_occurrences(
    conn: AsyncConnection,
    name: str,
    kept_since: Mapping[OccurrenceStatus, datetime | None],
) -> bool:
    """Whether partition ``name`` of ``occurrences`` holds anything retention keeps: an
    occurrence not final, or whose status is kept forever, or created since its status's
    cutoff, or with an unresolved dead letter. One scan that stops at the first such row
    (only partitions past the shortest retention are looked at)."""
    forever = [int(s) for s in OccurrenceStatus if not s.is_terminal or kept_since.get(s) is None]
    kept = [f"status IN ({', '.join(map(str, forever))})"] if forever else []
    params = []
    for index, (status, since) in enumerate(sorted(kept_since.items())):
        if since is not None and status.is_terminal:
            kept.append(f"(status = {int(status)} AND created_at >= :s{index})")
            params.append(bindparam(f"s{index}", since, type_=UtcDateTime()))
    statement = text(
        f"SELECT EXISTS (SELECT 1 FROM {name} WHERE {' OR '.join(kept)}) OR EXISTS ("
        f"SELECT 1 FROM failed_occurrences f JOIN {name} o ON o.id = f.occurrence_id "
        "WHERE NOT f.resolved)"
    ).bindparams(*params)
    return bool((await conn.execute(statement)).scalar())


async def _drop(conn: AsyncConnection, name: str, before: BeforeDrop | None = None) -> bool:
    """Drop partition ``name`` unless its locks take longer than :data:`LOCK_TIMEOUT`;
    ``before(conn, name)`` runs first, in the same savepoint."""
    try:
        async with conn.begin_nested():
            if before is not None:
                await before(conn, name)
            await conn.execute(text(f"DROP TABLE {name}"))
    except DBAPIError as exc:
        log.info("partition %s not dropped this time: %s", name, exc.orig)
        return False
    return True


async def drop_occurrence_partitions(
    conn: AsyncConnection,
    now: datetime,
    kept_since: Mapping[OccurrenceStatus, datetime | None],
    *,
    before_drop: BeforeDrop | None = None,
) -> list[str]:
    """Drop every ``occurrences`` partition that ended before ``now`` and holds nothing kept.
    ``kept_since``: final status -> occurrences created since then are kept (``None``: kept
    forever; a status missing is kept forever). ``before_drop(conn, name)`` runs just before
    each drop, in its savepoint (the statistics uncount the partition's rows)."""
    finite = [since for status, since in kept_since.items() if since is not None]
    if not finite:
        return []
    # A partition ending after the latest cutoff holds rows too young to go (nearly always):
    # it is not even looked at.
    latest = max(finite)
    dropped = []
    await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    for partition in await list_partitions(conn, OCCURRENCES):
        if partition.end is None or partition.end > min(latest, now):
            continue
        try:
            async with conn.begin_nested():
                # No insert or update into it between the check and the drop.
                await conn.execute(text(f"LOCK TABLE {partition.name} IN SHARE MODE"))
                if await _holds_kept_occurrences(conn, partition.name, kept_since):
                    continue
        except DBAPIError as exc:
            log.info("partition %s not checked this time: %s", partition.name, exc.orig)
            continue
        if await _drop(conn, partition.name, before_drop):
            dropped.append(partition.name)
    return dropped


async def _oldest_occurrence(conn: AsyncConnection) -> datetime | None:
    """The start of the oldest ``occurrences`` partition, or of the oldest occurrence in the
    default partition if that is older; ``None``: there is no occurrence anywhere to keep."""
    starts = [p.start for p in await list_partitions(conn, OCCURRENCES) if p.start is not None]
    in_default = (
        await conn.execute(text(f"SELECT min(scheduled_for) FROM {OCCURRENCES}_default"))
    ).scalar()
    candidates = [*starts, *([in_default] if in_default is not None else [])]
    return min(candidates) if candidates else None


async def drop_log_partitions(
    conn: AsyncConnection, now: datetime, logs_before: datetime | None
) -> list[str]:
    """Drop log partitions that only hold lines of occurrences already gone (they end
    :data:`MARGIN` before the oldest occurrence partition begins), or that end before
    ``logs_before``."""
    await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    oldest = await _oldest_occurrence(conn)
    orphans_before = (oldest if oldest is not None else now) - MARGIN
    limit = orphans_before if logs_before is None else max(orphans_before, logs_before)
    dropped = []
    for partition in await list_partitions(conn, LOGS):
        if partition.end is None or partition.end > min(limit, now):
            continue
        if await _drop(conn, partition.name):
            dropped.append(partition.name)
    return dropped
