"""Control in milliseconds in the distributed mode: two ``rota server`` processes and a ``rota
worker`` on the real services, the sweeper at its default interval (5 s). A manual trigger, a
dead letter's retry, a dependent released by its upstream and a backfill's runs are each
published at once by a dispatcher's sweep that their wake-up brings, not by the periodic one:
each is Running well under a second after it became due (an idle cluster; the pending sweep
interval and the 2 s sweep grace of before were the floor).

The seconds are measured on the recorded history (the servers' and the worker's clocks, one
machine), not around API calls."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from .conftest import wait_until
from .distributed import (
    COMPLETED,
    FAILED,
    QUEUED,
    RUNNING,
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.slow

AT_ONCE = 1.0
"""Seconds within which a control action's run must start (measured: see docs/concepts.md)."""
DEFAULT_SWEEP = {"ROTA_SCHEDULER__SWEEPER_INTERVAL_SECONDS": "5"}
"""The e2e deployments sweep every second; these servers keep the default, so that only a
wake-up can explain a run that starts within :data:`AT_ONCE`."""


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def change(occurrence: dict[str, Any], to: int, attempt: int) -> datetime:
    """When the occurrence's ``attempt`` went to status ``to`` (its recorded history)."""
    for step in occurrence["statusChangeLogs"]:
        if step["to"] == to and step["attempt"] == attempt:
            return parse(step["timestamp"])
    raise AssertionError(f"no change to {to} for attempt {attempt}: {occurrence}")


def seconds(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds()


def test_control_actions_run_at_once_on_two_servers(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    c = cluster
    servers = [c.server("server-a", **DEFAULT_SWEEP), c.server("server-b", **DEFAULT_SWEEP)]
    c.worker("worker-1")
    wait_until(lambda: len(c.worker_instances()) == 1, 30, f"worker: {c.logs()}")

    def on(server: int, method: str, path: str, **kw: Any) -> Any:
        base = servers[server].base
        r = c.session.request(method, f"{base}{path}", base, timeout=15, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        return r.json() if r.content else None

    def occurrence(occurrence_id: str) -> dict[str, Any]:
        return dict(c.api("GET", f"/occurrences/{occurrence_id}"))

    def final(occurrence_id: str, status: int = COMPLETED) -> dict[str, Any]:
        wait_until(lambda: occurrence(occurrence_id)["status"] == status, 30,
                   f"{occurrence_id} not {status}: {c.logs()}")  # fmt: skip
        return occurrence(occurrence_id)

    latencies: dict[str, list[float]] = {}

    # --- run now, on either server ------------------------------------------------------------
    quick = c.api("POST", "/jobs", json={"jobType": "e2e.quick", "workerId": "e2e"})
    for n in range(4):
        run = on(n % 2, "POST", f"/jobs/{quick['id']}/trigger", json={"reason": f"now {n}"})
        done = final(run["id"])
        latencies.setdefault("trigger", []).append(
            seconds(change(done, QUEUED, 1), change(done, RUNNING, 1))
        )

    # --- a dead letter's retry ----------------------------------------------------------------
    failing = c.api("POST", "/jobs", json={
        "jobType": "e2e.soak", "workerId": "e2e", "maxRetries": 0,
        "jobData": {"path": str(tmp_path / "soak.log"), "kind": "retry", "fail_attempts": 1},
    })  # fmt: skip
    first = on(0, "POST", f"/jobs/{failing['id']}/trigger")
    final(first["id"], FAILED)

    def dead_letters() -> list[dict[str, Any]]:
        page = c.api("GET", "/failed-occurrences", params={"jobId": failing["id"]})
        return list(page["items"])

    wait_until(lambda: len(dead_letters()) == 1, 30, f"no dead letter: {c.logs()}")
    on(1, "POST", f"/failed-occurrences/{dead_letters()[0]['id']}/retry")
    retried = final(first["id"])
    assert retried["attempt"] == 2
    latencies["dead-letter retry"] = [
        seconds(change(retried, QUEUED, 2), change(retried, RUNNING, 2))
    ]

    # --- a chain of three levels: each next level starts when the one before ends -------------
    level_a, level_b, level_c = (
        c.api("POST", "/jobs", json={"jobType": "e2e.quick", "workerId": "e2e"}) for _ in range(3)
    )
    # A server's dependency engine reads the edges when they are set through it, else at its
    # next sweep (every sweeper interval): set the last one through both servers, so that both
    # know the whole chain (an established one, as in production) before it runs.
    on(
        0,
        "PUT",
        f"/jobs/{level_b['id']}/dependencies",
        json={"dependsOn": [{"jobId": level_a["id"]}]},
    )
    for server in (0, 1):
        on(server, "PUT", f"/jobs/{level_c['id']}/dependencies",
           json={"dependsOn": [{"jobId": level_b["id"]}]})  # fmt: skip
    root = final(on(1, "POST", f"/jobs/{level_a['id']}/trigger")["id"])

    def only_run(job: dict[str, Any]) -> dict[str, Any]:
        def one() -> bool:
            runs = c.occurrences(job["id"])
            return len(runs) == 1 and runs[0]["status"] == COMPLETED

        wait_until(one, 30, f"{job['id']} did not run once: {c.logs()}")
        return occurrence(c.occurrences(job["id"])[0]["id"])

    chain = [root, only_run(level_b), only_run(level_c)]
    latencies["dependency's next level"] = [
        seconds(parse(before["endTime"]), change(after, RUNNING, 1))
        for before, after in itertools.pairwise(chain)
    ]
    latencies["(of which the dependent's creation)"] = [
        seconds(parse(before["endTime"]), change(after, QUEUED, 1))
        for before, after in itertools.pairwise(chain)
    ]

    # --- a backfill: its first run at once, each next one when the one before ends ------------
    hourly = c.api("POST", "/jobs", json={"jobType": "e2e.quick", "workerId": "e2e",
                                          "cronExpression": "0 * * * *"})  # fmt: skip
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = {"from": (top - timedelta(hours=3)).isoformat(),
              "to": (top - timedelta(hours=1)).isoformat()}  # fmt: skip
    made = on(0, "POST", f"/jobs/{hourly['id']}/backfill", json=window)
    assert made["created"] == 3
    runs = sorted((final(i) for i in made["occurrenceIds"]), key=lambda o: o["scheduledFor"])
    latencies["backfill's first run"] = [
        seconds(change(runs[0], QUEUED, 1), change(runs[0], RUNNING, 1))
    ]
    latencies["backfill's next run"] = [
        seconds(parse(before["endTime"]), change(after, RUNNING, 1))
        for before, after in itertools.pairwise(runs)
    ]

    print(
        "control -> Running, seconds:", {k: [round(s, 3) for s in v] for k, v in latencies.items()}
    )
    slow = {k: v for k, v in latencies.items() if max(v) >= AT_ONCE}
    assert not slow, f"not at once: {slow} (all: {latencies})\n{c.logs()}"
