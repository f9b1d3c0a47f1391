"""The chaos soak's two-minute run (issue 14, item 5; :mod:`tests.e2e.soak`): two servers and
two workers on the real PostgreSQL, RabbitMQ and a private Redis, a mixed workload and every
kind of fault, then the guarantees checked. ``ROTA_SOAK_SEED`` replays a run; the seed is
printed either way. Longer runs: ``make soak MINUTES=N``."""

from __future__ import annotations

import os
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from .distributed import CANCELLED, COMPLETED, FAILED, RUNNING, SKIPPED
from .faults import services_available
from .recovery import Recorder
from .soak import (
    FAULT_KINDS,
    SHARED_FAULTS,
    Fault,
    Soak,
    SoakConfig,
    evaluate,
    run_soak,
    write_report,
)

MINUTES = 2.0


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.exclusive
@pytest.mark.timeout(600)  # set-up ~20 s, 120 s of soak, a drain of up to 180 s, teardown
def test_chaos_soak_two_minutes(tmp_path: Path, recovery: Recorder) -> None:
    services_available()
    seed = int(os.environ.get("ROTA_SOAK_SEED") or random.SystemRandom().randrange(2**31))
    print(f"chaos soak seed {seed} (ROTA_SOAK_SEED={seed} replays it)")
    report = run_soak(SoakConfig(minutes=MINUTES, seed=seed), tmp_path)
    write_report(report, tmp_path)
    for fault in report.faults:
        if fault.recovery is not None:
            recovery(f"soak {fault.kind} at {fault.started:.0f} s: work flows again",
                     fault.recovery)  # fmt: skip
    kinds = report.faults_by_kind()
    assert len(kinds) == len(SoakConfig.faults), f"not every kind of fault was injected: {kinds}"
    assert report.figures["fires"] >= 4 * 60, "the cron load did not run"
    failed = {name: found[:10] for name, found in report.problems.items() if found}
    assert not failed, f"seed {seed}: {failed}\n{report.table()}"


# --- the checks themselves, on made-up observations: each one can fail --------------------------

T0 = datetime(2026, 11, 25, 0, 0, 0, tzinfo=UTC)
KILLED = 4242
"""The pid of a worker the made-up soak killed with -9."""


def job(kind: str, *, cron: bool = False) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "job_type": "e2e.soak",
        "cron_expression": "* * * * * *" if cron else None,
        "job_data": {"path": "runs", "kind": kind},
        "created_at": T0 - timedelta(seconds=0.5),
    }


def occ(j: dict[str, Any], second: int, status: int = COMPLETED, **kw: Any) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "job_id": j["id"],
        "scheduled_for": T0 + timedelta(seconds=second),
        "status": status,
        "skip_reason": None,
        "attempt": 1,
        "exception": None,
        "completions": 1 if status == COMPLETED else 0,
        "failure_type": None,
        **kw,
    }


class Made:
    """A made-up soak: a cron job that fired every second for 10 s, a burst job, and the
    handler records of a clean run; each test breaks one thing."""

    def __init__(self) -> None:
        self.cron = job("cron", cron=True)
        self.burst = job("burst")
        self.occurrences = [occ(self.cron, s) for s in range(10)]
        self.occurrences.append(occ(self.burst, 3))
        self.records: list[tuple[str, str, int, int]] = []
        for o in self.occurrences:
            self.records += [("start", str(o["id"]), 1, 100), ("end", str(o["id"]), 1, 100)]
        self.disabled = {str(self.cron["id"]): T0 + timedelta(seconds=10)}

    def problems(self) -> dict[str, list[str]]:
        _, problems = evaluate(
            [self.cron, self.burst], self.occurrences, self.records, {KILLED}, self.disabled
        )
        return {name: found for name, found in problems.items() if found}


def test_a_clean_made_up_soak_passes_every_check() -> None:
    assert Made().problems() == {}


def test_a_cron_second_without_an_occurrence_is_a_lost_fire() -> None:
    m = Made()
    del m.occurrences[4]
    assert list(m.problems()) == ["no fire lost"]


def test_a_cron_job_that_stopped_firing_long_before_its_disable_lost_fires() -> None:
    m = Made()
    m.disabled[str(m.cron["id"])] = T0 + timedelta(seconds=40)
    assert list(m.problems()) == ["no fire lost"]


def test_a_one_time_job_that_never_fired_is_lost() -> None:
    m = Made()
    m.occurrences.pop()
    assert list(m.problems()) == ["no fire lost"]


def test_a_skipped_fire_with_its_reason_is_explained_not_lost() -> None:
    m = Made()
    m.occurrences[5] = occ(m.cron, 5, SKIPPED, skip_reason="misfire")
    m.records = [r for r in m.records if r[1] != str(m.occurrences[5]["id"])]
    assert m.problems() == {}
    m.occurrences[5]["skip_reason"] = None
    assert list(m.problems()) == ["every occurrence finished or explained"]


