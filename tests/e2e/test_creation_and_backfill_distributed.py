"""Idempotent creation and backfill in the distributed mode: two `rota server` processes and a
`rota worker` on the real services. A creation repeated with its `Idempotency-Key` on the
other server gets the first answer (the key lives in the shared store, not in a server);
a backfill's runs of past fires complete one after another, oldest first, on the worker."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from .conftest import wait_until
from .distributed import (
    COMPLETED,
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.slow

KEY = "5d0e6a53-0f51-4a43-9d9c-6f2b8f1e7c21"


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_a_repeated_creation_and_a_backfill_across_two_servers(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    servers = [c.server("server-a"), c.server("server-b")]
    c.worker("worker-1")
    wait_until(lambda: len(c.worker_instances()) == 1, 30, f"worker: {c.logs()}")
    hourly = {"jobType": "e2e.quick", "workerId": "e2e", "displayName": "hourly e2e report",
              "cronExpression": "0 * * * *"}  # fmt: skip

    def create(base: str) -> httpx.Response:
        auth = c.session.headers(base)
        return httpx.post(f"{base}/jobs", json=hourly, timeout=15,
                          headers={**auth, "Idempotency-Key": KEY})  # fmt: skip

    first, again = create(servers[0].base), create(servers[1].base)
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    assert (first.headers["Idempotent-Replayed"], again.headers["Idempotent-Replayed"]) == (
        "false",
        "true",
    )
    job = first.json()
    assert again.json()["id"] == job["id"]
    named = c.api("GET", "/jobs", params={"search": "hourly e2e report"})["items"]
    assert [j["id"] for j in named] == [job["id"]]

    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = {"from": (top - timedelta(hours=4)).isoformat(),
              "to": (top - timedelta(hours=1)).isoformat(), "reason": "e2e backfill"}  # fmt: skip
    made = c.api("POST", f"/jobs/{job['id']}/backfill", json=window)
    assert (made["fires"], made["created"]) == (4, 4)

    def runs() -> list[dict[str, Any]]:
        backfilled = set(made["occurrenceIds"])
        return [o for o in c.occurrences(job["id"]) if o["id"] in backfilled]

    wait_until(lambda: all(o["status"] == COMPLETED for o in runs()), 30,
               f"backfilled runs not completed: {c.logs()}")  # fmt: skip
    done = sorted(runs(), key=lambda o: o["scheduledFor"])
    assert [parse(o["scheduledFor"]) for o in done] == [
        top - timedelta(hours=n) for n in (4, 3, 2, 1)
    ]
    for before, after in itertools.pairwise(done):  # one after another, oldest first
        assert parse(after["startTime"]) >= parse(before["endTime"]), (before, after)
