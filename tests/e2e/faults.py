"""Helpers of the fault tests (test_faults.py): the services broken and restored, a load of
one-time and every-second cron jobs whose runs are noted in a file, the checks that nothing
was lost or run twice, and direct access to RabbitMQ and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import orjson

from rota.brokers.rabbitmq import RabbitMQBroker
from rota.brokers.rabbitmq.names import CONTENT_TYPE, PERSISTENT, AmqpNames
from rota.core.models import JobMessage, Priority
from rota.core.wire import encode_job_message, job_message_headers

from .conftest import HERE, free_port, wait_until
from .distributed import (
    COMPLETED,
    QUEUED,
    REDIS_PORT,
    RUNNING,
    SKIPPED,
    UNKNOWN,
    Cluster,
    Proc,
    cancelled_ahead,
    service_missing,
)

FAST = {
    # the loader re-syncs the index every 2 s (a flushed index is rebuilt within that)
    "ROTA_SCHEDULER__LOADER_INTERVAL_SECONDS": "2",
    # a Running occurrence silent for 10 s (its worker gone) is a zombie; looked for every 1 s
    "ROTA_SCHEDULER__ZOMBIE_THRESHOLD_SECONDS": "10",
    "ROTA_SCHEDULER__ZOMBIE_INTERVAL_SECONDS": "1",
    # workers re-register every second (a crashed one is gone after 3 s)
    "ROTA_WORKER__HEARTBEAT_SECONDS": "1",
}
"""Settings that make the faults heal within seconds (docs/configuration.md)."""

PG_CLUSTER = ["15", "main"]


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def now() -> datetime:
    return datetime.now(UTC)


def start_worker(
    c: Cluster, name: str, *, worker_id: str = "e2e", concurrency: int = 4, **env: str
) -> Proc:
    """A ``rota worker`` like :meth:`Cluster.worker`, with extra environment (a worker of the
    same ``name`` finds the same local state again, as after a supervisor's restart)."""
    args = ["worker", str(HERE / "jobs.py"), "--worker-id", worker_id]
    args += ["--concurrency", str(concurrency)]
    penv = {**c.env, "ROTA_DATA_DIR": str(c.log_dir / f"data-{name}"), **env}
    proc = Proc(args, penv, c.log_dir / f"{name}.log")
    c.procs.append(proc)
    return proc


def wait_workers(c: Cluster, count: int, timeout: float = 30) -> None:
    wait_until(lambda: len(c.worker_instances()) == count, timeout, f"workers: {c.logs()}")


def try_api(c: Cluster, method: str, path: str, **kw: Any) -> Any:
    """The API's answer, or ``None`` while it cannot give one (a service is away)."""
    try:
        return c.api(method, path, **kw)
    except (AssertionError, httpx.HTTPError):
        return None


# --- services ---------------------------------------------------------------------------------


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)


def rabbitmqctl(*args: str) -> None:
    _run("rabbitmqctl", *args)


def rabbit_connections(vhost: str) -> set[str]:
    """The ids (Erlang pids) of the client connections open on a vhost."""
    out = _run("rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid", "vhost")
    rows = (line.split("\t") for line in out.stdout.splitlines() if "\t" in line)
    return {pid for pid, host in rows if host == vhost}


def rabbit_up() -> bool:
    return _run("rabbitmqctl", "await_startup", "--timeout", "2", check=False).returncode == 0


@contextlib.contextmanager
def rabbit_restored() -> Iterator[None]:
    """Whatever happens inside, RabbitMQ's application runs again afterwards."""
    try:
        yield
    finally:
        rabbitmqctl("start_app")


def _redis_files(port: str) -> list[str]:
    """Where a Redis the tests start keeps its files: the CI service's, or a private one's
    (``ROTA_TEST_REDIS_PORT``, e.g. to run the Redis fault test beside other test runs, or the
    chaos soak's own)."""
    if port == "6379":
        return ["--dir", "/var/lib/redis", "--logfile", "/var/log/redis/ci.log"]
    return ["--dir", "/tmp", "--logfile", f"/tmp/rota-test-redis-{port}.log"]


def _redis(*args: str, port: str = REDIS_PORT) -> subprocess.CompletedProcess[str]:
    return _run("redis-cli", "-h", "127.0.0.1", "-p", port, *args, check=False)


