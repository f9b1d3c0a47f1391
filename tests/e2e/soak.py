"""The chaos soak (issue 14, item 5): two ``rota server`` and two ``rota worker`` processes on
the real PostgreSQL, RabbitMQ and a private Redis, a mixed workload, and random faults from a
seeded random generator; at the end, after a quiet drain, the guarantees checked from the store
and from the handlers' own run records, and the figures printed (a table and JSON).

Run it with ``make soak MINUTES=N [SEED=S] [FAULTS=kind,kind]`` (``python -m tests.e2e.soak
--help``); a two-minute run is a test of the suite (``test_soak.py``). docs/reliability.md,
"Chaos soak", describes it and records the runs.

**Workload** (all of job type ``e2e.soak``, :func:`tests.e2e.jobs.soak`, which notes
``start``/``end``/``fail``/``cancel`` with occurrence, attempt and pid in one file):
every-second cron jobs (half Skip, half Queue policy), bursts of one-time jobs, retry jobs
(their first attempts fail, a later one completes), long jobs (tens of seconds), long jobs
cancelled while they run, and a probe after every fault.

**Faults** (one at a time, in rounds of every enabled kind shuffled by the seed, random gaps
and outage lengths): ``kill9_server`` and ``kill9_worker`` (restarted after), ``redis_flush``
and ``redis_restart`` (the soak's own redis-server), ``rabbit_close`` (``rabbitmqctl
close_all_connections`` on the soak's vhost), ``rabbit_restart`` (``stop_app``/``start_app``),
``pg_restart`` (``pg_ctlcluster`` stop/start). After each, the recovery time: until a new
one-time job has completed and every cron job has finished a fire scheduled after the lift.

**Checks** (:func:`check`): no fire lost, no attempt started twice, no fire completed twice,
every occurrence finished or explained, every attempt cut short by a kill followed by a new
recorded attempt, no fire Skipped as an overlap while nothing of its job was in progress
(:mod:`tests.e2e.overlaps`). Their exact definitions are in docs/reliability.md.

Every wait has a deadline; every service is restored (and checked up) in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .conftest import wait_until
from .distributed import (
    CANCELLED,
    COMPLETED,
    FAILED,
    QUEUED,
    RUNNING,
    SKIPPED,
    UNKNOWN,
    Cluster,
    Proc,
    Server,
    cancelled_ahead,
    fresh_deployment,
)
from .faults import (
    FAST,
    pg_start,
    pg_stop,
    pg_up,
    private_redis,
    rabbit_up,
    rabbitmqctl,
    redis_flushall,
    redis_start,
    redis_stop,
    redis_up,
    sql,
    start_worker,
    try_api,
    wait_workers,
    warm_up,
)
from .overlaps import unjustified_overlaps

FAULT_KINDS = (
    "kill9_server",
    "kill9_worker",
    "redis_flush",
    "redis_restart",
    "rabbit_close",
    "rabbit_restart",
    "pg_restart",
)
SHARED_FAULTS = ("rabbit_restart", "pg_restart")
"""Faults on services other users of the machine share (the soak's Redis is its own)."""

STATUS_NAMES = {0: "Queued", 1: "Running", 2: "Completed", 3: "Failed", 4: "Cancelled",
                5: "TimedOut", 6: "Unknown", 7: "Skipped"}  # fmt: skip
RECOVERY_TIMEOUT = 90.0
"""A fault after which work does not flow again within this is a failure."""
END_SLACK = timedelta(seconds=10)
"""A cron job's last fire may be this much older than the moment it was disabled (the
dispatch of the last seconds before the disable may not have happened yet)."""
QUIET_SECONDS = 5.0
"""After the drain: this long with nothing open and no new handler record."""


def now() -> datetime:
    return datetime.now(UTC)


# --- configuration, faults and the report -------------------------------------------------------


@dataclass
class SoakConfig:
    minutes: float
    seed: int
    faults: tuple[str, ...] = FAULT_KINDS
    max_shared: int | None = None
    """At most this many faults on the shared services (:data:`SHARED_FAULTS`); ``None``: no
    limit. Other users of the machine lose their connections at each."""
    gap: tuple[float, float] = (3.0, 12.0)
    """Seconds between the recovery from one fault and the next fault (uniform)."""
    outage: tuple[float, float] = (1.0, 4.0)
    """Seconds a killed process or a stopped service stays away (uniform)."""
    cron_jobs: int = 4
    burst: tuple[int, int] = (8, 20)
    """One-time jobs per burst (uniform)."""
    long_seconds: tuple[float, float] = (12.0, 30.0)
    drain_timeout: float = 180.0


@dataclass
class Fault:
    kind: str
    target: str
    started: float
    """Seconds since the soak began."""
    outage: float
    recovery: float | None = None
    """Seconds from the lift until work flowed again (``None``: it did not, within
    :data:`RECOVERY_TIMEOUT`)."""
    probe: float | None = None
    """Seconds from the lift until the probe job completed."""
    cron: float | None = None
    """Seconds from the lift until every cron job had finished a fire scheduled after it."""


@dataclass
class Report:
    seed: int
    minutes: float
    started_at: str
    duration_s: float = 0.0
    drain_s: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())

    def faults_by_kind(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.faults))

    def recovery_by_kind(self) -> dict[str, dict[str, float | int | None]]:
        out: dict[str, dict[str, float | int | None]] = {}
        for kind in sorted({f.kind for f in self.faults}):
            times = [f.recovery for f in self.faults if f.kind == kind and f.recovery is not None]
            failed = sum(1 for f in self.faults if f.kind == kind and f.recovery is None)
            out[kind] = {
                "count": sum(1 for f in self.faults if f.kind == kind),
                "min_s": round(min(times), 1) if times else None,
                "max_s": round(max(times), 1) if times else None,
                "not_recovered": failed,
            }
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "minutes": self.minutes,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 1),
            "drain_s": round(self.drain_s, 1),
            "figures": self.figures,
            "faults_by_kind": self.faults_by_kind(),
            "recovery_by_kind": self.recovery_by_kind(),
            "faults": [asdict(f) for f in self.faults],
            "problems": {k: len(v) for k, v in self.problems.items()},
            "ok": self.ok,
        }

    def table(self) -> str:
        f = self.figures
        rows = [
            ("seed", self.seed),
            ("started", self.started_at),
            ("duration (load + faults)", f"{self.duration_s:.0f} s"),
            ("drain", f"{self.drain_s:.0f} s"),
            ("cron fires", f.get("fires")),
            ("occurrences", f.get("occurrences")),
            ("  by status", f.get("by_status")),
            ("  skipped by reason", f.get("skipped")),
            ("  overlap skips while idle", f.get("overlaps_while_idle")),
            ("one-time jobs by kind", f.get("once_by_kind")),
            ("attempts started", f.get("attempts")),
            ("attempts cut short by a kill", f.get("cut_short")),
            ("cancels asked (API answer)", f.get("cancels")),
            ("cancel jobs ended", f.get("cancel_jobs_by_status")),
            ("API calls refused or failed", f.get("api_errors")),
            ("faults", self.faults_by_kind()),
        ]
        lines = ["", "chaos soak", "-" * 72]
        lines += [f"{name:32} {value}" for name, value in rows]
        lines += ["-" * 72, f"{'recovery per fault':32} (seconds from the lift)"]
        for fault in self.faults:
            rec = "NOT RECOVERED" if fault.recovery is None else f"{fault.recovery:5.1f} s"
            probe = "" if fault.probe is None else f" (probe {fault.probe:.1f} s"
            probe += "" if fault.cron is None else f", cron {fault.cron:.1f} s)"
            lines.append(
                f"  t={fault.started:6.1f} s {fault.kind:15} {fault.target:10} "
                f"away {fault.outage:3.1f} s  recovered {rec}{probe}"
            )
        lines.append("-" * 72)
        for check_name, found in self.problems.items():
            lines.append(f"{check_name:44} {'ok' if not found else f'FAILED ({len(found)})'}")
            lines += [f"    {p}" for p in found[:15]]
        lines.append("-" * 72)
        return "\n".join(lines)


