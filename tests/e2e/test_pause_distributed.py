"""A timed pause in the distributed mode (PostgreSQL, Redis, RabbitMQ; two `rota server`
processes and a `rota worker`): a per-second job paused for a few seconds records its fires
Skipped with the note, resumes by itself when the time comes, once (one audit entry, though
both servers look for the pauses that ended), and runs again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from .conftest import wait_until
from .distributed import (  # noqa: F401  (fixtures)
    COMPLETED,
    SKIPPED,
    Cluster,
    cluster,
    distributed_env,
)

pytestmark = pytest.mark.slow


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_timed_pause_ends_once_by_itself_on_two_servers(cluster: Cluster) -> None:  # noqa: F811
    cluster.server("one")
    cluster.server("two")
    cluster.worker("worker")
    wait_until(cluster.worker_instances, 30, "the worker did not register")
    body = {"jobType": "e2e.tick", "workerId": "e2e", "cronExpression": "* * * * * *"}
    job = cluster.api("POST", "/jobs", json=body)

    def completed() -> list[datetime]:
        return [
            _time(o["scheduledFor"])
            for o in cluster.occurrences(job["id"])
            if o["status"] == COMPLETED
        ]

    wait_until(completed, 30, f"no first run: {cluster.logs()}")
    until = datetime.now(UTC) + timedelta(seconds=4)
    paused = cluster.api(
        "POST",
        f"/jobs/{job['id']}/pause",
        json={"note": "failover drill", "until": until.isoformat()},
    )
    assert paused["paused"] is True
    paused_at = _time(paused["pausedAt"])

    wait_until(
        lambda: not cluster.api("GET", f"/jobs/{job['id']}")["paused"],
        30,
        f"the pause did not end by itself: {cluster.logs()}",
    )
    assert datetime.now(UTC) >= until
    wait_until(
        lambda: any(fire >= until for fire in completed()), 30, f"no run after: {cluster.logs()}"
    )

    during = [
        o
        for o in cluster.occurrences(job["id"])
        if paused_at + timedelta(seconds=1) <= _time(o["scheduledFor"]) < until
    ]
    assert during, "fires came while paused"
    assert {(o["status"], o["skipReason"]) for o in during} == {(SKIPPED, "paused")}
    detail = cluster.api("GET", f"/occurrences/{during[0]['id']}")
    assert detail["statusChangeLogs"][0]["reason"] == "paused: failover drill"
    resumed = cluster.api(
        "GET", "/audit", params={"action": "job.resumed", "resourceId": job["id"]}
    )["items"]
    assert [entry["actor"] for entry in resumed] == ["system"]  # once, by one of the servers
