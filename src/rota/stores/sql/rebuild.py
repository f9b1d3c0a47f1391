"""Recounting the maintained statistics (:mod:`rota.stores.sql.aggregates`) from the stored
occurrences and jobs, not on a live store (``rota bench capacity --history-fill sql``), with
the benches' padding of empty minutes and hours."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Final

from sqlalchemy import delete, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.stores.schema import (
    finished_hours,
    finished_minutes,
    job_totals,
    job_type_counts,
    occurrence_counts,
    occurrence_totals,
    tag_counts,
)
from rota.stores.sql.aggregates import (
    SHARDS,
    WINDOWED,
    AggregateQueries,
    _add_stmt,
    minute_of,
)
from rota.stores.sql.rows import ACTIVE


class RebuildQueries(AggregateQueries):
    """The rebuild of the maintained statistics."""

    async def rebuild_aggregates(self, *, pad_since: datetime | None = None) -> None:
        """Recompute the aggregates from the occurrences and the jobs (what migrations 0015
        and 0021 do). Not for a live store: writes made meanwhile could be counted twice or
        not at all.

        ``pad_since`` (benches): also a row (of zeros) for every shard and final status in
        each minute and hour from then to now, as a busy live store holds them."""
        async with self._write() as conn:
            # The count rows keep the run statistics (``runs``, durations): only ``n`` is
            # recomputed, from the counted occurrences (an uncounted one's part stays read
            # from its row); a row left with nothing to keep goes.
            await conn.execute(update(occurrence_counts).values(n=0))
            for table in (
                occurrence_totals,
                finished_minutes,
                finished_hours,
                job_totals,
                job_type_counts,
                tag_counts,
            ):
                await conn.execute(delete(table))
            for sql in backfill_sql(self._dialect, counts_kept=True):
                await conn.execute(text(sql))
            c = occurrence_counts.c
            await conn.execute(delete(occurrence_counts).where(c.n == 0, c.runs == 0))
            if pad_since is not None:
                await self._pad(conn, pad_since)

    async def _pad(self, conn: AsyncConnection, since: datetime) -> None:
        now = datetime.now(UTC)
        for table, step in ((finished_minutes, 60), (finished_hours, 3600)):
            first = minute_of(since) // step * step
            rows = [
                {
                    table.primary_key.columns.keys()[0]: at,
                    "shard": shard,
                    "status": status,
                    "n": 0,
                    "duration_sum": 0.0,
                    "duration_count": 0,
                }
                for at in range(first, minute_of(now) + 1, step)
                for shard in range(SHARDS)
                for status in sorted(WINDOWED)
            ]
            make = partial(_add_stmt, self._dialect, table)
            await self._fast.execute(conn, "add:" + table.name, make, rows)


TAG_BACKFILL: Final = {
    "postgresql": "INSERT INTO tag_counts (tag, shard, n) SELECT t.value, 0, count(*) "
    "FROM jobs, jsonb_array_elements_text(jobs.tags) AS t(value) GROUP BY t.value",
    "sqlite": "INSERT INTO tag_counts (tag, shard, n) "
    "SELECT tag, 0, count(*) FROM job_tags GROUP BY tag",
}
"""``tag_counts`` from the stored jobs (PostgreSQL: their ``tags`` column; SQLite: the
``job_tags`` rows)."""


def backfill_sql(dialect: str, *, counts_kept: bool = False) -> list[str]:
    """The statements that fill the (empty) aggregate tables from ``occurrences`` and
    ``jobs``; ``counts_kept``: the rows of ``occurrence_counts`` are there (their ``n`` 0),
    their ``n`` is set."""
    if dialect == "postgresql":
        minute = "floor(extract(epoch FROM end_time) / 60)::bigint * 60"
    else:
        minute = "CAST(strftime('%s', end_time) AS INTEGER) / 60 * 60"
    windowed = ", ".join(str(s) for s in sorted(WINDOWED))
    live = ", ".join(str(s) for s in ACTIVE)
    kept = " ON CONFLICT (job_id, status) DO UPDATE SET n = excluded.n" if counts_kept else ""
    return [
        "INSERT INTO occurrence_counts (job_id, status, n) "
        "SELECT job_id, status, count(*) FROM occurrences "
        f"WHERE status NOT IN ({live}) AND counted GROUP BY job_id, status{kept}",
        "INSERT INTO occurrence_totals (shard, status, n) "
        "SELECT 0, status, count(*) FROM occurrences GROUP BY status",
        "INSERT INTO finished_minutes "
        "(minute, shard, status, n, duration_sum, duration_count) "
        f"SELECT {minute}, 0, status, count(*), coalesce(sum(duration_ms), 0), "
        "count(duration_ms) FROM occurrences "
        f"WHERE end_time IS NOT NULL AND status IN ({windowed}) GROUP BY 1, 3",
        "INSERT INTO finished_hours (hour, shard, status, n, duration_sum, duration_count) "
        "SELECT minute / 3600 * 3600, shard, status, sum(n), sum(duration_sum), "
        "sum(duration_count) FROM finished_minutes GROUP BY 1, 2, 3",
        "INSERT INTO job_totals (shard, jobs, active) SELECT 0, count(*), "
        "coalesce(sum(CASE WHEN is_active THEN 1 ELSE 0 END), 0) FROM jobs",
        TAG_BACKFILL[dialect],
        "INSERT INTO job_type_counts (job_type, shard, n) "
        "SELECT job_type, 0, count(*) FROM jobs GROUP BY job_type",
    ]