def test_the_same_attempt_started_in_two_processes_is_a_double() -> None:
    m = Made()
    oid = str(m.occurrences[2]["id"])
    m.records.insert(1, ("start", oid, 1, 200))  # a redelivered copy on the other worker
    assert list(m.problems()) == ["no attempt started twice"]


def test_two_handler_completions_or_two_stored_completions_are_a_double() -> None:
    m = Made()
    oid = str(m.occurrences[2]["id"])
    m.records += [("start", oid, 2, 200), ("end", oid, 2, 200)]
    assert list(m.problems()) == ["no fire completed twice"]
    m = Made()
    m.occurrences[2]["completions"] = 2
    assert list(m.problems()) == ["no fire completed twice"]


def test_a_run_whose_report_died_with_its_process_may_run_again() -> None:
    """Killed after its handler ended but before its report left, an attempt is run again as
    the next one (at-least-once): two handler ends, not a double. The same without the kill,
    or a stored second completion, still is one."""
    m = Made()
    oid = str(m.occurrences[2]["id"])
    m.records = [r for r in m.records if r[1] != oid]
    m.records += [("start", oid, 1, KILLED), ("end", oid, 1, KILLED)]
    m.records += [("start", oid, 2, 200), ("end", oid, 2, 200)]
    assert m.problems() == {}
    m.occurrences[2]["completions"] = 2
    assert list(m.problems()) == ["no fire completed twice"]
    m = Made()
    oid = str(m.occurrences[2]["id"])
    m.records = [r for r in m.records if r[1] != oid]
    m.records += [("start", oid, 2, KILLED), ("end", oid, 2, KILLED)]  # its last attempt
    m.records += [("start", oid, 1, 200), ("end", oid, 1, 200)]
    assert list(m.problems()) == ["no fire completed twice"]


def test_an_occurrence_left_running_or_failed_for_no_reason_is_unexplained() -> None:
    m = Made()
    m.occurrences[-1].update(status=RUNNING, completions=0)
    m.records = m.records[:-1]
    assert list(m.problems()) == ["every occurrence finished or explained"]
    m = Made()
    m.occurrences[-1].update(status=FAILED, completions=0, failure_type="retries_exhausted")
    assert list(m.problems()) == ["every occurrence finished or explained"]
    m.occurrences[-1]["failure_type"] = "zombie"  # requeues used up: a dead letter says why
    assert m.problems() == {}


def test_an_attempt_cut_short_by_a_kill_needs_a_new_recorded_attempt() -> None:
    m = Made()
    oid = str(m.occurrences[-1]["id"])
    m.records = [*m.records[:-2], ("start", oid, 1, KILLED)]
    m.occurrences[-1].update(status=COMPLETED, attempt=2)
    # the store says Completed, but no attempt after the killed one was ever started
    problems = m.problems()
    assert "a cut-short attempt gets a new attempt" in problems
    m.records += [("start", oid, 2, 100), ("end", oid, 2, 100)]  # at-least-once: not a double
    assert m.problems() == {}


def test_a_cancelled_occurrence_needs_no_new_attempt_and_only_cancel_jobs_are_cancelled() -> None:
    m = Made()
    cancel = job("cancel")
    o = occ(cancel, 4, CANCELLED)
    m.occurrences.append(o)
    m.records += [("start", str(o["id"]), 1, KILLED)]
    _, problems = evaluate(
        [m.cron, m.burst, cancel], m.occurrences, m.records, {KILLED}, m.disabled
    )
    assert not any(problems.values()), problems
    m.occurrences[0].update(status=CANCELLED, completions=0)
    assert "every occurrence finished or explained" in m.problems()


# --- the fault schedule --------------------------------------------------------------------------


def schedule(seed: int, count: int, **config: Any) -> list[str]:
    """The first ``count`` kinds of fault a soak with ``seed`` injects (as if each was)."""
    soak = Soak(None, SoakConfig(minutes=1, seed=seed, **config), Path("runs"), "0")  # type: ignore[arg-type]
    kinds = []
    for kind in soak.fault_rounds():
        soak.faults.append(Fault(kind, "-", 0.0, 0.0))
        kinds.append(kind)
        if len(kinds) == count:
            break
    return kinds


def test_the_seed_fixes_the_fault_schedule_and_every_round_has_every_kind() -> None:
    first = schedule(5, 3 * len(FAULT_KINDS))
    assert first == schedule(5, 3 * len(FAULT_KINDS))
    assert first != schedule(6, 3 * len(FAULT_KINDS))
    for n in range(3):
        assert sorted(first[n * len(FAULT_KINDS) : (n + 1) * len(FAULT_KINDS)]) == sorted(
            FAULT_KINDS
        )


def test_max_shared_caps_the_restarts_of_the_shared_services() -> None:
    kinds = schedule(5, 30, max_shared=1)
    assert sum(1 for k in kinds if k in SHARED_FAULTS) == 1
    assert schedule(5, 10, faults=SHARED_FAULTS, max_shared=0) == []
