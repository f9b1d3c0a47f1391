"""Faults on purpose, with real ``rota server`` / ``rota worker`` processes on the real
PostgreSQL, Redis and RabbitMQ (issue 4, part 6): RabbitMQ restarted and its connections
closed, Redis flushed and restarted, PostgreSQL restarted — each under a load of one-time and
every-second cron jobs —, a TCP fault proxy between a worker and the broker (latency,
blackhole, reset), the same job message delivered three times (to one worker and to two), an
ack lost with a worker's connection, a copy redelivered after Redis lost the claims, poison
messages, and a handler that kills its own process.

Each test asserts that no fire was lost, none completed or ran twice (every handler run is
noted in a file: :func:`faults.runs_of`), no loop died (the processes are alive and a new job
completes after the fault), and that every fire that did not run is explained by a record. It
records its recovery times (``recovery`` fixture), listed at the end of the pytest run.

Every service stopped is started again in ``finally``. The settings in :data:`faults.FAST`
shorten the loader interval, leases, heartbeats and the zombie threshold (10 s instead of 30).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import wait_until
from .distributed import (
    COMPLETED,
    RUNNING,
    UNKNOWN,
    Cluster,
    Proc,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
    wait_seconds,
)
from .faultproxy import FaultProxy
from .faults import (
    FAST,
    Load,
    names,
    peek,
    pg_restored,
    pg_start,
    pg_stop,
    private_redis,
    publish_job_message,
    publish_raw,
    queue_depths,
    rabbit_connections,
    rabbit_restored,
    rabbitmqctl,
    redis_flushall,
    redis_restored,
    redis_start,
    redis_stop,
    runs_of,
    services_available,
    start_worker,
    try_api,
    wait_workers,
    warm_up,
)
from .recovery import Recorder

pytestmark = pytest.mark.slow


@pytest.fixture
def fc(cluster: Cluster) -> Cluster:  # noqa: F811
    """The e2e cluster with the :data:`FAST` settings, once the service commands are known
    to work."""
    services_available()
    cluster.env.update(FAST)
    return cluster


def alive(c: Cluster, *, but: tuple[Proc, ...] = ()) -> None:
    dead = [p.log.name for p in c.procs if not p.alive and p not in but]
    assert not dead, f"processes died: {dead}\n{c.logs()}"


def buckets_owned(c: Cluster) -> bool:
    rows = try_api(c, "GET", "/admin/buckets")
    return bool(rows) and all(b["owner"] for b in rows["buckets"])


# --- 1. RabbitMQ ----------------------------------------------------------------------------


@pytest.mark.exclusive
def test_rabbitmq_restarted_and_its_connections_closed_under_load(
    fc: Cluster, tmp_path: Path, recovery: Recorder
) -> None:
    c = fc
    c.server("server-a")
    c.server("server-b")
    start_worker(c, "worker-1")
    start_worker(c, "worker-2")
    wait_workers(c, 2)
    load = Load.start(c, tmp_path / "runs", once_jobs=40, spread=15)
    load.running()

    with rabbit_restored():
        rabbitmqctl("stop_app")
        wait_seconds(5)  # the outage itself
        rabbitmqctl("start_app")
    probe, backlog = load.recover()
    recovery("RabbitMQ stop_app 5 s + start_app: a new job completed", probe)
    recovery("RabbitMQ stop_app 5 s + start_app: backlog done", backlog)
    alive(c)

    vhost = c.env["ROTA_VHOST"]
    before = rabbit_connections(vhost)
    assert len(before) >= 4, before  # 2 servers and 2 workers
    rabbitmqctl("close_all_connections", "-p", vhost, "rota fault test")
    probe, backlog = load.recover()
    after = rabbit_connections(vhost)
    assert len(after) >= 4, after
    assert not before & after, "connections were not closed"
    recovery("RabbitMQ close_all_connections: a new job completed", probe)
    recovery("RabbitMQ close_all_connections: backlog done", backlog)

    load.stop()
    alive(c)
    print(load.check().summary)  # an attempt run by two worker processes fails it


# --- 2. Redis -------------------------------------------------------------------------------


def index_size(c: Cluster) -> int:
    rows = try_api(c, "GET", "/admin/buckets")
    return sum(b["indexed"] for b in rows["buckets"]) if rows else 0


@pytest.fixture
def own_redis() -> Iterator[str]:
    """The port of a Redis of the test's own, up before its cluster and stopped after it."""
    with private_redis() as port:
        yield port