def redis_up(port: str = REDIS_PORT) -> bool:
    return _redis("ping", port=port).stdout.strip() == "PONG"


def redis_start(port: str = REDIS_PORT) -> None:
    if redis_up(port):
        return
    _run(
        "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", port,
        "--save", "", "--appendonly", "no", *_redis_files(port),
    )  # fmt: skip
    wait_until(lambda: redis_up(port), 20, "Redis did not start")


def redis_stop(port: str = REDIS_PORT) -> None:
    _redis("shutdown", "nosave", port=port)
    wait_until(lambda: not redis_up(port), 20, "Redis did not stop")


def redis_flushall(port: str = REDIS_PORT) -> None:
    assert _redis("flushall", port=port).stdout.strip() == "OK"


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server on a free port (nothing on disk), shut down on exit; yields the port. A
    test that flushes or stops it disturbs no other test (the chaos soak, the Redis faults)."""
    if shutil.which("redis-server") is None:
        service_missing("a private Redis needs redis-server")
    port = str(free_port())
    redis_start(port)
    try:
        yield port
    finally:
        redis_stop(port)


@contextlib.contextmanager
def redis_restored(port: str = REDIS_PORT) -> Iterator[None]:
    try:
        yield
    finally:
        redis_start(port)


def _pg_ctl(action: str) -> subprocess.CompletedProcess[str]:
    return _run(
        "pg_ctlcluster", "--skip-systemctl-redirect", *PG_CLUSTER, action, check=False
    )  # fmt: skip


def pg_up() -> bool:
    return _pg_ctl("status").returncode == 0


def pg_stop() -> None:
    result = _pg_ctl("stop")
    assert result.returncode == 0, result.stderr


def pg_start() -> None:
    if not pg_up():
        result = _pg_ctl("start")
        assert result.returncode == 0, result.stderr


@contextlib.contextmanager
def pg_restored() -> Iterator[None]:
    try:
        yield
    finally:
        pg_start()


def services_available() -> None:
    """Skip (fail under CI) unless the service commands the fault tests use are here."""
    missing = []
    if not redis_up():
        missing.append("redis-cli/redis-server")
    if not pg_up():
        missing.append("pg_ctlcluster")
    if missing:
        service_missing(f"fault tests need {', '.join(missing)}")


# --- RabbitMQ, directly -----------------------------------------------------------------------


def names(c: Cluster) -> AmqpNames:
    return AmqpNames(c.env["ROTA_NAME_PREFIX"])


async def _publish(url: str, items: Sequence[tuple[str, bytes, dict[str, Any]]]) -> None:
    """Publish ``(routing key, body, headers)`` to the default exchange: the routing key is a
    queue's name."""
    import aio_pika

    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel(on_return_raises=True)  # confirms on
        target = channel.default_exchange
        for routing_key, body, headers in items:
            message = aio_pika.Message(
                body, headers=headers, content_type=CONTENT_TYPE, delivery_mode=PERSISTENT
            )
            await target.publish(message, routing_key, mandatory=True)


def publish_raw(
    c: Cluster, items: Sequence[tuple[bytes, dict[str, Any]]], group: str = "e2e"
) -> None:
    """Publish ``(body, headers)`` to the job queue of worker group ``group``, as the
    dispatcher does (the default exchange; confirmed, routed)."""
    key = names(c).job_queue(group)
    asyncio.run(_publish(c.env["ROTA_AMQP_URL"], [(key, b, h) for b, h in items]))


def job_message(c: Cluster, occurrence_id: str) -> JobMessage:
    """The job message the dispatcher publishes for an occurrence's current attempt."""
    (row,) = sql(c, "SELECT * FROM occurrences WHERE id = $1", uuid.UUID(occurrence_id))
    data = row["job_data"]
    return JobMessage(
        occurrence_id=row["id"],
        job_id=row["job_id"],
        job_type=row["job_type"],
        job_data=orjson.loads(data) if isinstance(data, str) else data,
        scheduled_for=row["scheduled_for"],
        timestamp=now(),
        retry_count=row["attempt"] - 1,
        max_retries=row["max_retries"],
        priority=Priority(row["priority"]),
        timeout_seconds=row["timeout_seconds"],
        job_version=row["job_version"],
        worker_id=row["worker_id"] or "e2e",
        original_correlation_id=row["id"],
    )


