"""The overlap policies beyond Skip and Queue in the distributed mode: one `rota server` and two
`rota worker` processes on the real services, three jobs firing every second whose runs last
longer than that. AllowAll runs fires side by side (on either worker), BufferOne never has
more than one running and one waiting (the rest Skipped), CancelOther cancels the running
one for the new fire; the store's dispatch decides, whichever worker runs them."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from itertools import pairwise
from typing import Any

import pytest

from rota.core.models import ConcurrencyPolicy
from rota.services.cancellation import DISPLACED

from .conftest import wait_until
from .distributed import (
    CANCELLED,
    QUEUED,
    RUNNING,
    SKIPPED,
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.slow

POLICIES = (
    ConcurrencyPolicy.ALLOW_ALL,
    ConcurrencyPolicy.BUFFER_ONE,
    ConcurrencyPolicy.CANCEL_OTHER,
)


def test_allow_all_buffer_one_and_cancel_other_across_two_workers(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    c.server("server-a")
    for n in (1, 2):
        c.worker(f"worker-{n}")
    wait_until(lambda: len(c.worker_instances()) == 2, 30, f"workers: {c.logs()}")
    jobs = {
        policy: c.api("POST", "/jobs", json={
            "jobType": "e2e.long", "workerId": "e2e", "cronExpression": "* * * * * *",
            "concurrentExecutionPolicy": int(policy), "jobData": {"seconds": 2.5, "step": 0.5},
        })["id"]
        for policy in POLICIES
    }  # fmt: skip
    most: dict[ConcurrencyPolicy, Counter[str]] = {p: Counter() for p in POLICIES}
    seen: dict[ConcurrencyPolicy, list[dict[str, Any]]] = {}

    def look() -> bool:
        """One look at every job's occurrences; keeps the most seen at once of each."""
        for policy, job_id in jobs.items():
            seen[policy] = c.occurrences(job_id)
            counts = Counter(o["status"] for o in seen[policy])
            high = most[policy]
            high["running"] = max(high["running"], counts[RUNNING])
            high["active"] = max(high["active"], counts[RUNNING] + counts[QUEUED])
        buffered = seen[ConcurrencyPolicy.BUFFER_ONE]
        return (
            most[ConcurrencyPolicy.ALLOW_ALL]["running"] >= 2
            and any(o["status"] == SKIPPED for o in buffered)
            and most[ConcurrencyPolicy.BUFFER_ONE]["active"] == 2
            and any(_displaced(o) for o in seen[ConcurrencyPolicy.CANCEL_OTHER])
        )

    wait_until(look, 30, f"policies not all seen at work: {most} {c.logs()}")

    allow_all = seen[ConcurrencyPolicy.ALLOW_ALL]
    assert all(o["status"] != SKIPPED for o in allow_all), allow_all
    buffer_one = most[ConcurrencyPolicy.BUFFER_ONE]
    assert buffer_one["running"] == 1, buffer_one  # one at a time, whichever worker
    assert buffer_one["active"] == 2, buffer_one  # one running, one waiting: never more
    cancel_other = seen[ConcurrencyPolicy.CANCEL_OTHER]
    assert all(o["status"] != SKIPPED for o in cancel_other), cancel_other
    # The new fire starts at once and the running one is told to stop: the two overlap only
    # until the older one's worker has cancelled it (never three at once).
    assert most[ConcurrencyPolicy.CANCEL_OTHER]["running"] <= 2, most
    started = sorted((o for o in cancel_other if o["startTime"]), key=lambda o: _at(o, "startTime"))
    for older, newer in pairwise(started):  # an older one still running is being cancelled
        if older["endTime"] and _at(older, "endTime") > _at(newer, "startTime"):
            assert _displaced(older), (older, newer)  # overlapped: so it was cancelled


def _at(occurrence: dict[str, Any], field: str) -> datetime:
    return datetime.fromisoformat(occurrence[field])


def _displaced(occurrence: dict[str, Any]) -> bool:
    return occurrence["status"] == CANCELLED and DISPLACED in (occurrence["exception"] or "")