@pytest.fixture
def rc(own_redis: str, fc: Cluster) -> Cluster:
    """:func:`fc` on the test's own Redis: flushing or stopping it disturbs no other test."""
    fc.env["ROTA_REDIS_URL"] = f"redis://127.0.0.1:{own_redis}/0"
    return fc


def test_redis_flushed_and_restarted_under_load(
    rc: Cluster, own_redis: str, tmp_path: Path, recovery: Recorder
) -> None:
    c = rc
    c.server("server-a")
    c.server("server-b")
    start_worker(c, "worker-1")
    start_worker(c, "worker-2")
    wait_workers(c, 2)
    load = Load.start(c, tmp_path / "runs", once_jobs=40, spread=20)
    load.running()
    assert index_size(c) >= len(load.cron)

    redis_flushall(own_redis)
    flushed = time.monotonic()
    probe, backlog = load.recover()
    recovery("Redis FLUSHALL: a new job completed", probe)
    recovery("Redis FLUSHALL: backlog done", backlog)
    # The loader rebuilt the index, the leases and worker registrations are back.
    wait_until(lambda: index_size(c) >= len(load.cron), 10, "index not rebuilt")
    wait_until(lambda: buckets_owned(c), 10, "leases not re-acquired")
    wait_workers(c, 2, timeout=10)
    recovery("Redis FLUSHALL: index, leases, workers back", time.monotonic() - flushed)
    alive(c)

    with redis_restored(own_redis):
        redis_stop(own_redis)
        wait_seconds(3)  # the outage itself
        redis_start(own_redis)
    restarted = time.monotonic()
    probe, backlog = load.recover()
    recovery("Redis shutdown nosave 3 s + start: a new job completed", probe)
    recovery("Redis shutdown nosave 3 s + start: backlog done", backlog)
    wait_until(lambda: index_size(c) >= len(load.cron), 10, "index not rebuilt")
    wait_until(lambda: buckets_owned(c), 10, "leases not re-acquired")
    wait_workers(c, 2, timeout=10)
    recovery("Redis restart: index, leases, workers back", time.monotonic() - restarted)

    load.stop()
    print(load.check().summary)
    alive(c)


# --- 3. PostgreSQL --------------------------------------------------------------------------


@pytest.mark.exclusive
def test_postgresql_restarted_under_load(fc: Cluster, tmp_path: Path, recovery: Recorder) -> None:
    c = fc
    c.server("server-a")
    c.server("server-b")
    start_worker(c, "worker-1")
    start_worker(c, "worker-2")
    wait_workers(c, 2)
    load = Load.start(c, tmp_path / "runs", once_jobs=30, spread=12)
    load.running()

    with pg_restored():
        pg_stop()
        wait_seconds(5)  # the outage itself
        pg_start()
    probe, backlog = load.recover()
    recovery("PostgreSQL stopped 5 s + started: a new job completed", probe)
    recovery("PostgreSQL stopped 5 s + started: backlog done", backlog)
    alive(c)

    load.stop()
    alive(c)
    print(load.check().summary)


# --- 4. a TCP fault proxy between the worker and RabbitMQ -----------------------------------