def publish_job_message(c: Cluster, occurrence_id: str, copies: int) -> None:
    """Publish the job message of an occurrence ``copies`` times more, as the dispatcher does
    (same body, headers, routing key and exchange)."""
    message = job_message(c, occurrence_id)
    body = encode_job_message(message)
    headers: dict[str, Any] = dict(job_message_headers(message))
    publish_raw(c, [(body, headers)] * copies, message.worker_id or "e2e")


async def _queue_depths(c: Cluster, worker_id: str) -> dict[str, int]:
    broker = RabbitMQBroker(c.env["ROTA_AMQP_URL"], prefix=c.env["ROTA_NAME_PREFIX"])
    await broker.start()
    try:
        await broker.declare_worker_group(worker_id, [])  # the group's queue, as it is
        return await broker.queue_depths()
    finally:
        await broker.close()


def queue_depths(c: Cluster, worker_id: str = "e2e") -> dict[str, int]:
    """Messages ready in the group's job queue and the status, log and dead-letter queues
    (:meth:`RabbitMQBroker.queue_depths`)."""
    return asyncio.run(_queue_depths(c, worker_id))


async def _peek(url: str, queue: str, limit: int) -> list[tuple[bytes, dict[str, Any]]]:
    import aio_pika

    connection = await aio_pika.connect(url, timeout=10)
    found: list[tuple[bytes, dict[str, Any]]] = []
    async with connection:  # closing hands every message got back to the queue
        channel = await connection.channel()
        target = await channel.get_queue(queue)
        for _ in range(limit):
            got = await target.get(no_ack=False, fail=False)
            if got is None:
                break
            found.append((got.body, dict(got.headers or {})))
    return found


def peek(c: Cluster, queue: str, limit: int = 100) -> list[tuple[bytes, dict[str, Any]]]:
    """``(body, headers)`` of the messages ready in a queue, left in it."""
    return asyncio.run(_peek(c.env["ROTA_AMQP_URL"], queue, limit))


# --- PostgreSQL, directly ---------------------------------------------------------------------