@contextlib.contextmanager
def services_restored(redis_port: str) -> Iterator[None]:
    """Whatever happens inside (a failed check, Ctrl-C), PostgreSQL, RabbitMQ and the soak's
    Redis run again afterwards, and are checked to answer."""
    try:
        yield
    finally:
        errors = []
        for name, start, up in (
            ("PostgreSQL", pg_start, pg_up),
            ("RabbitMQ", lambda: rabbitmqctl("start_app"), rabbit_up),
            ("Redis", lambda: redis_start(redis_port), lambda: redis_up(redis_port)),
        ):
            try:
                start()
                wait_until(up, 60, f"{name} did not come back")
            except Exception as exc:  # report every service, not only the first
                errors.append(f"{name}: {exc}")
        if errors:
            raise RuntimeError(f"services not restored: {errors}")


# --- the soak ----------------------------------------------------------------------------------


class Soak:
    def __init__(self, c: Cluster, config: SoakConfig, runs: Path, redis_port: str) -> None:
        self.c = c
        self.config = config
        self.runs = runs
        self.redis_port = redis_port
        self.rng = random.Random(config.seed)
        """The fault schedule's generator (kinds, targets, gaps, outages)."""
        self.load_rng = random.Random(config.seed + 1)
        """The workload's generator (sizes, kinds, lengths)."""
        self.t0 = time.monotonic()
        self.servers: dict[str, Server] = {}
        self.workers: dict[str, Proc] = {}
        self.killed_pids: set[int] = set()
        self.cron: list[dict[str, Any]] = []
        self.disabled_at: dict[str, datetime] = {}
        self.cancel_targets: list[tuple[dict[str, Any], float]] = []
        """Jobs whose occurrence is to be cancelled once it runs, with a deadline."""
        self.cancels: Counter[str] = Counter()
        self.api_errors = 0
        self.faults: list[Fault] = []
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # --- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        for name in ("server-a", "server-b"):
            self.servers[name] = self.c.server(name)
        for name in ("worker-1", "worker-2"):
            self.workers[name] = start_worker(self.c, name, concurrency=8)
        wait_workers(self.c, 2)
        warm_up(self.c, self.runs.with_name("warm-up"))
        for n in range(self.config.cron_jobs):
            self.cron.append(self.c.api("POST", "/jobs", json={
                "jobType": "e2e.soak", "workerId": "e2e", "cronExpression": "* * * * * *",
                "displayName": f"soak cron {n}", "concurrentExecutionPolicy": n % 2,
                "jobData": self.data("cron"),
            }))  # fmt: skip
        self.t0 = time.monotonic()

    def data(self, kind: str, **extra: Any) -> dict[str, Any]:
        return {"path": str(self.runs), "kind": kind, **extra}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def api(self, method: str, path: str, **kw: Any) -> Any:
        answer = try_api(self.c, method, path, **kw)
        if answer is None:
            with self._lock:
                self.api_errors += 1
        return answer

    # --- the workload (a thread of its own) ----------------------------------------------------

    def one_time(self, kind: str, count: int = 1, spread: float = 0.0, **data: Any) -> None:
        start = now()
        jobs = [
            {"jobType": "e2e.soak", "workerId": "e2e", "displayName": f"soak {kind}",
             "executeAt": (start + timedelta(seconds=self.load_rng.uniform(0, spread))).isoformat(),
             "jobData": self.data(kind, **data),
             **({"maxRetries": 3, "retryDelaySeconds": 1} if kind == "retry" else {})}
            for _ in range(count)
        ]  # fmt: skip
        made = self.api("POST", "/jobs/bulk", json={"jobs": jobs})
        if made and kind == "cancel":
            deadline = time.monotonic() + 40
            self.cancel_targets += [(job, deadline) for job in made["items"]]

    def load(self, until: float) -> None:
        rng = self.load_rng
        due = {"burst": 0.0, "retry": 2.0, "long": 4.0, "cancel": 6.0}
        every = {"burst": (5, 12), "retry": (6, 14), "long": (8, 18), "cancel": (10, 20)}
        while not self._stop.is_set() and self.elapsed() < until:
            t = self.elapsed()
            for kind, at in due.items():
                if t < at:
                    continue
                due[kind] = t + rng.uniform(*every[kind])
                if kind == "burst":
                    self.one_time("burst", rng.randint(*self.config.burst), spread=3.0,
                                  seconds=round(rng.uniform(0, 0.5), 2))  # fmt: skip
                elif kind == "retry":
                    self.one_time("retry", 2, spread=2.0, fail_attempts=rng.randint(1, 2))
                elif kind == "long":
                    self.one_time("long", seconds=round(rng.uniform(*self.config.long_seconds)))
                else:
                    self.one_time("cancel", seconds=self.config.long_seconds[1] + 15)
            self.cancel_running()
            self._stop.wait(0.5)

    def cancel_running(self) -> None:
        """Cancel the cancel jobs' occurrences once they run (each given up at its deadline)."""
        left = []
        for job, deadline in self.cancel_targets:
            rows = self.api("GET", "/occurrences", params={"jobId": job["id"]})
            items = rows["items"] if rows else []
            if items and items[0]["status"] == RUNNING:
                r = self.cancel(items[0]["id"])
                if r in (200, 202, 409):
                    continue
            elif items and items[0]["status"] not in (QUEUED, RUNNING):
                self.cancels["ended before the cancel"] += 1
                continue
            if time.monotonic() < deadline:
                left.append((job, deadline))
            else:
                self.cancels["never seen running"] += 1
        self.cancel_targets = left

    def cancel(self, occurrence_id: str) -> int:
        try:
            base = self.c.base  # a live server's (AssertionError while there is none)
            r = self.c.session.request(
                "POST", f"{base}/occurrences/{occurrence_id}/cancel", base,
                json={"reason": "chaos soak"}, timeout=15,
            )  # fmt: skip
        except Exception:
            self.api_errors += 1
            return 0
        self.cancels[
            {200: "queued", 202: "requested", 409: "had ended"}.get(r.status_code, "refused")
        ] += 1
        return r.status_code

    # --- faults (the main thread) ---------------------------------------------------------------

    def fault_rounds(self) -> Iterator[str]:
        """Rounds of every enabled kind in a shuffled order (the shared-service kinds left out
        once ``max_shared`` of them were injected); ends when a round has none left."""
        limit = self.config.max_shared
        yielded = True
        while yielded:
            yielded = False
            kinds = list(self.config.faults)
            self.rng.shuffle(kinds)
            for kind in kinds:
                shared = sum(1 for f in self.faults if f.kind in SHARED_FAULTS)
                if kind in SHARED_FAULTS and limit is not None and shared >= limit:
                    continue
                yielded = True
                yield kind

    def chaos(self, until: float) -> None:
        kinds = self.fault_rounds()
        while True:
            gap = self.rng.uniform(*self.config.gap)
            kind = next(kinds, None) if self.elapsed() + gap < until else None
            if kind is None:  # time is up, or no kind of fault left: the load goes on alone
                time.sleep(max(0.0, until - self.elapsed()))  # the schedule's own wait
                return
            time.sleep(gap)  # a random wait of the fault schedule, not a synchronisation
            self.inject(kind)

    def inject(self, kind: str) -> None:
        outage = round(self.rng.uniform(*self.config.outage), 1)
        fault = Fault(kind, "-", round(self.elapsed(), 1), outage)
        self.faults.append(fault)
        print(f"soak t={fault.started:.0f}s: {kind}", flush=True)
        if kind == "kill9_server":
            name = self.rng.choice(sorted(self.servers))
            fault.target = name
            self.servers[name].kill9()
            time.sleep(outage)  # the outage itself
            self.servers[name] = self.c.server(name)
        elif kind == "kill9_worker":
            name = self.rng.choice(sorted(self.workers))
            fault.target = name
            victim = self.workers[name]
            self.killed_pids.add(victim.proc.pid)
            victim.kill9()
            time.sleep(outage)
            self.workers[name] = start_worker(self.c, name, concurrency=8)
        elif kind == "redis_flush":
            fault.outage = 0.0
            redis_flushall(self.redis_port)
        elif kind == "redis_restart":
            redis_stop(self.redis_port)
            time.sleep(outage)
            redis_start(self.redis_port)
        elif kind == "rabbit_close":
            fault.outage = 0.0
            rabbitmqctl("close_all_connections", "-p", self.c.env["ROTA_VHOST"], "chaos soak")
        elif kind == "rabbit_restart":
            try:
                rabbitmqctl("stop_app")
                time.sleep(outage)
            finally:
                rabbitmqctl("start_app")
        elif kind == "pg_restart":
            try:
                pg_stop()
                time.sleep(outage)
            finally:
                pg_start()
        else:
            raise ValueError(f"unknown fault {kind!r}")
        self.recover(fault)

    def recover(self, fault: Fault) -> None:
        """Measure how long after the lift work flows again: a probe (a one-time job due now)
        has completed and every cron job has finished a fire scheduled after the lift; and the
        two workers are registered again."""
        lifted = now()
        started = time.monotonic()
        deadline = started + RECOVERY_TIMEOUT
        probe = None
        while probe is None and time.monotonic() < deadline:
            probe = self.api("POST", "/jobs", json={
                "jobType": "e2e.soak", "workerId": "e2e", "displayName": "soak probe",
                "executeAt": now().isoformat(), "jobData": self.data("probe"),
            })  # fmt: skip
            if probe is None:
                time.sleep(0.2)
        cron_ids = [uuid.UUID(j["id"]) for j in self.cron]

        def probe_done() -> bool:
            if probe is None:
                return False
            with contextlib.suppress(Exception):  # the store may still be away
                rows = sql(self.c, "SELECT status FROM occurrences WHERE job_id = $1",
                           uuid.UUID(probe["id"]))  # fmt: skip
                return any(r["status"] == COMPLETED for r in rows)
            return False

        def cron_flows() -> bool:
            with contextlib.suppress(Exception):
                rows = sql(self.c, "SELECT count(DISTINCT job_id) AS n FROM occurrences WHERE "
                           "job_id = ANY($1) AND scheduled_for > $2 AND status NOT IN ($3, $4)",
                           cron_ids, lifted, QUEUED, RUNNING)  # fmt: skip
                return int(rows[0]["n"]) == len(cron_ids)
            return False

        try:
            wait_until(probe_done, max(deadline - time.monotonic(), 0.1), "probe")
            fault.probe = round(time.monotonic() - started, 1)
            wait_until(cron_flows, max(deadline - time.monotonic(), 0.1), "cron")
            fault.cron = round(time.monotonic() - started, 1)
            wait_until(
                lambda: len(self.c.worker_instances()) == 2,
                max(deadline - time.monotonic(), 0.1),
                "workers",
            )
            fault.recovery = round(time.monotonic() - started, 1)
        except AssertionError as exc:
            self.problems.append(f"{fault.kind} at t={fault.started} s: no recovery within "
                                 f"{RECOVERY_TIMEOUT:.0f} s ({exc})")  # fmt: skip
        print(
            f"soak   recovered in {fault.recovery} s (probe {fault.probe} s, cron {fault.cron} s)",
            flush=True,
        )

    # --- run, drain ---------------------------------------------------------------------------

    def run(self) -> float:
        """Load and faults for the configured minutes; returns the seconds it took."""
        until = self.config.minutes * 60
        loader = threading.Thread(target=self.load, args=(until,), name="soak-load", daemon=True)
        loader.start()
        try:
            self.chaos(until)
        finally:
            self._stop.set()
            loader.join(60)
        return self.elapsed()

    def drain(self) -> float:
        """Disable the cron jobs, then wait (bounded) until nothing is Queued, Running or
        Unknown and no handler has noted anything for :data:`QUIET_SECONDS`."""
        started = time.monotonic()
        for job in self.cron:
            wait_until(lambda j=job: self.api("PATCH", f"/jobs/{j['id']}",
                                              json={"isActive": False}) is not None,
                       30, "a cron job could not be disabled")  # fmt: skip
            self.disabled_at[job["id"]] = now()
        deadline = started + self.config.drain_timeout
        quiet_since: float | None = None
        size = -1
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                (row,) = sql(self.c, "SELECT (SELECT count(*) FROM occurrences WHERE status "
                             "IN ($1, $2, $3)) + (SELECT count(*) FROM jobs WHERE is_active AND "
                             "cron_expression IS NULL AND next_run_at IS NOT NULL) AS n",
                             QUEUED, RUNNING, UNKNOWN)  # fmt: skip
                grown = self.runs.stat().st_size if self.runs.exists() else 0
                if row["n"] == 0 and grown == size:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since >= QUIET_SECONDS:
                        break
                else:
                    quiet_since = None
                size = grown
            time.sleep(0.5)
        return time.monotonic() - started

    def alive(self) -> list[str]:
        procs = [*self.servers.values(), *self.workers.values()]
        return [f"{p.log.name} exited {p.proc.returncode}" for p in procs if not p.alive]