def test_fault_proxy_between_worker_and_broker(
    fc: Cluster, tmp_path: Path, recovery: Recorder
) -> None:
    """The worker talks to RabbitMQ through the proxy (AMQP heartbeat 2 s, so that a silent
    connection is noticed within seconds); the servers talk to it directly."""
    c = fc
    c.server("server-a")
    with FaultProxy(5672) as proxy:
        vhost = c.env["ROTA_VHOST"]
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/{vhost}?heartbeat=2"
        start_worker(c, "worker-1", ROTA_AMQP_URL=url)
        wait_workers(c, 1)
        load = Load.start(c, tmp_path / "runs", once_jobs=40, spread=22)
        load.running()
        assert proxy.open_links >= 1, "the worker does not go through the proxy"

        # Latency: 300 ms each way on every chunk; work goes on, slower.
        proxy.latency(0.3)
        before = load.completed_fires()
        wait_until(lambda: load.completed_fires() >= before + 2 * len(load.cron), 20,
                   f"no progress under latency: {c.logs()}")  # fmt: skip
        proxy.heal()
        probe, backlog = load.recover()
        recovery("proxy latency 300 ms: a new job completed", probe)

        # Blackhole: bytes swallowed both ways, nothing closed, for 8 s.
        accepted = proxy.accepted
        try:
            proxy.blackhole()
            wait_seconds(8)  # the fault itself
        finally:
            proxy.heal()
        probe, backlog = load.recover()
        assert proxy.accepted > accepted, "the worker did not reconnect"
        recovery("proxy blackhole 8 s: a new job completed", probe)
        recovery("proxy blackhole 8 s: backlog done", backlog)

        # Reset: every connection, and every new one for 3 s, gets an RST.
        resets = proxy.resets
        try:
            proxy.reset()
            wait_seconds(3)  # the fault itself
        finally:
            proxy.heal()
        assert proxy.resets > resets
        probe, backlog = load.recover()
        recovery("proxy reset 3 s: a new job completed", probe)
        recovery("proxy reset 3 s: backlog done", backlog)

        load.stop()
        print(load.check().summary)
        alive(c)
        c.stop()  # before the proxy goes: a worker cut off from its broker stops slowly


# --- 5. duplicate delivery ------------------------------------------------------------------


def test_the_same_job_message_delivered_again_runs_once(
    fc: Cluster, tmp_path: Path, recovery: Recorder
) -> None:
    """Copies of a job message (as a republish or a lost ack makes them) while its occurrence
    runs, after it completed, and after the worker restarted: it runs once. Then copies with
    two workers in the group: the copies that reach the other worker find the attempt claimed
    and are acknowledged without running; it runs once, on one worker."""
    c = fc
    c.server("server-a")
    worker = start_worker(c, "worker-1", concurrency=4)
    wait_workers(c, 1)
    load = Load(c, tmp_path / "runs")
    warm_up(c, tmp_path / "warm-up")
    job = c.api("POST", "/jobs", json={
        "jobType": "e2e.record", "workerId": "e2e", "cronExpression": "0 0 1 1 *",
        "jobData": {"path": str(load.runs), "seconds": 3},
    })  # fmt: skip
    occ = c.api("POST", f"/jobs/{job['id']}/trigger", json={"reason": "e2e"})
    oid = occ["id"]

    def status() -> int:
        return int(c.api("GET", f"/occurrences/{oid}")["status"])

    def copies_handled() -> bool:
        # the copies left the queue, and a job published after them has run
        return queue_depths(c)[names(c).job_queue("e2e")] == 0 and load.probe(20) >= 0

    wait_until(lambda: status() == RUNNING, 20, f"never ran: {c.logs()}")
    publish_job_message(c, oid, copies=2)  # while it runs
    wait_until(lambda: status() == COMPLETED, 20, f"never completed: {c.logs()}")
    publish_job_message(c, oid, copies=2)  # after it completed
    wait_until(copies_handled, 30, "copies not consumed")

    assert worker.terminate(timeout=30) == 0
    start_worker(c, "worker-1", concurrency=4)  # the same local state
    wait_workers(c, 1)
    warm_up(c, tmp_path / "warm-up")
    publish_job_message(c, oid, copies=2)  # after the worker restarted
    wait_until(copies_handled, 30, "copies not consumed")

    runs = [(o, attempt) for o, attempt, _ in runs_of(load.runs) if o == oid]
    assert runs == [(oid, 1)], f"the occurrence ran {len(runs)} times"
    done = c.api("GET", f"/occurrences/{oid}")
    assert (done["status"], done["attempt"]) == (COMPLETED, 1)
    assert [s["to"] for s in done["statusChangeLogs"]].count(COMPLETED) == 1
    alive(c, but=(worker,))

    # Two workers of the group: copies published while the occurrence runs on one of them
    # reach the other too (RabbitMQ hands deliveries round-robin).
    start_worker(c, "worker-2", concurrency=4)
    wait_workers(c, 2)
    warm_up(c, tmp_path / "warm-up")
    oid = c.api("POST", f"/jobs/{job['id']}/trigger", json={"reason": "e2e"})["id"]
    wait_until(lambda: status() == RUNNING, 20, f"never ran: {c.logs()}")
    publish_job_message(c, oid, copies=4)
    wait_until(lambda: status() == COMPLETED, 20, f"never completed: {c.logs()}")
    wait_until(copies_handled, 30, "copies not consumed")
    done = c.api("GET", f"/occurrences/{oid}")
    assert (done["status"], done["attempt"]) == (COMPLETED, 1)
    assert [s["to"] for s in done["statusChangeLogs"]].count(COMPLETED) == 1
    runs_by = [pid for o, _, pid in runs_of(load.runs) if o == oid]
    assert len(runs_by) == 1, f"the occurrence ran {len(runs_by)} times, in {runs_by}"
    skipped = [p for p in c.procs if "skip_claimed" in p.log.read_text(errors="replace")]
    assert skipped, f"no copy reached the other worker (round-robin): {c.logs()}"


