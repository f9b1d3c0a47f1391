"""A fire held by a worker (sent ahead of its due time, claimed ahead) whose claim Redis then
lost (FLUSHALL), and whose worker dies before it starts: RabbitMQ redelivers it to the other
worker, which knew the old claim epoch and so does not run it (it may have run before the
loss). The store settles it (docs/reliability.md, "One run per attempt"): nobody reported it
Running, so it gets its next attempt after the dead-worker silence (5 s), not after the zombie
threshold (30 s here, the default) — and it runs once.

Real ``rota server`` and ``rota worker`` processes on PostgreSQL, RabbitMQ and a Redis of the
test's own (``private_redis``: the flush disturbs no other test)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from .conftest import wait_until
from .distributed import (
    COMPLETED,
    UNKNOWN,
    Cluster,
    cluster,  # noqa: F401  (fixture)
    distributed_env,  # noqa: F401  (fixture)
)
from .faults import (
    FAST,
    now,
    parse,
    private_redis,
    redis_flushall,
    runs_of,
    services_available,
    start_worker,
    try_api,
    wait_workers,
)
from .recovery import Recorder
from .test_faults import _claim_epoch

pytestmark = pytest.mark.slow

THRESHOLD = 30.0
"""The zombie threshold (the default): what a parked fire waited for before."""
SILENCE = 5.0
"""The dead-worker silence (the default): what it waits for now."""
LEAD = 8.0
"""The dispatch lead: the fire is held by its worker this long before it is due."""


@pytest.fixture
def own_redis() -> Iterator[str]:
    with private_redis() as port:
        yield port


@pytest.fixture
def lc(cluster: Cluster, own_redis: str) -> Cluster:  # noqa: F811
    services_available()
    cluster.env.update(FAST)
    cluster.env.update(
        {
            "ROTA_REDIS_URL": f"redis://127.0.0.1:{own_redis}/0",
            "ROTA_SCHEDULER__ZOMBIE_THRESHOLD_SECONDS": str(THRESHOLD),
            "ROTA_SCHEDULER__DISPATCH_LEAD_SECONDS": str(LEAD),
            "ROTA_SCHEDULER__SWEEPER_INTERVAL_SECONDS": "1",
        }
    )
    return cluster


def test_a_fire_redelivered_after_redis_lost_its_claim_runs_long_before_the_zombie_threshold(
    lc: Cluster, own_redis: str, tmp_path: Path, recovery: Recorder
) -> None:
    c = lc
    c.server("server-a")
    runs = tmp_path / "runs"
    # worker-2 sees the claim memory's epoch (kept in its local state), then stops: the fire
    # can only go to worker-1.
    second = start_worker(c, "worker-2")
    wait_until(lambda: _claim_epoch(c, "worker-2"), 30, f"no claim epoch seen: {c.logs()}")
    epoch = _claim_epoch(c, "worker-2")
    assert second.terminate(40) == 0
    first = start_worker(c, "worker-1")
    wait_workers(c, 1)
    wait_until(lambda: _claim_epoch(c, "worker-1") == epoch, 30, f"epoch: {c.logs()}")

    due = now() + timedelta(seconds=LEAD + 6)
    job = c.api("POST", "/jobs", json={
        "jobType": "e2e.record", "workerId": "e2e", "executeAt": due.isoformat(),
        "jobData": {"path": str(runs)},
    })  # fmt: skip

    def occurrence() -> dict[str, object] | None:
        rows = try_api(c, "GET", "/occurrences", params={"jobId": job["id"]})
        return rows["items"][0] if rows and rows["items"] else None

    wait_until(lambda: occurrence() is not None, 20, f"never dispatched: {c.logs()}")
    oid = str(occurrence()["id"])  # type: ignore[index]
    client = redis.Redis(port=int(own_redis))
    claim = f"{c.env['ROTA_NAME_PREFIX']}:claim:{oid}:1"
    try:
        # held by worker-1 and claimed ahead, long before its due time
        wait_until(lambda: client.exists(claim), 20, f"never claimed ahead: {c.logs()}")
        redis_flushall(own_redis)  # the claim is gone
        assert not client.exists(claim)
    finally:
        client.close()
    second = start_worker(c, "worker-2")  # knew the old epoch: it sees the loss
    wait_workers(c, 2)
    first.kill9()  # before the fire is due: RabbitMQ redelivers it to worker-2
    assert now() < due, "too slow to kill the holder before the fire was due"

    def completed() -> dict[str, object] | None:
        row = try_api(c, "GET", f"/occurrences/{oid}")
        return row if row is not None and int(row["status"]) == COMPLETED else None

    wait_until(completed, 60, f"never completed: {c.logs()}")
    done = c.api("GET", f"/occurrences/{oid}")
    late = (parse(done["endTime"]) - due).total_seconds()
    recovery("claim lost + holder killed: the held fire completed after its due time", late)
    ran = [(attempt, pid) for o, attempt, pid in runs_of(runs) if o == oid]
    assert ran == [(2, second.proc.pid)], ran  # attempt 1 never ran; attempt 2 once
    assert done["attempt"] == 2
    changes = done["statusChangeLogs"]
    assert [s["to"] for s in changes].count(COMPLETED) == 1
    (unknown,) = [s for s in changes if s["to"] == UNKNOWN]
    assert "reported running by no worker" in unknown["reason"], changes
    # the dead-worker silence (5 s) left for a holder's Running report on its way; not the
    # zombie threshold (30 s), which it waited for before
    assert SILENCE <= late < THRESHOLD / 2, (late, changes)
    log = second.log.read_text(errors="replace")
    parked = [line for line in log.splitlines() if '"action":"skip_claimed"' in line]
    assert parked, log[-3000:]
    assert all('"owner":null' in line for line in parked), parked
    probe = tmp_path / "probe"  # the loops go on: a new job runs
    c.api("POST", "/jobs", json={
        "jobType": "e2e.record", "workerId": "e2e", "executeAt": now().isoformat(),
        "jobData": {"path": str(probe)},
    })  # fmt: skip
    wait_until(lambda: runs_of(probe), 30, f"no new run: {c.logs()}")
    c.stop()
