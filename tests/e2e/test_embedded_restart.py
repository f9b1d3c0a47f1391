"""The embedded mode as a user runs it: a real ``rota dev`` process, killed with -9, restarted."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from .conftest import RotaProcess, wait_until

pytestmark = pytest.mark.slow

QUEUED, RUNNING, COMPLETED, SKIPPED, UNKNOWN = 0, 1, 2, 7, 6


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def completed(rota: RotaProcess, job_id: str) -> list[dict[str, object]]:
    return [o for o in rota.occurrences(job_id) if o["status"] == COMPLETED]


def test_every_second_job_survives_kill_9(rota_process: RotaProcess) -> None:
    rota = rota_process
    rota.start()
    job = rota.api(
        "POST",
        "/jobs",
        json={"displayName": "tick", "jobType": "e2e.tick", "cronExpression": "*/1 * * * * *"},
    )
    wait_until(lambda: len(completed(rota, job["id"])) >= 3, 20, "no 3 completed fires")

    # Its logs are recorded too.
    first = completed(rota, job["id"])[-1]
    logs = rota.api("GET", f"/occurrences/{first['id']}/logs")["items"]
    assert any("tick" in line["message"] for line in logs)

    rota.kill9()
    rota.start()
    before = len(completed(rota, job["id"]))
    wait_until(lambda: len(completed(rota, job["id"])) >= before + 3, 20, "schedule did not go on")
    rota.api("PATCH", f"/jobs/{job['id']}", json={"isActive": False})

    def settled() -> bool:
        return all(o["status"] not in (QUEUED, RUNNING) for o in rota.occurrences(job["id"]))

    wait_until(settled, 20, f"occurrences stayed Queued/Running: {rota.logs()}")
    occurrences = rota.occurrences(job["id"])
    fires = sorted(parse(str(o["scheduledFor"])) for o in occurrences)
    # No fire recorded twice, and no second between the first and the last fire is missing:
    # each one ran or is explained by a Skipped occurrence.
    assert len(fires) == len(set(fires))
    span = int((fires[-1] - fires[0]).total_seconds()) + 1
    expected = {fires[0] + timedelta(seconds=i) for i in range(span)}
    assert set(fires) == expected
    for occ in occurrences:
        if occ["status"] == SKIPPED:
            assert occ["skipReason"] in ("misfire", "overlap")


def test_one_time_job_runs_once_at_its_time(rota_process: RotaProcess) -> None:
    rota = rota_process
    rota.start()
    at = datetime.now().astimezone() + timedelta(seconds=2)
    job = rota.api("POST", "/jobs", json={"jobType": "e2e.tick", "executeAt": at.isoformat()})
    wait_until(lambda: len(completed(rota, job["id"])) == 1, 15, "one-time job did not run")
    occ = completed(rota, job["id"])[0]
    assert parse(str(occ["scheduledFor"])) == at
    started = parse(str(occ["startTime"]))
    assert timedelta(0) <= started - at < timedelta(seconds=1)
    assert rota.api("GET", f"/jobs/{job['id']}")["nextRunAt"] is None
    assert len(rota.occurrences(job["id"])) == 1


def test_running_job_killed_is_run_again(rota_process: RotaProcess) -> None:
    rota = rota_process
    rota.start()
    job = rota.api(
        "POST", "/jobs", json={"jobType": "e2e.slow", "executeAt": "2020-01-01T00:00:00Z"}
    )

    def running() -> bool:
        return any(o["status"] == RUNNING for o in rota.occurrences(job["id"]))

    wait_until(running, 15, "slow job never ran")
    rota.kill9()
    rota.start()
    wait_until(lambda: len(completed(rota, job["id"])) == 1, 20, "killed job not run again")
    [occ] = rota.occurrences(job["id"])
    detail = rota.api("GET", f"/occurrences/{occ['id']}")
    assert detail["attempt"] == 2
    transitions = [(c["from"], c["to"]) for c in detail["statusChangeLogs"]]
    assert (RUNNING, UNKNOWN) in transitions
    assert (UNKNOWN, QUEUED) in transitions
    assert transitions[-1][1] == COMPLETED


def test_fires_missed_while_down_are_recorded_as_misfires(rota_process: RotaProcess) -> None:
    rota = rota_process
    threshold = {"ROTA_SCHEDULER__MISFIRE_THRESHOLD_SECONDS": "1"}
    rota.start(**threshold)
    job = rota.api(
        "POST",
        "/jobs",
        json={"jobType": "e2e.tick", "cronExpression": "*/1 * * * * *", "misfirePolicy": "skip"},
    )
    wait_until(lambda: len(completed(rota, job["id"])) >= 2, 20, "no fires before the outage")
    rota.kill9()
    down_at = datetime.now().astimezone()
    time.sleep(4)  # the outage itself: fires are due while nothing runs
    rota.start(**threshold)
    wait_until(
        lambda: any(
            parse(str(o["scheduledFor"])) > down_at + timedelta(seconds=6)
            for o in completed(rota, job["id"])
        ),
        20,
        "schedule did not resume",
    )
    rota.api("PATCH", f"/jobs/{job['id']}", json={"isActive": False})
    occurrences = rota.occurrences(job["id"])
    misfires = [o for o in occurrences if o["skipReason"] == "misfire"]
    assert len(misfires) >= 3, [(o["scheduledFor"], o["status"]) for o in occurrences]
    assert all(o["status"] == SKIPPED for o in misfires)
    fires = sorted(parse(str(o["scheduledFor"])) for o in occurrences)
    assert len(fires) == len(set(fires))
    span = int((fires[-1] - fires[0]).total_seconds()) + 1
    assert set(fires) == {fires[0] + timedelta(seconds=i) for i in range(span)}


def test_sigterm_lets_the_running_job_finish(rota_process: RotaProcess) -> None:
    rota = rota_process
    rota.start()
    job = rota.api(
        "POST", "/jobs", json={"jobType": "e2e.slow", "executeAt": "2020-01-01T00:00:00Z"}
    )

    def running() -> bool:
        return any(o["status"] == RUNNING for o in rota.occurrences(job["id"]))

    wait_until(running, 15, "slow job never ran")
    assert rota.terminate(timeout=15) == 0
    assert "Rota stopped." in rota.logs()
    rota.start()
    [occ] = rota.occurrences(job["id"])
    assert occ["status"] == COMPLETED
    assert occ["attempt"] == 1