def test_a_job_message_whose_ack_was_lost_runs_once(
    fc: Cluster, tmp_path: Path, recovery: Recorder
) -> None:
    """The lost ack proper: worker 1 talks to RabbitMQ through a fault proxy with 1.5 s of
    latency each way, so its ack reaches RabbitMQ seconds after the job started. The proxy
    resets worker 1's connection in that window (and refuses new ones), so RabbitMQ redelivers
    the message, to worker 2, which finds the attempt claimed by worker 1 and acknowledges it
    without running it. Healed, worker 1 reconnects and reports the completion (from its
    outbox): one run, one attempt, completed once."""
    c = fc
    c.server("server-a")
    with FaultProxy(5672) as proxy:
        vhost = c.env["ROTA_VHOST"]
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/{vhost}?heartbeat=2"
        first = start_worker(c, "worker-1", ROTA_AMQP_URL=url)
        wait_workers(c, 1)
        load = Load(c, tmp_path / "runs")
        warm_up(c, tmp_path / "warm-up")
        job = c.api("POST", "/jobs", json={
            "jobType": "e2e.record", "workerId": "e2e", "cronExpression": "0 0 1 1 *",
            "jobData": {"path": str(load.runs), "seconds": 6},
        })  # fmt: skip
        proxy.latency(1.5)
        oid = c.api("POST", f"/jobs/{job['id']}/trigger", json={"reason": "e2e"})["id"]
        wait_until(lambda: any(o == oid for o, _, _ in runs_of(load.runs)), 20,
                   f"never ran: {c.logs()}")  # fmt: skip
        cut = time.monotonic()
        try:
            proxy.reset()  # the ack is still on its way (latency): lost with the connection
            start_worker(c, "worker-2")  # directly to RabbitMQ: the redelivery goes there
            wait_until(lambda: "skip_claimed" in c.procs[-1].log.read_text(errors="replace"),
                       30, f"the redelivery did not reach worker 2: {c.logs()}")  # fmt: skip
        finally:
            proxy.heal()

        def done() -> bool:
            row = c.api("GET", f"/occurrences/{oid}")
            return int(row["status"]) == COMPLETED

        wait_until(done, 40, f"never completed: {c.logs()}")
        recovery("lost ack: the occurrence completed after its connection was cut",
                 time.monotonic() - cut)  # fmt: skip
        done_row = c.api("GET", f"/occurrences/{oid}")
        assert done_row["attempt"] == 1
        assert [s["to"] for s in done_row["statusChangeLogs"]].count(COMPLETED) == 1
        runs = [(attempt, pid) for o, attempt, pid in runs_of(load.runs) if o == oid]
        assert runs == [(1, first.proc.pid)], f"runs: {runs}"
        assert load.probe(30) >= 0  # both workers go on
        alive(c)
        c.stop()  # before the proxy goes


def _claim_epoch(c: Cluster, name: str) -> str | None:
    """The claim epoch a worker's local state holds (``None`` while it has none)."""
    path = c.log_dir / f"data-{name}" / "workers" / "e2e" / "worker.sqlite3"
    if not path.exists():
        return None
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'claim_epoch'").fetchone()
        except sqlite3.OperationalError:  # not created yet
            return None
    return None if row is None else str(row[0])