# --- the checks ---------------------------------------------------------------------------------


def run_records(path: Path) -> list[tuple[str, str, int, int]]:
    """``(event, occurrence id, attempt, pid)`` of every line the handlers noted."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        event, occurrence, attempt, pid = line.split()
        out.append((event, occurrence, int(attempt), int(pid)))
    return out


def check(soak: Soak) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The figures and, per guarantee, the problems found (docs/reliability.md, Chaos soak):
    the store read with SQL, the handlers' records read from their file."""
    c = soak.c
    jobs = sql(c, "SELECT id, job_type, cron_expression, job_data, created_at FROM jobs")
    occurrences = sql(c, """
        SELECT o.id, o.job_id, o.scheduled_for, o.status, o.skip_reason, o.attempt, o.exception,
               (SELECT count(*) FROM jsonb_array_elements(o.history) s
                 WHERE (s->>'to')::int = $1) AS completions,
               (SELECT max(f.failure_type) FROM failed_occurrences f
                 WHERE f.occurrence_id = o.id) AS failure_type
        FROM occurrences o ORDER BY o.scheduled_for
    """, COMPLETED)  # fmt: skip
    figures, problems = evaluate(
        jobs, occurrences, run_records(soak.runs), soak.killed_pids, soak.disabled_at
    )
    # 6. no fire Skipped as an overlap while nothing of its job was in progress
    overlaps = [
        f"job {o['job_id']} fire {o['scheduled_for']:%H:%M:%S} Skipped (overlap) at "
        f"{o['created_at']:%H:%M:%S.%f}: nothing of the job was in progress"
        for o in unjustified_overlaps(c)
    ]
    figures["overlaps_while_idle"] = len(overlaps)
    problems["no overlap skip while nothing ran"] = overlaps
    figures["cancels"] = dict(soak.cancels)
    figures["api_errors"] = soak.api_errors
    problems["work flows again after every fault"] = list(soak.problems)
    problems["every process alive at the end"] = soak.alive()
    return figures, problems


