"""The dispatch lead in the distributed mode (PostgreSQL, Redis, RabbitMQ; a `rota server` and
a `rota worker` process): an occurrence is committed and sent ahead of its due time, the
worker holds it and starts it at (not before) its due instant; a job disabled during the
hold never starts; a job edited during the hold runs its new version at the due instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import wait_until
from .distributed import Cluster, cluster, distributed_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

LEAD = 3.0


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_worker_holds_an_occurrence_sent_ahead_and_starts_it_when_due(
    cluster: Cluster,  # noqa: F811
) -> None:
    cluster.server("server", ROTA_SCHEDULER__DISPATCH_LEAD_SECONDS=str(LEAD))
    cluster.worker("worker")
    wait_until(cluster.worker_instances, 30, "the worker did not register")

    def one_time_job(**fields: Any) -> tuple[dict[str, Any], datetime]:
        due = datetime.now(UTC) + timedelta(seconds=LEAD + 2)
        body = {"jobType": "e2e.tick", "workerId": "e2e", "executeAt": due.isoformat(), **fields}
        return cluster.api("POST", "/jobs", json=body), due

    def final(occ_id: str) -> dict[str, Any]:
        return dict(cluster.api("GET", f"/occurrences/{occ_id}"))

    def sent_ahead(job: dict[str, Any]) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def sent() -> bool:
            for item in cluster.occurrences(job["id"]):
                one = final(item["id"])
                if one["dispatchedAt"] is not None:
                    found.append(one)
            return bool(found)

        wait_until(sent, 20, f"no occurrence sent ahead; logs: {cluster.logs()}")
        occ = found[0]
        assert datetime.now(UTC) < _time(occ["scheduledFor"]), "too slow to see the hold"
        assert occ["status"] == 0  # Queued: held by the worker
        return occ

    # Sent ahead, started at (not before) its due instant.
    job, due = one_time_job()
    occ = sent_ahead(job)
    assert _time(occ["dispatchedAt"]) < _time(occ["scheduledFor"])
    wait_until(lambda: final(occ["id"])["status"] == 2, 30, f"not completed; {cluster.logs()}")
    done = final(occ["id"])
    start, scheduled = _time(done["startTime"]), _time(done["scheduledFor"])
    assert start >= scheduled
    assert start - scheduled < timedelta(seconds=1)  # generous: the machine is shared

    # Disabled during the hold: Cancelled, never started.
    job, due = one_time_job()
    occ = sent_ahead(job)
    cluster.api("PATCH", f"/jobs/{job['id']}", json={"isActive": False})
    wait_until(lambda: final(occ["id"])["status"] == 4, 15, f"not cancelled; {cluster.logs()}")
    wait_until(lambda: datetime.now(UTC) > due + timedelta(seconds=1), 15, "due time")
    cancelled = final(occ["id"])
    assert cancelled["status"] == 4
    assert cancelled["startTime"] is None
    assert cancelled["exception"] == "cancelled: job disabled before its due time"

    # Edited during the hold: sent again as edited; the new version runs at the due instant.
    steps = {"seconds": 0.1, "step": 0.1}
    job, due = one_time_job(jobType="e2e.long", jobData=steps)
    occ = sent_ahead(job)
    cluster.api("PATCH", f"/jobs/{job['id']}", json={"jobData": {**steps, "seconds": 0.3}})
    wait_until(lambda: final(occ["id"])["status"] == 2, 30, f"not completed; {cluster.logs()}")
    edited = final(occ["id"])
    assert edited["result"] == 3  # the edited data: 3 steps, not 1
    assert edited["jobVersion"] == job["version"] + 1
    assert _time(edited["startTime"]) >= _time(edited["scheduledFor"])