def test_a_copy_redelivered_after_redis_lost_its_claims_does_not_run_again(
    rc: Cluster, own_redis: str, tmp_path: Path, recovery: Recorder
) -> None:
    """Redis loses the claim of a running attempt (FLUSHALL), then its worker dies before its
    ack reached RabbitMQ (both workers talk to it through proxies with 1.5 s of latency), so
    RabbitMQ redelivers the message to the other worker. That worker knew the claim memory's
    epoch: it sees the loss, does not run the copy (it may have run before, and it has), and
    reports it taken; zombie detection gives the occurrence a new attempt, which completes.
    Attempt 1 ran once, attempt 2 once."""
    c = rc
    c.server("server-a")
    vhost = c.env["ROTA_VHOST"]
    with FaultProxy(5672) as proxy_1, FaultProxy(5672) as proxy_2:
        workers = {
            name: start_worker(c, name, ROTA_AMQP_URL=(
                f"amqp://guest:guest@127.0.0.1:{proxy.port}/{vhost}?heartbeat=2"))
            for name, proxy in (("worker-1", proxy_1), ("worker-2", proxy_2))
        }  # fmt: skip
        wait_workers(c, 2)
        load = Load(c, tmp_path / "runs")
        warm_up(c, tmp_path / "warm-up")
        # Both have seen the claim memory's epoch (kept in their local state).
        wait_until(lambda: all(_claim_epoch(c, n) for n in workers), 20, "no claim epoch seen")
        (epoch,) = {_claim_epoch(c, n) for n in workers}
        job = c.api("POST", "/jobs", json={
            "jobType": "e2e.record", "workerId": "e2e", "cronExpression": "0 0 1 1 *",
            "jobData": {"path": str(load.runs), "seconds": 4},
        })  # fmt: skip
        proxy_1.latency(1.5)
        proxy_2.latency(1.5)
        oid = c.api("POST", f"/jobs/{job['id']}/trigger", json={"reason": "e2e"})["id"]

        def first_run() -> int | None:
            return next((pid for o, _, pid in runs_of(load.runs) if o == oid), None)

        wait_until(lambda: first_run() is not None, 20, f"never ran: {c.logs()}")
        redis_flushall(own_redis)  # the claim of attempt 1 is gone
        (holder,) = [p for p in workers.values() if p.proc.pid == first_run()]
        (other_name, other), *_ = [(n, p) for n, p in workers.items() if p is not holder]
        holder.kill9()  # its ack is still on its way (latency): RabbitMQ redelivers
        killed = time.monotonic()

        def done() -> bool:
            row = try_api(c, "GET", f"/occurrences/{oid}")
            return row is not None and int(row["status"]) == COMPLETED

        wait_until(done, 60, f"never completed: {c.logs()}")
        recovery("claims lost + holder killed: the next attempt completed",
                 time.monotonic() - killed)  # fmt: skip
        row = c.api("GET", f"/occurrences/{oid}")
        runs = [(attempt, pid) for o, attempt, pid in runs_of(load.runs) if o == oid]
        assert runs == [(1, holder.proc.pid), (2, other.proc.pid)], f"runs: {runs}"
        assert row["attempt"] == 2
        assert [s["to"] for s in row["statusChangeLogs"]].count(COMPLETED) == 1
        skipped = other.log.read_text(errors="replace")
        assert "skip_claimed" in skipped, c.logs()
        assert _claim_epoch(c, other_name) not in (None, epoch)  # it saw the new epoch
        proxy_1.heal()
        proxy_2.heal()
        alive(c, but=(holder,))
        c.stop()  # before the proxies go


# --- 6. poison messages and a handler that kills its process --------------------------------


