"""`rota worker` with no options but its modules, as a first deploy starts it: it joins the
group `default` with `rota dev`'s concurrency, runs jobs that name no group, answers an
orchestrator's health probes, and keeps its state in the user's state directory, not in the
directory it was started from."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from .conftest import HERE, wait_until
from .distributed import Cluster, Proc, cluster, distributed_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

COMPLETED = 2


def test_a_worker_started_with_only_its_modules(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster.server("server")
    env = {k: v for k, v in cluster.env.items() if k != "ROTA_DATA_DIR"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    started_in = tmp_path / "cwd"
    started_in.mkdir()
    worker = Proc(["worker", str(HERE / "jobs.py")], env, tmp_path / "worker.log", cwd=started_in)
    cluster.procs.append(worker)
    wait_until(lambda: cluster.worker_instances() != [], 30, f"no worker: {cluster.logs()}")

    [group] = cluster.api("GET", "/workers")["items"]
    assert (group["workerId"], group["capacity"]) == ("default", 32)
    job = cluster.api("POST", "/jobs", json={"jobType": "e2e.tick", "cronExpression": "* * * * *"})
    run = cluster.api("POST", f"/jobs/{job['id']}/trigger", json={"reason": "defaults"})

    def completed() -> bool:
        return any(
            o["id"] == run["id"] and o["status"] == COMPLETED
            for o in cluster.occurrences(job["id"])
        )

    wait_until(completed, 30, f"the run on the default group: {cluster.logs()}")

    found = re.search(r"health on http://[^:]+:(\d+)", worker.log.read_text())
    assert found is not None, worker.tail()
    probe = f"http://127.0.0.1:{found.group(1)}/health"
    assert httpx.get(f"{probe}/live", timeout=5).status_code == 200
    ready = httpx.get(f"{probe}/ready", timeout=5)
    assert (ready.status_code, ready.json()["workerId"]) == (200, "default")

    assert (tmp_path / "state" / "rota" / "workers" / "default").is_dir()
    assert list(started_in.iterdir()) == []  # nothing written where it was started