def evaluate(
    job_rows: list[dict[str, Any]],
    occurrences: list[dict[str, Any]],
    records: list[tuple[str, str, int, int]],
    killed_pids: set[int],
    disabled_at: dict[str, datetime],
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The five guarantees over every job and occurrence of the store (``job_rows``:
    ``id, job_type, cron_expression, job_data, created_at``; ``occurrences``: see
    :func:`check`), the handlers' ``records`` (:func:`run_records`), the pids killed with -9,
    and when each cron job was disabled."""
    jobs = {str(j["id"]): j for j in job_rows}

    def kind_of(job: dict[str, Any]) -> str:
        data = job["job_data"]
        data = json.loads(data) if isinstance(data, str) else data
        if job["job_type"] != "e2e.soak" or not isinstance(data, dict):
            return "warm-up"
        return str(data.get("kind"))

    by_job: dict[str, list[dict[str, Any]]] = {}
    for o in occurrences:
        by_job.setdefault(str(o["job_id"]), []).append(o)
    starts: dict[tuple[str, int], list[int]] = {}
    finished: dict[tuple[str, int, int], str] = {}
    ends: Counter[str] = Counter()
    for event, oid, attempt, pid in records:
        if event == "start":
            starts.setdefault((oid, attempt), []).append(pid)
        else:
            finished[(oid, attempt, pid)] = event
    # an occurrence that ends with its last attempt, no new one: cancelled, or failed as a
    # zombie once its requeues were used up
    ended_there = {
        str(o["id"])
        for o in occurrences
        if o["status"] == CANCELLED or (o["status"] == FAILED and o["failure_type"] == "zombie")
    }
    last_attempt: dict[str, int] = {}
    for oid, attempt in starts:
        last_attempt[oid] = max(attempt, last_attempt.get(oid, 0))
    # A handler's end noted by a process killed before its report left (a later attempt of
    # the occurrence ran): at-least-once, the run the kill could not report is run again.
    # Such an end is not a second completion of the fire; any other second end is.
    unreported = 0
    for (oid, attempt, pid), event in finished.items():
        if event != "end":
            continue
        if pid in killed_pids and attempt < last_attempt.get(oid, attempt):
            unreported += 1
        else:
            ends[oid] += 1

    lost: list[str] = []
    twice: list[str] = []
    completed_twice: list[str] = []
    unexplained: list[str] = []
    no_new_attempt: list[str] = []

    # 1. no fire lost
    for job_id, job in jobs.items():
        rows = by_job.get(job_id, [])
        name = f"{kind_of(job)} job {job_id}"
        if job["cron_expression"] is None:
            if len(rows) != 1:
                lost.append(f"one-time {name}: {len(rows)} occurrences")
            continue
        fires = [r["scheduled_for"] for r in rows]
        if len(fires) != len(set(fires)):
            lost.append(f"{name}: a fire recorded twice")
        disabled = disabled_at.get(job_id)
        if not fires or disabled is None:
            lost.append(f"{name}: {len(fires)} fires, disabled at {disabled}")
            continue
        span = round((fires[-1] - fires[0]).total_seconds()) + 1
        missing = sorted({fires[0] + timedelta(seconds=i) for i in range(span)} - set(fires))
        if missing:
            lost.append(f"{name}: {len(missing)} fires missing, first {missing[:5]}")
        if fires[0] > job["created_at"] + timedelta(seconds=2):
            lost.append(f"{name}: first fire {fires[0]} long after creation {job['created_at']}")
        if fires[-1] < disabled - END_SLACK:
            lost.append(f"{name}: last fire {fires[-1]}, disabled only at {disabled}")

    # 2. no attempt started twice
    for (oid, attempt), pids in starts.items():
        if len(pids) > 1:
            twice.append(f"occurrence {oid} attempt {attempt} started {len(pids)}x, pids {pids}")

    # 3. no fire completed twice; 4. every occurrence finished or explained
    for o in occurrences:
        oid = str(o["id"])
        job = jobs.get(str(o["job_id"]), {})
        kind = kind_of(job) if job else "?"
        what = f"{kind} occurrence {oid} ({o['scheduled_for']:%H:%M:%S})"
        status = o["status"]
        if o["completions"] > 1 or ends[oid] > 1:
            completed_twice.append(f"{what}: Completed {o['completions']}x in the store, "
                                   f"handler completed {ends[oid]}x")  # fmt: skip
        if kind != "warm-up" and status == COMPLETED and ends[oid] == 0:
            unexplained.append(f"{what}: Completed with no handler completion recorded")
        if status in (QUEUED, RUNNING, UNKNOWN):
            unexplained.append(f"{what}: left {STATUS_NAMES[status]}, attempt {o['attempt']}")
        elif status == SKIPPED and not o["skip_reason"]:
            unexplained.append(f"{what}: Skipped without a reason")
        elif (
            status == CANCELLED and kind != "cancel" and not cancelled_ahead(status, o["exception"])
        ):
            unexplained.append(f"{what}: Cancelled, but no cancel was asked")
        elif status == FAILED and o["failure_type"] != "zombie":
            unexplained.append(f"{what}: Failed ({o['failure_type']}): {o['exception']!r:.200}")
        elif status not in (COMPLETED, SKIPPED, CANCELLED, FAILED):
            unexplained.append(f"{what}: {STATUS_NAMES[status]}: {o['exception']!r:.200}")

    # 5. an attempt cut short by a kill is followed by a new recorded attempt
    cut = 0
    for (oid, attempt), pids in starts.items():
        for pid in pids:
            if pid not in killed_pids or (oid, attempt, pid) in finished:
                continue
            cut += 1
            if last_attempt[oid] <= attempt and oid not in ended_there:
                no_new_attempt.append(f"occurrence {oid} attempt {attempt} cut short in pid "
                                      f"{pid}: no later attempt recorded")  # fmt: skip

    cron_ids = {j for j, job in jobs.items() if job["cron_expression"] is not None}
    figures = {
        "fires": sum(len(by_job.get(j, [])) for j in cron_ids),
        "occurrences": len(occurrences),
        "by_status": dict(Counter(STATUS_NAMES[o["status"]] for o in occurrences)),
        "skipped": dict(Counter(o["skip_reason"] for o in occurrences if o["status"] == SKIPPED)),
        "once_by_kind": dict(
            Counter(kind_of(j) for j in jobs.values() if j["cron_expression"] is None)
        ),
        "cancel_jobs_by_status": dict(
            Counter(
                STATUS_NAMES[o["status"]]
                for o in occurrences
                if str(o["job_id"]) in jobs and kind_of(jobs[str(o["job_id"])]) == "cancel"
            )
        ),
        "attempts": sum(len(p) for p in starts.values()),
        "retried_attempts": sum(1 for (_, a) in starts if a > 1),
        "cut_short": cut,
        "unreported_reruns": unreported,
        "killed_pids": sorted(killed_pids),
    }
    problems = {
        "no fire lost": lost,
        "no attempt started twice": twice,
        "no fire completed twice": completed_twice,
        "every occurrence finished or explained": unexplained,
        "a cut-short attempt gets a new attempt": no_new_attempt,
    }
    return figures, problems


# --- the whole run ------------------------------------------------------------------------------


def run_soak(config: SoakConfig, work_dir: Path) -> Report:
    """Set up a fresh deployment, soak it, drain, check; services restored whatever happens."""
    unknown = set(config.faults) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
    report = Report(config.seed, config.minutes, now().isoformat(timespec="seconds"))
    print(f"chaos soak: seed {config.seed}, {config.minutes} min, faults {list(config.faults)}, "
          f"files in {work_dir}", flush=True)  # fmt: skip
    logs = work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with private_redis() as redis_port, fresh_deployment(work_dir / "data") as env:
        env.update(FAST)
        env["ROTA_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        c = Cluster(env, logs)
        soak = Soak(c, config, work_dir / "runs", redis_port)
        try:
            with services_restored(redis_port):
                soak.start()
                report.duration_s = soak.run()
                report.faults = soak.faults
                report.drain_s = soak.drain()
                report.figures, report.problems = check(soak)
        finally:
            report.faults = soak.faults
            c.stop()
    return report


def write_report(report: Report, work_dir: Path) -> Path:
    path = work_dir / "soak-report.json"
    path.write_text(json.dumps(report.as_json(), indent=2, default=str))
    print(report.table())
    print(json.dumps(report.as_json(), default=str))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--faults", default=",".join(FAULT_KINDS),
                        help=f"comma-separated subset of {','.join(FAULT_KINDS)}")  # fmt: skip
    parser.add_argument("--max-shared", type=int, default=None,
                        help="at most this many PostgreSQL/RabbitMQ restarts")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None, help="where logs and the report go")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    faults = tuple(k for k in args.faults.split(",") if k)
    work_dir = args.dir or Path(tempfile.mkdtemp(prefix="rota-soak-"))
    config = SoakConfig(minutes=args.minutes, seed=seed, faults=faults, max_shared=args.max_shared)
    try:
        report = run_soak(config, work_dir)
    except BaseException:
        traceback.print_exc()
        print(f"chaos soak aborted (seed {seed}); logs in {work_dir / 'logs'}", file=sys.stderr)
        return 2
    path = write_report(report, work_dir)
    print(f"report: {path}; logs in {work_dir / 'logs'}; replay: make soak "
          f"MINUTES={config.minutes:g} SEED={seed}")  # fmt: skip
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