def failed_occurrences(c: Cluster) -> list[dict[str, Any]] | None:
    """The failed-occurrence records, or ``None`` while the API has no such route."""
    base = c.base
    r = c.session.request(
        "GET", f"{base}/failed-occurrences", base, params={"limit": 1000}, timeout=15
    )
    if r.status_code == 404 and r.json().get("type") != "urn:rota:problem:not-found":
        return None  # PENDING: GET /api/v1/failed-occurrences is not served yet
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def test_poison_messages_are_dead_lettered_and_the_worker_goes_on(
    fc: Cluster, tmp_path: Path, recovery: Recorder
) -> None:
    c = fc
    c.server("server-a")
    c.server("server-b")
    start_worker(c, "worker-1")
    wait_workers(c, 1)
    load = Load(c, tmp_path / "runs")
    warm_up(c, tmp_path / "warm-up")
    n = names(c)
    garbage = [
        b"\x00\xff not JSON at all",
        b'{"occurrenceId": "not a uuid", "jobType": 42}',
        b"[1, 2, 3]",
        b"",
    ]
    published = time.monotonic()
    publish_raw(c, [(body, {}) for body in garbage])

    # Today the dead letters wait in the dead-letter queue; once the servers' dead-letter
    # handler consumes it, each becomes a failed-occurrence record of failure type poison.
    def dead_lettered() -> bool:
        in_queue = {body for body, _ in peek(c, n.dead_letter_queue)}
        records = failed_occurrences(c) or []
        poison = [r for r in records if r.get("failureType") == "poison"]
        return set(garbage) <= in_queue or len(poison) >= len(garbage)

    wait_until(dead_lettered, 20, f"poison not dead-lettered: {c.logs()}")
    recovery("poison messages: dead-lettered", time.monotonic() - published)
    records = failed_occurrences(c)
    if records is None:  # PENDING (failed-occurrences API): the dead letters are in the queue
        letters = peek(c, n.dead_letter_queue)
        assert sorted(body for body, _ in letters) == sorted(garbage)
        for _, headers in letters:
            (death,) = headers["x-death"]
            assert (death["reason"], death["queue"]) == ("rejected", n.job_queue("e2e"))
        assert queue_depths(c)[n.dead_letter_queue] == len(garbage)
    else:
        poison = [r for r in records if r.get("failureType") == "poison"]
        assert len(poison) == len(garbage), poison
        raw = {r["rawMessage"] for r in poison}

        # as received, as text (NUL and what is not UTF-8 dropped or replaced by U+FFFD)
        def text(body: str) -> str:
            return body.replace("\x00", "").replace("\ufffd", "")

        expected = {text(body.decode("utf-8", "replace")) for body in garbage}
        assert {text(r) for r in raw} == expected, raw
        for r in poison:
            assert r["occurrenceId"] is None
            assert "undecodable job message" in r["exception"], r["exception"]
            assert f"rejected, from {n.job_queue('e2e')}" in r["exception"], r["exception"]
        assert queue_depths(c)[n.dead_letter_queue] == 0  # consumed into the records
    assert queue_depths(c)[n.job_queue("e2e")] == 0
    assert load.probe(20) < 20  # the worker goes on
    alive(c)


def test_a_handler_that_kills_its_process_gets_a_new_attempt(
    fc: Cluster, tmp_path: Path, recovery: Recorder
) -> None:
    """``os._exit(1)`` in the first attempt (after its Running report went out); a
    supervisor starts the worker again; the occurrence becomes a zombie after the zombie
    threshold (10 s here) and its second attempt completes."""
    c = fc
    c.server("server-a")
    first = start_worker(c, "worker-1")
    wait_workers(c, 1)
    load = Load(c, tmp_path / "runs")
    warm_up(c, tmp_path / "warm-up")
    job = c.api("POST", "/jobs", json={
        "jobType": "e2e.suicide", "workerId": "e2e", "cronExpression": "0 0 1 1 *",
        "jobData": {"path": str(load.runs), "after": 1.5},
    })  # fmt: skip
    oid = c.api("POST", f"/jobs/{job['id']}/trigger", json={"reason": "e2e"})["id"]
    wait_until(lambda: not first.alive, 30, f"the handler did not kill its worker: {c.logs()}")
    died = time.monotonic()
    assert first.proc.returncode == 1
    second = start_worker(c, "worker-1")  # the supervisor's restart

    def completed() -> bool:
        return bool(c.api("GET", f"/occurrences/{oid}")["status"] == COMPLETED)

    wait_until(completed, 60, f"no new attempt completed: {c.logs()}")
    recovery("handler killed its process: the new attempt completed", time.monotonic() - died)
    done = c.api("GET", f"/occurrences/{oid}")
    assert (done["attempt"], done["result"]) == (2, "survived")
    statuses = [s["to"] for s in done["statusChangeLogs"]]
    assert UNKNOWN in statuses, statuses
    assert statuses.count(COMPLETED) == 1, statuses
    runs = [(o, attempt, pid) for o, attempt, pid in runs_of(load.runs) if o == oid]
    assert runs == [(oid, 1, first.proc.pid), (oid, 2, second.proc.pid)], runs
    assert load.probe(20) < 20
    alive(c, but=(first,))
