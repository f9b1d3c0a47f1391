"""Missed fires in the distributed mode: two `rota server` processes sharing the buckets and a
`rota worker` on the real PostgreSQL, Redis and RabbitMQ, with the default settings. The
dispatcher stopped on purpose (the admin switch) is reported per job within the grace, each
job by the server that owns its bucket, in every server's ``/admin/alerts``; resuming clears
the alerts."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from .conftest import wait_until
from .distributed import (
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
)
from .recovery import Recorder

pytestmark = pytest.mark.slow

GRACE = 5.0
"""ROTA_SILENCE__FIRE_GRACE_SECONDS's default."""
SLACK = 4.0
"""A check every second, on loaded machines: generous."""


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def overdue(c: Cluster, base: str | None = None) -> dict[str, dict[str, Any]]:
    body = c.api("GET", "/admin/alerts") if base is None else _get(c, base, "/admin/alerts")
    return {a["jobId"]: a for a in body["active"] if a["kind"] == "fire_overdue"}


def _get(c: Cluster, base: str, path: str) -> Any:
    r = c.session.request("GET", f"{base}{path}", base, timeout=15)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_stopped_dispatcher_is_reported_per_job_by_the_owner_of_its_bucket(
    cluster: Cluster,  # noqa: F811
    recovery: Recorder,
) -> None:
    c = cluster
    a = c.server("server-a")
    b = c.server("server-b")
    c.worker("worker-1")
    wait_until(lambda: len(c.worker_instances()) == 1, 30, f"worker: {c.logs()}")

    def split() -> bool:
        owners = {row["owner"] for row in c.api("GET", "/admin/buckets")["buckets"]}
        return len(owners) == 2 and None not in owners

    wait_until(split, 60, f"the two servers did not share the buckets: {c.logs()}")
    crons = ["*/1 * * * * *"] * 6 + ["*/3 * * * * *"] * 2
    jobs = [
        c.api("POST", "/jobs", json={"jobType": "e2e.tick", "workerId": "e2e", "cronExpression": x})
        for x in crons
    ]
    wait_until(
        lambda: all(len(c.occurrences(j["id"])) >= 2 for j in jobs), 60, f"firing: {c.logs()}"
    )
    assert overdue(c) == {}  # fires recorded on time raise nothing
    owners = {row["bucket"]: row["owner"] for row in c.api("GET", "/admin/buckets")["buckets"]}

    c.api("POST", "/admin/dispatcher/stop", json={"reason": "drill"})
    wait_until(lambda: len(overdue(c)) == len(jobs), 60, f"an alert per job: {c.logs()}")
    for base in (a.base, b.base):  # every server lists every server's alerts
        wait_until(lambda base=base: len(overdue(c, base)) == len(jobs), 30, "shared alerts")
    alerts = overdue(c)
    lates: list[float] = []
    for job in jobs:
        alert = alerts[job["id"]]
        assert alert["instanceId"] == owners[job["bucket"]]
        expected = parse(alert["expectedAt"])
        late = parse(alert["raisedAt"]) - expected
        lates.append(late.total_seconds())
        assert timedelta(seconds=GRACE) <= late <= timedelta(seconds=GRACE + SLACK), alert
        fired = {parse(o["scheduledFor"]) for o in c.occurrences(job["id"])}
        assert expected not in fired  # the fire it names was not recorded
        assert "the dispatcher is paused: drill" in alert["message"]

    recovery("dispatcher stopped: fire_overdue raised after the due fire (slowest job)", max(lates))
    recovery("dispatcher stopped: fire_overdue raised after the due fire (fastest job)", min(lates))

    resumed = time.monotonic()
    c.api("POST", "/admin/dispatcher/resume")
    wait_until(lambda: overdue(c) == {}, 60, f"the alerts resolved: {c.logs()}")
    recovery("dispatcher resumed: every fire_overdue alert cleared", time.monotonic() - resumed)
