"""Cluster-wide limits with real processes (one ``rota server``, two ``rota worker`` on the
real PostgreSQL, Redis and RabbitMQ): under a load of many jobs of limited types, the runs
that overlap never exceed the limit (per type, and per value of a key of the job data), and
the starts per second never exceed the rate, measured from the handlers' own start and end
times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.limits_measure import max_overlap, max_starts_within, read_spans

from .conftest import wait_until
from .distributed import (
    COMPLETED,
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
    settle,
)

pytestmark = pytest.mark.slow

MAX = 3
PER_CUSTOMER = 1
RATE = 5.0


def test_limits_hold_across_two_worker_processes(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    c = cluster
    c.server("server")
    limits = [
        {"type": "e2e.limited", "max": MAX},
        {"type": "e2e.per-customer", "max": PER_CUSTOMER, "key": "customer"},
        {"type": "e2e.rated", "ratePerSecond": RATE},
    ]
    c.api("PUT", "/limits", json={"limits": limits})
    for name in ("w1", "w2"):
        c.worker(name, concurrency=8)
    wait_until(lambda: len(c.worker_instances()) == 2, 30, f"workers not up: {c.logs()}")
    files = {kind: tmp_path / f"{kind}.spans" for kind in ("limited", "customer", "rated")}
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()

    def job(job_type: str, path: Path, **data: Any) -> dict[str, Any]:
        return {
            "jobType": job_type,
            "workerId": "e2e",
            "executeAt": at,
            "jobData": {"path": str(path), **data},
        }

    jobs = [job("e2e.limited", files["limited"], seconds=0.3) for _ in range(18)]
    jobs += [
        job("e2e.per-customer", files["customer"], seconds=0.3, customer=f"c{i % 3}")
        for i in range(12)
    ]
    jobs += [job("e2e.rated", files["rated"], seconds=0.0) for _ in range(15)]
    made = c.api("POST", "/jobs/bulk", json={"jobs": jobs})["items"]
    ids = [j["id"] for j in made]
    # while the load runs, the API shows occurrences waiting for a limit
    seen_waiting = []

    def some_wait() -> bool:
        seen_waiting.extend(c.api("GET", "/limits")["waiting"])
        return bool(seen_waiting)

    wait_until(some_wait, 20, f"nothing was seen waiting: {c.logs()}")
    settle(c, ids, 60)
    statuses = [o["status"] for j in ids for o in c.occurrences(j)]
    assert statuses == [COMPLETED] * len(jobs), c.logs()

    limited = read_spans(files["limited"])
    assert len(limited) == 18
    assert max_overlap((s, e) for s, e, _ in limited) == MAX  # reached, never exceeded
    per_customer = read_spans(files["customer"])
    assert len(per_customer) == 12
    for customer in ("c0", "c1", "c2"):
        spans = [(s, e) for s, e, who in per_customer if who == customer]
        assert max_overlap(spans) == PER_CUSTOMER, customer
    assert max_overlap((s, e) for s, e, _ in per_customer) > PER_CUSTOMER  # keys side by side
    starts = [s for s, _, _ in read_spans(files["rated"])]
    assert len(starts) == 15
    # at most RATE in any second (the handlers note their start a moment after the grant)
    assert max_starts_within(starts, 0.9) <= RATE
    assert max(starts) - min(starts) >= (15 / RATE - 1) * 0.9
    # the waiting ones said so in their log, and nothing is held or waiting any more
    waiting = seen_waiting[0]["occurrenceId"]
    assert any(line["message"].startswith("waiting for limit") for line in c.logs_of(waiting))
    after = c.api("GET", "/limits")
    assert after["waiting"] == []
    assert [x["running"] for x in after["limits"]] == [0, 0, 0]
