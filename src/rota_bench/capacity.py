"""``rota bench capacity``: what many pending jobs (and a long history) cost.

A real ``rota server`` (a process of its own, as for ``login-flood``) gets ``pending`` one-time
jobs through the public bulk API, due over the coming week so none fires during the bench;
``history`` finished occurrences are written straight into the store first. Measured: the
create rate, the store's bytes per job, the memory of the server (and Redis), and the latency
of the reads a user makes.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import psutil

from rota.app.settings import Settings
from rota.core.ids import new_id
from rota.core.models import Occurrence, OccurrenceStatus
from rota_bench.capacity_history import fill_history, time_store_reads
from rota_bench.scenarios import (
    _cpu_per_job,
    _cpu_seconds,
    _environment,
    _percentiles,
    _server_process,
    bench_prefix,
)
from rota_bench.signin import SignIn

JOB_TYPE = "bench.capacity"
JOB_TABLES = ("jobs", "job_tags", "job_versions")
"""The tables a pending job lives in (PostgreSQL; with their indexes and TOAST; since
migration 0013 PostgreSQL has no ``job_tags``: those that exist count)."""
OCCURRENCE_TABLES = ("occurrences",)
"""The history's tables (partitioned on PostgreSQL: every partition counts; each run's status
history is in its row since migration 0029)."""
SPREAD = timedelta(days=7)
FIRST_DUE = timedelta(hours=1)
HISTORY_BATCH = 5_000
DEEP_PAGE = 50
"""The page of the jobs and executions lists read deep (``jobsDeepPage``, ``executionsDeepPage``:
its cursor found by following the ``nextCursor`` of each page before it; the last page when
there are fewer)."""


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


class _Sizes:
    """The store's size (PostgreSQL: the job and occurrence tables; SQLite: the file) and
    Redis's used memory (distributed)."""

    def __init__(self, mode: str, data_dir: Path) -> None:
        settings = Settings()
        self.mode = mode
        self.sqlite = data_dir / "rota.db"
        self.database_url = settings.database_url or ""
        self.redis_url = settings.redis_url or ""

    async def store(self) -> dict[str, int]:
        if self.mode == "embedded":
            with sqlite3.connect(self.sqlite) as db:
                pages = db.execute("PRAGMA page_count").fetchone()[0]
                size = db.execute("PRAGMA page_size").fetchone()[0]
            return {"file": int(pages) * int(size)}
        import asyncpg

        # A plain table is its own tree; a partitioned one (size 0) counts its partitions.
        sql = (
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relname = ANY($1::text[]) OR c.oid IN (SELECT p.relid "
            "FROM unnest($1::text[]) AS t(name), pg_partition_tree(to_regclass(t.name)) AS p)"
        )
        db = await asyncpg.connect(self.database_url)
        try:
            return {
                "jobs": int(await db.fetchval(sql, list(JOB_TABLES))),
                "occurrences": int(await db.fetchval(sql, list(OCCURRENCE_TABLES))),
            }
        finally:
            await db.close()

    async def analyze(self) -> None:
        """PostgreSQL: vacuum the bulk-filled tables and refresh their planner statistics, as
        autovacuum would within a minute or so; read before that, a job's occurrences are
        planned as if it had a few (a bitmap scan and sort of all of them), and each search
        also reads the trigram index's pending list (up to its 4 MB) until a vacuum merges
        it into the index."""
        if self.mode == "embedded":
            return
        import asyncpg

        db = await asyncpg.connect(self.database_url)
        try:
            names = list(JOB_TABLES + OCCURRENCE_TABLES)
            sql = "SELECT t FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NOT NULL"
            tables = [row[0] for row in await db.fetch(sql, names)]  # no job_tags since 0013
            await db.execute(f"VACUUM (ANALYZE) {', '.join(tables)}")
        finally:
            await db.close()

    async def redis(self) -> dict[str, int] | None:
        """Redis's ``used_memory`` (the whole instance: others' keys move it too) and the
        bytes of the bench's own keys (``MEMORY USAGE`` of the ``rota-bench:*`` keys but the
        fires' claims: no job of this bench fires)."""
        if self.mode == "embedded":
            return None
        import redis.asyncio as aioredis

        client = aioredis.from_url(self.redis_url)
        try:
            info = await client.info("memory")
            keys = 0
            async for key in client.scan_iter(match=f"{bench_prefix()}:*", count=5000):
                if b":claim:" not in key:  # a fire's; the other benches leave many behind
                    keys += int(await client.memory_usage(key, samples=0) or 0)
            return {"usedMemory": int(info["used_memory"]), "benchKeys": keys}
        finally:
            await client.aclose()


async def _distributed_admin(name: str, password: str) -> None:
    """An Admin of this run's own: the shared database keeps the users of earlier runs, and
    ROTA_ADMIN_USER creates one only when there is none."""
    from rota.app.adapters import upgrade_schema
    from rota.cli.users import create_user
    from rota.core.security import Role

    settings = Settings()
    if settings.database_url:  # else _server_process refuses the mode
        await upgrade_schema(settings.database_url)
        await create_user(settings, name, password, Role.ADMIN)


async def _write_history(url: str, job: dict[str, Any], count: int) -> float:
    """``count`` Completed occurrences of ``job`` over the last 24 hours, inserted into the
    store in batches; the seconds it took."""
    from rota.app.adapters import make_store

    store = make_store(url)
    await store.open()
    started = time.perf_counter()
    try:
        now = datetime.now(UTC)
        step = timedelta(days=1) / max(count, 1)
        for first in range(0, count, HISTORY_BATCH):
            batch = []
            for n in range(first, min(count, first + HISTORY_BATCH)):
                at = now - step * (n + 1)
                batch.append(
                    Occurrence(
                        id=new_id(),
                        job_id=UUID(job["id"]),
                        job_type=JOB_TYPE,
                        worker_id=None,
                        status=OccurrenceStatus.COMPLETED,
                        scheduled_for=at,
                        due_at=at,
                        created_at=at,
                        dispatched_at=at,
                        start_time=at + timedelta(milliseconds=5),
                        end_time=at + timedelta(milliseconds=25),
                        duration_ms=20.0,
                        instance_id="bench-capacity",
                    )
                )
            await store.insert_occurrences(batch)
    finally:
        await store.close()
    return time.perf_counter() - started


def _spec(n: int, pending: int, start: datetime) -> dict[str, Any]:
    at = start + SPREAD * (n / max(pending, 1))
    return {
        "jobType": JOB_TYPE,
        "displayName": f"capacity job {n}",
        "tags": ["capacity", f"batch-{n % 10}"],
        "jobData": {"n": n},
        "executeAt": at.isoformat().replace("+00:00", "Z"),
    }


async def _deep_cursor(http: Any, path: str, page: int) -> tuple[str | None, int, list[float]]:
    """The cursor of ``path``'s page number ``page`` (the first is 1), or of its last page
    when it has fewer, found by following each page's ``nextCursor``; that page's number;
    and the ms each page before it took."""
    cursor: str | None = None
    reached = 1
    samples = []
    while reached < page:
        t0 = time.perf_counter()
        answer = await http.get(path, params={"cursor": cursor} if cursor else None)
        samples.append((time.perf_counter() - t0) * 1000)
        answer.raise_for_status()
        following = answer.json()["nextCursor"]
        if following is None:
            break
        cursor, reached = following, reached + 1
    return cursor, reached, samples


async def _create(
    http: Any,
    pending: int,
    batch: int,
    concurrency: int,
    start: datetime,
    headers: dict[str, str],
) -> None:
    """The ``pending`` jobs in bulk requests of ``batch``, ``concurrency`` of them in flight
    (as a client importing many jobs would send them: each request's body is built as it is
    sent)."""
    firsts = iter(range(0, pending, batch))

    async def sender() -> None:
        for first in firsts:  # shared: each sender takes the next batch
            body = {
                "jobs": [
                    _spec(n, pending, start) for n in range(first, min(pending, first + batch))
                ]
            }
            content = orjson.dumps(body)  # the client's share of the machine kept small
            created = await http.post("/api/v1/jobs/bulk", content=content, headers=headers)
            if created.status_code != 201:
                raise RuntimeError(f"bulk create: {created.status_code} {created.text[:300]}")
            created.json()  # read as a client would

    async with asyncio.TaskGroup() as senders:
        for _ in range(concurrency):
            senders.create_task(sender())


async def _time_reads(
    http: Any, paths: dict[str, str], reads: int, server: psutil.Process
) -> dict[str, Any]:
    """Each path once to warm it, then ``reads`` times; percentiles in ms per read, and the
    server's memory after them."""
    results: dict[str, Any] = {}
    for name, path in paths.items():
        (await http.get(path)).raise_for_status()
        samples = []
        for _ in range(reads):
            t0 = time.perf_counter()
            answer = await http.get(path)
            samples.append((time.perf_counter() - t0) * 1000)
            answer.raise_for_status()
        rss = _mib(server.memory_info().rss)
        results[name] = {"path": path, **_percentiles(samples), "reads": reads, "serverRssMiB": rss}
    return results


async def _index_entries(http: Any) -> int:
    """The schedule index's entries over every bucket (``GET /admin/buckets``)."""
    answer = await http.get("/api/v1/admin/buckets")
    answer.raise_for_status()
    return sum(int(b["indexed"]) for b in answer.json()["buckets"])


async def run_capacity(
    mode: str = "embedded",
    pending: int = 10_000,
    history: int = 0,
    batch: int = 1_000,
    reads: int = 50,
    history_fill: str = "store",
    answer: str = "full",
    concurrency: int = 1,
) -> dict[str, Any]:
    """``pending`` one-time jobs created through ``POST /api/v1/jobs/bulk`` (``batch`` per
    request) on a ``rota server`` of its own, after ``history`` Completed occurrences of one
    job written into its store (``history_fill``: ``store`` through the store's inserts,
    ``sql`` by set-based SQL, see :mod:`rota_bench.capacity_history`); the create rate, bytes
    per job, memory and read latencies."""
    if history_fill not in ("store", "sql"):
        raise ValueError(f"history_fill must be store or sql, not {history_fill!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be 1 or more, not {concurrency}")
    if answer not in ("full", "minimal"):
        raise ValueError(f"answer must be full or minimal, not {answer!r}")
    # minimal: the bulk answers list the new ids only (Prefer: return=minimal)
    headers = {"Content-Type": "application/json"}
    if answer == "minimal":
        headers["Prefer"] = "return=minimal"
    import httpx

    admin, password = f"bench-cap-{secrets.token_hex(4)}", secrets.token_urlsafe(24)
    if mode == "distributed":
        await _distributed_admin(admin, password)
    me = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="rota-bench-cap-") as tmp:
        data_dir = Path(tmp)
        sizes = _Sizes(mode, data_dir)
        async with (
            _server_process(mode, admin, password, data_dir) as (base, server),
            httpx.AsyncClient(base_url=base, timeout=300) as http,
        ):
            auth = http.auth = SignIn(admin, password)  # signs in again when its token expires
            start = datetime.now(UTC) + FIRST_DUE
            made = await http.post(
                "/api/v1/jobs", json={**_spec(0, 1, start), "displayName": "capacity history"}
            )
            made.raise_for_status()
            history_job = made.json()
            url = Settings().effective_database_url if mode != "embedded" else ""
            url = url or f"sqlite:///{(data_dir / 'rota.db').resolve()}"
            if history_fill == "sql":
                history_seconds = await fill_history(
                    url, UUID(history_job["id"]), JOB_TYPE, history, timedelta(days=1)
                )
            else:
                history_seconds = await _write_history(url, history_job, history)
            store_before, redis_before = await sizes.store(), await sizes.redis()
            server_rss_before = server.memory_info().rss
            roles = {"server": [server], "bench": [me]}  # the bench: the client
            cpu_before = _cpu_seconds(roles)
            started = time.perf_counter()
            await _create(http, pending, batch, concurrency, start, headers)
            create_seconds = time.perf_counter() - started
            create_cpu = _cpu_per_job(cpu_before, _cpu_seconds(roles), pending)
            store_after, redis_after = await sizes.store(), await sizes.redis()
            server_rss_created = server.memory_info().rss
            indexed_created = await _index_entries(http)
            await sizes.analyze()
            target = pending // 2
            paths = {
                "jobsList": "/api/v1/jobs",
                "jobsSearch": f"/api/v1/jobs?search=capacity+job+{target}",
                "jobsSearchCommon": "/api/v1/jobs?search=capacity",
                "jobOccurrences": f"/api/v1/occurrences?jobId={history_job['id']}",
                "executionsList": "/api/v1/occurrences",
                "overview": "/api/v1/stats/overview",
                "tags": "/api/v1/tags",
                "jobStats": f"/api/v1/jobs/{history_job['id']}",
                # the list's filters, on a value every job holds and on one none does
                "jobsOfType": f"/api/v1/jobs?jobType={JOB_TYPE}",
                "jobsOfOtherType": f"/api/v1/jobs?jobType={JOB_TYPE}.other",
                "jobsActive": "/api/v1/jobs?isActive=true",
                "jobsInactive": "/api/v1/jobs?isActive=false",
            }
            walks: dict[str, Any] = {}
            deep: dict[str, int] = {}
            for name, path in (("jobs", "/api/v1/jobs"), ("executions", "/api/v1/occurrences")):
                cursor, deep[name], samples = await _deep_cursor(http, path, DEEP_PAGE)
                walks[name] = {**_percentiles(samples), "pages": len(samples)}
                paths[f"{name}DeepPage"] = f"{path}?cursor={cursor}" if cursor else path
            read_results = await _time_reads(http, paths, reads, server)
            for name, page in deep.items():
                read_results[f"{name}DeepPage"]["page"] = page
            read_results |= await time_store_reads(url, UUID(history_job["id"]), reads)
            counts = (await http.get("/api/v1/stats/overview")).json()
            server_rss_after = server.memory_info().rss
            indexed_after = await _index_entries(http)
            redis_end = await sizes.redis()
    store_delta = {k: store_after[k] - store_before.get(k, 0) for k in store_after}
    per_job = {k: round(v / pending, 1) if pending else None for k, v in store_delta.items()}
    redis_delta = None
    if redis_before is not None and redis_after is not None:
        redis_delta = {k: redis_after[k] - redis_before[k] for k in redis_after}
    return {
        "scenario": "capacity",
        "mode": mode,
        "pending": pending,
        "history": history,
        "historyFill": history_fill,
        "batch": batch,
        "answer": answer,
        "concurrency": concurrency,
        "signIns": auth.sign_ins,
        "reads": reads,
        "createSeconds": round(create_seconds, 2),
        "jobsPerSecond": round(pending / create_seconds, 1) if create_seconds > 0 else None,
        # The server's CPU (user + system) over the creation, per job: what the load of a
        # shared machine moves much less than the rate (not counted: PostgreSQL's own).
        "serverCpuMicrosPerJob": create_cpu.get("server"),
        # Every process's CPU over the creation, per job: the server, the bench (the client
        # building and sending the bodies) and the services on this machine (PostgreSQL's
        # backends, which write the rows, their indexes and the WAL).
        "createCpuMicrosPerJob": create_cpu,
        "historySeconds": round(history_seconds, 2),
        "storeBytesDelta": store_delta,
        "storeBytesPerJob": per_job,
        "storeBytesAfter": store_after,
        "redisBytesDelta": redis_delta,
        "redisBytesAfter": redis_after,
        "redisBytesPerJob": (
            None if redis_delta is None else round(redis_delta["benchKeys"] / pending, 1)
        ),
        "serverRssMiB": {
            "beforeCreate": _mib(server_rss_before),
            "afterCreate": _mib(server_rss_created),
            "afterReads": _mib(server_rss_after),
        },
        # The schedule index holds the hot window only: none of these jobs is due within it.
        "indexEntries": {"afterCreate": indexed_created, "afterReads": indexed_after},
        "redisBytesAfterReads": redis_end,
        "benchRssMiB": _mib(me.memory_info().rss),
        "readLatency": read_results,
        # Each page read once on the way to the deep page (whose own reads are in readLatency).
        "deepPage": DEEP_PAGE,
        "pageWalk": walks,
        # The whole store's (distributed: earlier runs' jobs stay in the database).
        "jobsInStore": counts["jobs"]["total"],
        "occurrencesInStore": counts["occurrences"]["total"],
        "environment": _environment(),
    }
