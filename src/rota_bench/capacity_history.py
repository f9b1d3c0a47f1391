"""``rota bench capacity --history-fill sql``: a long history (millions of finished
occurrences) written straight into the store's tables by set-based SQL, and the statistics
reads timed on the store itself.

Through the store's own inserts 10,000,000 occurrences take hours; here the database
generates the rows (PostgreSQL ``generate_series``, SQLite a recursive CTE) in chunks, and the
maintained statistics are then rebuilt from them (``SqlStore.rebuild_aggregates``, what the
migration's backfill does). The rows have no status history, and ids in ascending order (a
random prefix per run, then the row's number) so the primary key grows at its end. The
per-minute and per-hour statistics get one (empty) row for every shard and final status
over the last day as well: a busy live store has them all (each write adds to a random
shard), and the window's read sums them.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from rota.core.models import OccurrenceStatus
from rota_bench.scenarios import _percentiles

CHUNK = 500_000
FAILED_EVERY = 20
"""One occurrence in this many failed; the rest completed."""
_COMPLETED = int(OccurrenceStatus.COMPLETED)
_FAILED = int(OccurrenceStatus.FAILED)


def _micros(at: datetime) -> int:
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


async def fill_history(url: str, job_id: UUID, job_type: str, count: int, span: timedelta) -> float:
    """``count`` finished occurrences of ``job_id`` ending over the ``span`` before now (one
    in :data:`FAILED_EVERY` Failed, the others Completed in 20 ms); the seconds it took,
    the aggregates' rebuild included."""
    from rota.app.adapters import rebuild_statistics

    started = time.perf_counter()
    now_us = _micros(datetime.now(UTC))
    step = max(1, (span // timedelta(microseconds=1)) // max(count, 1))
    sqlite_path = Path(url.split("///", 1)[1]) if url.startswith("sqlite") else None
    if sqlite_path is not None:
        _fill_sqlite(sqlite_path, job_id, job_type, count, now_us, step)
    else:
        await _fill_postgres(url, job_id, job_type, count, now_us, step)
    await rebuild_statistics(url, pad_since=datetime.now(UTC) - timedelta(hours=26))
    return time.perf_counter() - started


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def _fill_sqlite(
    path: Path, job_id: UUID, job_type: str, count: int, now_us: int, step: int
) -> None:
    at = (
        "strftime('%Y-%m-%d %H:%M:%S', ({t}) / 1000000, 'unixepoch') || '.' || "
        "printf('%06d', ({t}) % 1000000)"
    )
    end = f"({now_us} - n * {step})"
    start = f"({end} - 20000)"
    sql = (
        "WITH RECURSIVE s(n) AS (SELECT ? UNION ALL SELECT n + 1 FROM s WHERE n < ?) "
        "INSERT INTO occurrences (id, job_id, job_type, status, scheduled_for, due_at, "
        "created_at, attempt, max_retries, priority, job_version, concurrency_policy, "
        "dispatched_at, instance_id, start_time, end_time, duration_ms) "
        f"SELECT ? || printf('%020x', n), ?, ?, "
        f"CASE WHEN n % {FAILED_EVERY} = 0 THEN {_FAILED} ELSE {_COMPLETED} END, "
        f"{at.format(t=start)}, {at.format(t=start)}, {at.format(t=start)}, 1, 0, 2, 1, 0, "
        f"{at.format(t=start)}, 'bench-capacity', {at.format(t=start)}, {at.format(t=end)}, "
        "20.0 FROM s"
    )
    prefix = secrets.token_hex(6)
    with sqlite3.connect(path, timeout=60) as db:
        db.execute("PRAGMA cache_size=-1000000")  # 1 GB: the indexes stay in memory
        for first in range(1, count + 1, CHUNK):
            last = min(count, first + CHUNK - 1)
            db.execute(sql, (first, last, prefix, job_id.hex, job_type))
            db.commit()


async def _fill_postgres(
    url: str, job_id: UUID, job_type: str, count: int, now_us: int, step: int
) -> None:
    import asyncpg

    end = f"(timestamptz 'epoch' + ({now_us} - n * {step}::bigint) * interval '1 microsecond')"
    start = f"({end} - interval '20 milliseconds')"
    sql = (
        "INSERT INTO occurrences (id, job_id, job_type, status, scheduled_for, due_at, "
        "created_at, attempt, max_retries, priority, job_version, concurrency_policy, "
        "dispatched_at, instance_id, start_time, end_time, duration_ms) "
        f"SELECT ($5 || lpad(to_hex(n), 20, '0'))::uuid, $3::uuid, $4, "
        f"CASE WHEN n % {FAILED_EVERY} = 0 THEN {_FAILED} ELSE {_COMPLETED} END, "
        f"{start}, {start}, {start}, 1, 0, 2, 1, 0, {start}, 'bench-capacity', {start}, {end}, "
        "20.0 FROM generate_series($1::bigint, $2::bigint) AS n"
    )
    prefix = secrets.token_hex(6)
    db = await asyncpg.connect(_plain(url))
    try:
        for first in range(1, count + 1, CHUNK):
            last = min(count, first + CHUNK - 1)
            await db.execute(sql, first, last, job_id, job_type, prefix)
        await db.execute("ANALYZE occurrences")
    finally:
        await db.close()


async def time_store_reads(url: str, job_id: UUID, reads: int) -> dict[str, Any]:
    """The statistics reads on a store of this process's own (no HTTP): the overview of the
    last 24 hours and one job's counts by status; percentiles in ms."""
    from rota.app.adapters import make_store

    store = make_store(url)
    await store.open()
    results: dict[str, Any] = {}
    try:
        since = datetime.now(UTC) - timedelta(hours=24)
        for name in ("storeOverview", "storeJobCounts"):
            samples = []
            for n in range(reads + 1):  # the first warms up
                t0 = time.perf_counter()
                if name == "storeOverview":
                    await store.overview(since)
                else:
                    await store.count_occurrences(job_id=job_id)
                if n:
                    samples.append((time.perf_counter() - t0) * 1000)
            results[name] = {**_percentiles(samples), "reads": reads}
    finally:
        await store.close()
    return results