async def _fetch(url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    import asyncpg

    conn = await asyncpg.connect(url, timeout=5)
    try:
        return [dict(row) for row in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


def sql(c: Cluster, query: str, *args: Any) -> list[dict[str, Any]]:
    """Rows of a query on the cluster's store (the ground truth, read in one round trip)."""
    return asyncio.run(_fetch(c.env["ROTA_DATABASE_URL"], query, *args))


def open_count(c: Cluster) -> int:
    """Occurrences Queued or Running (``-1`` while the store cannot say)."""
    try:
        rows = sql(c, "SELECT count(*) AS n FROM occurrences WHERE status IN ($1, $2)",
                   QUEUED, RUNNING)  # fmt: skip
    except Exception:  # asyncpg's own errors or OSError while PostgreSQL is away
        return -1
    return int(rows[0]["n"])


# --- the load and its checks ------------------------------------------------------------------


def runs_of(path: Path) -> list[tuple[str, int, int]]:
    """``(occurrence id, attempt, pid)`` of every handler run noted in ``path``."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        occurrence, attempt, pid = line.split()
        out.append((occurrence, int(attempt), int(pid)))
    return out


def ended(c: Cluster, job_id: str) -> list[int]:
    """The statuses of a job's occurrences that are no longer Queued or Running."""
    items = c.api("GET", "/occurrences", params={"jobId": job_id})["items"]
    return [o["status"] for o in items if o["status"] not in (QUEUED, RUNNING)]


def warm_up(c: Cluster, runs: Path, timeout: float = 20) -> None:
    """Run one-time jobs due now until one has completed in the buckets of every server:
    each server's dispatcher knows the workers then (its directory of workers is cached for a
    second: a fire just after a worker's first registration may still be skipped as
    ``no_worker``)."""
    deadline = time.monotonic() + timeout
    done: set[str] = set()
    while True:
        buckets = c.api("GET", "/admin/buckets")["buckets"]
        owners = {b["owner"] for b in buckets}
        if None not in owners and owners <= done:
            return
        assert time.monotonic() < deadline, (
            f"warm-up jobs not run in every server's buckets: {c.logs()}"
        )
        jobs = c.api("POST", "/jobs/bulk", json={"jobs": [
            {"jobType": "e2e.record", "workerId": "e2e", "executeAt": now().isoformat(),
             "jobData": {"path": str(runs)}, "displayName": "warm-up"}
            for _ in range(8)
        ]})["items"]  # fmt: skip
        for job in jobs:
            wait_until(partial(ended, c, job["id"]), max(deadline - time.monotonic(), 1),
                       f"warm-up job not run: {c.logs()}")  # fmt: skip
            if ended(c, job["id"]) == [COMPLETED]:
                done.add(buckets[job["bucket"]]["owner"])


@dataclass
class Load:
    """Every-second cron jobs (half Skip, half Queue policy) and one-time jobs due over the
    next ``spread`` seconds, all of type ``e2e.record`` noting their runs in ``runs``."""

    c: Cluster
    runs: Path
    cron: list[dict[str, Any]] = field(default_factory=list)
    once: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(
        cls, c: Cluster, runs: Path, *, cron_jobs: int = 4, once_jobs: int = 40, spread: float = 30
    ) -> Load:
        warm_up(c, runs.with_name("warm-up"))
        load = cls(c, runs)
        data = {"path": str(runs)}
        for n in range(cron_jobs):
            load.cron.append(c.api("POST", "/jobs", json={
                "jobType": "e2e.record", "workerId": "e2e", "cronExpression": "* * * * * *",
                "displayName": f"every second {n}", "concurrentExecutionPolicy": n % 2,
                "jobData": data,
            }))  # fmt: skip
        start = now() + timedelta(seconds=1)
        step = spread / max(once_jobs, 1)
        load.once = c.api("POST", "/jobs/bulk", json={"jobs": [
            {"jobType": "e2e.record", "workerId": "e2e", "jobData": data,
             "executeAt": (start + timedelta(seconds=i * step)).isoformat()}
            for i in range(once_jobs)
        ]})["items"]  # fmt: skip
        return load

    def completed_fires(self) -> int:
        ids = [uuid.UUID(j["id"]) for j in self.cron]
        rows = sql(self.c, "SELECT count(*) AS n FROM occurrences WHERE job_id = ANY($1) AND "
                   "status = $2", ids, COMPLETED)  # fmt: skip
        return int(rows[0]["n"])

    def running(self, fires: int = 2, timeout: float = 20) -> None:
        """Wait until every cron job has completed ``fires`` fires."""
        target = fires * len(self.cron)
        wait_until(lambda: self.completed_fires() >= target, timeout, f"no load: {self.c.logs()}")

    def probe(self, timeout: float) -> float:
        """Seconds until a one-time job due now, created as soon as the API takes it,
        completes: the time to a new job's completion."""
        started = time.monotonic()
        deadline = started + timeout
        job = None
        while job is None:
            job = try_api(self.c, "POST", "/jobs", json={
                "jobType": "e2e.record", "workerId": "e2e", "executeAt": now().isoformat(),
                "jobData": {"path": str(self.runs)}, "displayName": "probe",
            })  # fmt: skip
            if job is None:
                assert time.monotonic() < deadline, f"the API never came back: {self.c.logs()}"
                time.sleep(0.2)
        self.probes.append(job)

        def done() -> bool:
            rows = try_api(self.c, "GET", "/occurrences", params={"jobId": job["id"]})
            items = rows["items"] if rows else []
            other = [o for o in items if o["status"] not in (QUEUED, RUNNING, COMPLETED)]
            assert not other, f"the probe did not run: {other}"
            return any(o["status"] == COMPLETED for o in items)

        wait_until(done, max(deadline - time.monotonic(), 1), f"probe not run: {self.c.logs()}")
        return time.monotonic() - started

    def caught_up(self, before: datetime, timeout: float) -> float:
        """Seconds until no fire due before ``before`` is Queued or Running any more."""
        started = time.monotonic()
        ids = [uuid.UUID(j["id"]) for j in self.cron + self.once]

        def done() -> bool:
            try:
                rows = sql(self.c, "SELECT count(*) AS n FROM occurrences WHERE job_id = ANY($1)"
                           " AND status IN ($2, $3) AND scheduled_for < $4",
                           ids, QUEUED, RUNNING, before)  # fmt: skip
            except Exception:
                return False
            return int(rows[0]["n"]) == 0

        try:
            wait_until(done, timeout, "the backlog stayed")
        except AssertionError:
            stuck = sql(self.c, "SELECT id, scheduled_for, status, attempt, dispatched_at, "
                        "instance_id, created_at, start_time FROM occurrences WHERE job_id = "
                        "ANY($1) AND status IN ($2, $3) AND scheduled_for < $4",
                        ids, QUEUED, RUNNING, before)  # fmt: skip
            queues = _run("rabbitmqctl", "list_queues", "-p", self.c.env["ROTA_VHOST"], "name",
                          "consumers", "messages_ready", "messages_unacknowledged",
                          check=False).stdout  # fmt: skip
            raise AssertionError(
                f"the backlog stayed: {stuck}\nqueues:\n{queues}\n{self.c.logs()}"
            ) from None
        return time.monotonic() - started

    def recover(self, timeout: float = 60) -> tuple[float, float]:
        """After a fault is lifted: ``(seconds to a new job's completion, seconds until
        every fire due before the lift has finished)``."""
        lifted = now()
        probe = self.probe(timeout)
        backlog = probe + self.caught_up(lifted, timeout)
        self.goes_on(lifted, timeout=10)
        return probe, backlog

    def goes_on(self, after: datetime, timeout: float) -> None:
        """Wait until every cron job has fired (and finished a fire) after ``after``."""
        ids = [uuid.UUID(j["id"]) for j in self.cron]

        def fired() -> bool:
            rows = sql(self.c, "SELECT count(DISTINCT job_id) AS n FROM occurrences WHERE "
                       "job_id = ANY($1) AND scheduled_for > $2 AND status NOT IN ($3, $4)",
                       ids, after, QUEUED, RUNNING)  # fmt: skip
            return int(rows[0]["n"]) == len(ids)

        try:
            wait_until(fired, timeout, "cron jobs stopped")
        except AssertionError:
            jobs = sql(self.c, "SELECT id, bucket, next_run_at, is_active, (SELECT max("
                       "scheduled_for) FROM occurrences o WHERE o.job_id = j.id) AS last "
                       "FROM jobs j WHERE id = ANY($1)", ids)  # fmt: skip
            buckets = try_api(self.c, "GET", "/admin/buckets")
            # A transaction left open would hold its jobs' rows (the dispatcher skips them).
            open_tx = sql(self.c, "SELECT pid, state, xact_start, left(query, 120) AS query "
                          "FROM pg_stat_activity WHERE datname = current_database() AND "
                          "xact_start < now() - interval '5 seconds'")  # fmt: skip
            raise AssertionError(
                f"cron jobs stopped firing after {after}: {jobs}\nbuckets: {buckets}\n"
                f"transactions open for over 5 s: {open_tx}\n{self.c.logs()}"
            ) from None

    def stop(self, timeout: float = 40) -> None:
        """Deactivate the cron jobs and wait until every one-time job has fired and nothing
        is Queued or Running."""
        for job in self.cron:
            self.c.api("PATCH", f"/jobs/{job['id']}", json={"isActive": False})
        ids = [uuid.UUID(j["id"]) for j in self.once]

        def settled() -> bool:
            fired = sql(self.c, "SELECT count(DISTINCT job_id) AS n FROM occurrences "
                        "WHERE job_id = ANY($1)", ids)  # fmt: skip
            return int(fired[0]["n"]) == len(ids) and open_count(self.c) == 0

        wait_until(settled, timeout, f"not settled: {self.c.logs()}")

    def check(
        self,
        *,
        allowed_skips: Callable[[dict[str, Any], str], bool] | None = None,
    ) -> Verdict:
        """The guarantees, after :meth:`stop`: no fire lost (every cron job's fires are every
        second from its first to its last, each recorded once; every one-time job ran), none
        completed twice or run twice, and every fire that did not run has its reason.
        ``allowed_skips(job, reason)`` widens what may be Skipped (default: an overlapping
        fire of a Skip-policy job). An attempt run twice, by one worker process or by two
        (a copy of its message reaching another instance), fails it."""
        return check_runs(self.c, self.runs, self.cron, self.once + self.probes, allowed_skips)


@dataclass
class Verdict:
    summary: str


def _occurrences(c: Cluster, job_ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    return sql(c, """
        SELECT o.id, o.job_id, o.scheduled_for, o.status, o.skip_reason, o.attempt,
               o.exception, o.created_at, o.start_time, o.end_time,
               (SELECT count(*) FROM jsonb_array_elements(o.history) s
                 WHERE (s->>'to')::int = $2) AS completions,
               (SELECT count(*) FROM jsonb_array_elements(o.history) s
                 WHERE (s->>'to')::int = $3) AS zombies
        FROM occurrences o WHERE o.job_id = ANY($1) ORDER BY o.scheduled_for
    """, job_ids, COMPLETED, UNKNOWN)  # fmt: skip


def _table(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"  {r['scheduled_for']:%H:%M:%S.%f} status {r['status']} skip {r['skip_reason']} "
        f"attempt {r['attempt']} created {r['created_at']:%H:%M:%S.%f} "
        f"exception {(r['exception'] or '')[:80]!r}"
        for r in rows
    )


def check_runs(
    c: Cluster,
    runs: Path,
    cron: list[dict[str, Any]],
    once: list[dict[str, Any]],
    allowed_skips: Callable[[dict[str, Any], str], bool] | None = None,
) -> Verdict:
    def default_skip(job: dict[str, Any], reason: str) -> bool:
        return reason == "overlap" and job["concurrentExecutionPolicy"] == 0

    allowed = allowed_skips or default_skip
    by_job: dict[str, list[dict[str, Any]]] = {}
    jobs = cron + once
    for row in _occurrences(c, [uuid.UUID(j["id"]) for j in jobs]):
        by_job.setdefault(str(row["job_id"]), []).append(row)
    pids: dict[str, list[int]] = {}
    for occurrence, _, pid in runs_of(runs):
        pids.setdefault(occurrence, []).append(pid)
    problems: list[str] = []
    skipped: Counter[str] = Counter()
    completed = 0
    for job in jobs:
        rows = by_job.get(job["id"], [])
        name = job.get("displayName") or job["id"]
        if job in cron:
            fires = [r["scheduled_for"] for r in rows]
            span = round((fires[-1] - fires[0]).total_seconds()) + 1 if fires else 0
            expected = [fires[0] + timedelta(seconds=i) for i in range(span)] if fires else []
            if fires != expected or len(fires) < 3:
                missing = sorted(set(expected) - set(fires))
                (state,) = sql(c, "SELECT is_active, next_run_at, bucket, version FROM jobs "
                               "WHERE id = $1", uuid.UUID(job["id"]))  # fmt: skip
                problems.append(
                    f"{name} ({state}): {len(fires)} fires, missing {missing}:\n{_table(rows)}"
                )
        elif len(rows) != 1:
            problems.append(f"one-time job {name}: {len(rows)} occurrences:\n{_table(rows)}")
        for r in rows:
            oid = str(r["id"])
            ran = pids.get(oid, [])
            what = f"{name} {r['scheduled_for']:%H:%M:%S.%f}"
            if r["status"] == COMPLETED:
                completed += 1
                if r["completions"] != 1 or r["attempt"] != 1 or not ran:
                    problems.append(
                        f"{what}: completed {r['completions']}x, run {len(ran)}x, attempt "
                        f"{r['attempt']}, zombie {r['zombies']}x"
                    )
                elif len(ran) > 1:
                    problems.append(f"{what}: run {len(ran)}x, in processes {ran}")
            elif cancelled_ahead(r["status"], r["exception"]):
                if ran:
                    problems.append(f"{what}: cancelled ahead but run {len(ran)}x")
            elif r["status"] == SKIPPED and r["skip_reason"] and allowed(job, r["skip_reason"]):
                skipped[r["skip_reason"]] += 1
                if ran:
                    problems.append(f"{what}: skipped but run {len(ran)}x")
            else:
                problems.append(f"{name}: unexpected outcome:\n{_table([r])}")
    assert not problems, "\n".join(problems[:20])
    return Verdict(f"{completed} completed, skipped {dict(skipped) or 'none'}")
