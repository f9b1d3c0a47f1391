"""An interval job with bounds in the distributed mode (PostgreSQL, Redis, RabbitMQ; a `rota
server` and a `rota worker` process): it fires on its grid from its ``startAt``, each run sent
after its jitter delay, ``maxRuns`` times, then has no next fire (``nextRunAt`` null)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import wait_until
from .distributed import Cluster, cluster, distributed_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_an_interval_job_runs_max_runs_times_with_jitter_then_stops(
    cluster: Cluster,  # noqa: F811
) -> None:
    cluster.server("server")
    cluster.worker("worker")
    wait_until(cluster.worker_instances, 30, "the worker did not register")
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    body = {
        "jobType": "e2e.tick",
        "workerId": "e2e",
        "every": "2s",
        "startAt": start.isoformat(),
        "maxRuns": 3,
        "jitterSeconds": 0.5,
        "concurrentExecutionPolicy": 2,
    }
    job: dict[str, Any] = cluster.api("POST", "/jobs", json=body)
    assert (job["every"], _time(job["nextRunAt"])) == ("2s", start)

    def done() -> bool:
        current = cluster.api("GET", f"/jobs/{job['id']}")
        finished = [o for o in cluster.occurrences(job["id"]) if o["status"] == 2]
        return current["nextRunAt"] is None and len(finished) == 3

    wait_until(done, 60, f"three runs and no next fire; logs: {cluster.logs()}")
    assert cluster.api("GET", f"/jobs/{job['id']}")["runCount"] == 3
    runs = sorted(cluster.occurrences(job["id"]), key=lambda o: o["scheduledFor"])
    assert [_time(o["scheduledFor"]) for o in runs] == [
        start + timedelta(seconds=2 * k) for k in range(3)
    ]
    for occ in runs:
        assert 0 <= occ["jitterSeconds"] <= 0.5
        sent = _time(occ["scheduledFor"]) + timedelta(seconds=occ["jitterSeconds"])
        assert _time(occ["startTime"]) >= sent
