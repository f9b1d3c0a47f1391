"""Each job goes to exactly one worker group (issue 32), on the real services: two groups,
``aud`` and ``prio``, and the deploy that moves job type ``route.moved`` from ``aud`` to
``prio`` while ``aud``'s queue still holds some of its fires.

Before the fix, every group ever bound to a type got a copy of each of its jobs, a job's
``workerId`` did not pin it, and after such a deploy the old group's queue went on receiving and
claiming the type and failed the runs as ``unknown_job_type`` (dead letters counted towards
auto-disable) while the right group was live."""

from __future__ import annotations

import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from .conftest import wait_until
from .distributed import Cluster, cluster, distributed_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
BEFORE, AFTER, PRIO = (
    HERE / f for f in ("routing_jobs.py", "routing_jobs_after.py", "routing_jobs_prio.py")
)
COMPLETED, FAILED = 2, 3


def _groups(c: Cluster) -> dict[str, set[str]]:
    """Live groups -> the job types their instances declare."""
    try:
        items = c.api("GET", "/workers")["items"]
    except AssertionError:
        return {}
    return {g["workerId"]: {t for i in g["instances"] for t in i["jobTypes"]} for g in items}


def _create(c: Cluster, count: int, **fields: Any) -> list[str]:
    now = datetime.now(UTC).isoformat()
    body = {"jobType": "route.moved", "executeAt": now, **fields}
    return [
        c.api("POST", "/jobs", json={**body, "displayName": f"r{i}"})["id"] for i in range(count)
    ]


def _runs(c: Cluster, job_ids: list[str]) -> list[dict[str, Any]]:
    return [o for j in job_ids for o in c.occurrences(j)]


def _all_completed(c: Cluster, job_ids: list[str]) -> bool:
    runs = _runs(c, job_ids)
    return len(runs) == len(job_ids) and all(o["status"] == COMPLETED for o in runs)


def test_a_job_goes_to_one_group_and_a_moved_type_follows_the_deploy(
    cluster: Cluster,  # noqa: F811
) -> None:
    cluster.server("server")
    # ``aud`` takes most of the unpinned fires (16 slots against 1), so its queue surely
    # holds some when it is frozen below.
    aud = cluster.worker("aud-old", worker_id="aud", concurrency=16, jobs=BEFORE)
    cluster.worker("prio", worker_id="prio", concurrency=1, jobs=PRIO)
    wait_until(lambda: set(_groups(cluster)) == {"aud", "prio"}, 30, f"workers: {cluster.logs()}")

    # A job naming its group runs there only, though both groups run its type.
    pinned = _create(cluster, 6, workerId="prio")
    wait_until(lambda: _all_completed(cluster, pinned), 60, f"pinned runs: {cluster.logs()}")
    for run in _runs(cluster, pinned):
        assert run["instanceId"].startswith("prio-"), run
        assert run["attempt"] == 1

    # The deploy: ``aud`` stops (frozen, then killed) while fires of the type are in its
    # queue; its new instances no longer declare the type.
    aud.proc.send_signal(signal.SIGSTOP)
    backlog = _create(cluster, 10)

    def sent() -> bool:
        runs = _runs(cluster, backlog)
        details = [cluster.api("GET", f"/occurrences/{o['id']}") for o in runs]
        return len(runs) == 10 and all(d["dispatchedAt"] is not None for d in details)

    wait_until(sent, 30, f"the backlog was not sent: {cluster.logs()}")
    left_in_aud = [o for o in _runs(cluster, backlog) if o["status"] != COMPLETED]
    assert left_in_aud, "no fire waited in aud's queue: the deploy was not exercised"
    aud.kill9()
    cluster.worker("aud-new", worker_id="aud", concurrency=16, jobs=AFTER)
    wait_until(
        lambda: any(
            i["instanceId"].startswith("aud-") and "route.moved" not in i["jobTypes"]
            for g in cluster.api("GET", "/workers")["items"]
            for i in g["instances"]
        ),
        30,
        f"aud's new instance did not register: {cluster.logs()}",
    )

    # What waited in aud's queue is handed to ``prio`` and runs there, not failed.
    wait_until(lambda: _all_completed(cluster, backlog), 90, f"backlog: {cluster.logs()}")
    for run in _runs(cluster, backlog):
        assert run["instanceId"].startswith("prio-"), run
        assert run["attempt"] == 1, run
    handed = [
        o
        for o in left_in_aud
        if any("sent again" in line["message"] for line in cluster.logs_of(o["id"]))
    ]
    assert handed, "no run says it was sent on from aud"

    # From the new instance's registration on, ``aud`` gets no more of the type.
    after = _create(cluster, 5)
    wait_until(lambda: _all_completed(cluster, after), 60, f"after the deploy: {cluster.logs()}")
    for run in _runs(cluster, after):
        assert run["instanceId"].startswith("prio-"), run
        assert not any("sent again" in line["message"] for line in cluster.logs_of(run["id"]))

    failed = cluster.api("GET", "/failed-occurrences", params={"limit": 100})["items"]
    ours = set(pinned + backlog + after)
    assert [f for f in failed if f["jobId"] in ours] == [], "a run failed as a dead letter"
    for job_id in backlog:
        assert cluster.api("GET", f"/jobs/{job_id}").get("consecutiveFailures", 0) == 0
