"""Status application rules (rota.core.transitions), without a database: the same rules the
store's contract tests check through ``apply_status`` (tests/contract/test_store.py,
test_store_auto_disable.py, test_failed_occurrences.py)."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from rota.core.autodisable import AutoDisableDefaults
from rota.core.ids import new_id
from rota.core.models import FailureType, OccurrenceStatus, StatusRecord
from rota.core.transitions import (
    CURRENT_FIELDS,
    HEARTBEAT,
    Current,
    JobStats,
    StatusBatch,
    Streak,
    apply_records,
    change_reason,
    decide,
    final_failures,
)

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
JOB = new_id()


def current(
    status: S = S.QUEUED,
    attempt: int = 1,
    *,
    job_id: UUID = JOB,
    start_time: datetime | None = None,
    duration_ms: float | None = None,
    last_heartbeat: datetime | None = None,
) -> Current:
    return Current(
        job_id, "sync", "workers", int(status), attempt, start_time, duration_ms, last_heartbeat, T0
    )


def record(occurrence_id: UUID, status: S, at: datetime = T0, **fields: Any) -> StatusRecord:
    return StatusRecord(occurrence_id=occurrence_id, status=status, timestamp=at, **fields)


OCC = new_id()


def one(occ: Current, records: list[StatusRecord]) -> StatusBatch:
    return apply_records({OCC: occ}, records)


def test_current_is_built_from_the_fields_the_store_reads_in_order() -> None:
    parameters = list(inspect.signature(Current).parameters)
    assert tuple(parameters) == CURRENT_FIELDS
    assert current(S.RUNNING).status is S.RUNNING  # a status code becomes the enum


# --- which record wins ------------------------------------------------------------------------


def test_running_then_completed_in_one_batch() -> None:
    occ = current()
    t1, t2 = T0 + SECOND, T0 + 3 * SECOND
    batch = one(
        occ,
        [
            record(OCC, S.RUNNING, t1, instance_id="w-1"),
            record(OCC, S.COMPLETED, t2, result={"sent": 3}, duration_ms=2000.0),
        ],
    )
    assert [(c.from_status, c.to_status, c.attempt) for c in batch.applied] == [
        (S.QUEUED, S.RUNNING, 1),
        (S.RUNNING, S.COMPLETED, 1),
    ]
    assert (batch.applied[0].job_id, batch.applied[0].job_type) == (JOB, "sync")
    assert (batch.applied[0].worker_id, batch.applied[0].instance_id) == ("workers", "w-1")
    assert (batch.ignored, batch.heartbeats) == ([], 0)
    assert occ.status is S.COMPLETED
    assert occ.changed == {
        "status": int(S.COMPLETED),
        "attempt": 1,
        "instance_id": "w-1",
        "start_time": t1,
        "last_heartbeat": t1,
        "end_time": t2,
        "result": {"sent": 3},
        "duration_ms": 2000.0,
        "exception": None,  # a completed run shows no earlier attempt's exception
    }
    assert [(c["to_status"], c["timestamp"], c["reason"]) for c in batch.changes] == [
        (int(S.RUNNING), t1, None),
        (int(S.COMPLETED), t2, None),
    ]
    stats = batch.stats[JOB]
    assert (stats.total, stats.success, stats.failure) == (1, 1, 0)
    assert (stats.duration_sum, stats.duration_count) == (2000.0, 1)


def test_a_final_status_without_a_start_gets_end_minus_duration() -> None:
    occ = current()
    end = T0 + 10 * SECOND
    one(occ, [record(OCC, S.COMPLETED, end, duration_ms=1500.0)])
    assert occ.changed["start_time"] == end - timedelta(milliseconds=1500)
    assert occ.changed["end_time"] == end


def test_ignored_records_late_transition_unknown() -> None:
    occ = current(S.QUEUED, attempt=2)
    ghost = new_id()
    late = record(OCC, S.COMPLETED, attempt=1)
    forbidden = record(OCC, S.QUEUED, attempt=2)
    unknown = record(ghost, S.RUNNING)
    batch = one(occ, [late, forbidden, unknown])
    assert batch.applied == []
    assert [(i.record, i.reason) for i in batch.ignored] == [
        (late, "late"),
        (forbidden, "transition"),
        (unknown, "unknown"),
    ]
    assert (occ.status, occ.attempt, occ.changed) == (S.QUEUED, 2, {})
    assert batch.changes == []


@pytest.mark.parametrize("final", [S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.SKIPPED])
def test_a_final_status_is_final(final: S) -> None:
    occ = current(final)
    batch = one(occ, [record(OCC, S.RUNNING), record(OCC, S.COMPLETED)])
    assert [i.reason for i in batch.ignored] == ["transition", "transition"]
    assert (occ.status, occ.changed, batch.changes) == (final, {}, [])


def test_a_late_running_after_completed_is_ignored() -> None:
    occ = current()
    batch = one(occ, [record(OCC, S.COMPLETED, T0 + MINUTE), record(OCC, S.RUNNING, T0)])
    assert [c.to_status for c in batch.applied] == [S.COMPLETED]
    assert [(i.record.status, i.reason) for i in batch.ignored] == [(S.RUNNING, "transition")]
    assert occ.status is S.COMPLETED


def test_running_on_running_is_a_heartbeat_that_only_moves_forward() -> None:
    t1, t2 = T0 + SECOND, T0 + 9 * SECOND
    occ = current(S.RUNNING, start_time=t1, last_heartbeat=t1)
    assert decide(occ, record(OCC, S.RUNNING, t2)) == HEARTBEAT
    batch = one(occ, [record(OCC, S.RUNNING, t2), record(OCC, S.RUNNING, t1)])
    assert (batch.heartbeats, batch.applied, batch.ignored) == (2, [], [])
    assert occ.changed == {"last_heartbeat": t2}
    assert (occ.status, occ.start_time) == (S.RUNNING, t1)
    assert batch.changes == []


def test_running_of_a_newer_attempt_on_running_is_not_a_heartbeat() -> None:
    occ = current(S.RUNNING)
    assert decide(occ, record(OCC, S.RUNNING, attempt=2)) == "transition"


# --- retries and superseded attempts ----------------------------------------------------------


def test_failed_with_retry_at_requeues_the_next_attempt_due_then() -> None:
    retry_at = T0 + MINUTE
    occ = current()
    batch = one(
        occ,
        [
            record(OCC, S.RUNNING, instance_id="w-1"),
            record(OCC, S.FAILED, T0 + SECOND, retry_at=retry_at, exception="boom"),
        ],
    )
    assert [(c.from_status, c.to_status, c.attempt) for c in batch.applied] == [
        (S.QUEUED, S.RUNNING, 1),
        (S.RUNNING, S.QUEUED, 2),
    ]
    assert (occ.status, occ.attempt) == (S.QUEUED, 2)
    assert occ.changed["due_at"] == retry_at
    assert occ.changed["exception"] == "boom"
    for cleared in ("dispatched_at", "end_time", "start_time", "last_heartbeat", "duration_ms"):
        assert occ.changed[cleared] is None
    assert (occ.start_time, occ.last_heartbeat, occ.duration_ms) == (None, None, None)
    assert batch.changes[-1]["reason"] == "retry"
    assert batch.stats == {}  # a retried attempt is not an execution yet


def test_reports_of_a_superseded_attempt_are_late() -> None:
    occ = current(S.QUEUED, attempt=2)  # attempt 1 failed and was requeued
    batch = one(
        occ,
        [
            record(OCC, S.RUNNING, attempt=1),
            record(OCC, S.COMPLETED, attempt=1),
            record(OCC, S.RUNNING, attempt=2),
            record(OCC, S.COMPLETED, attempt=2),
        ],
    )
    assert [i.reason for i in batch.ignored] == ["late", "late"]
    assert [(c.to_status, c.attempt) for c in batch.applied] == [
        (S.RUNNING, 2),
        (S.COMPLETED, 2),
    ]
    assert (occ.status, occ.attempt) == (S.COMPLETED, 2)


def test_failed_with_retry_at_on_a_final_occurrence_is_a_transition() -> None:
    occ = current(S.CANCELLED)
    assert decide(occ, record(OCC, S.FAILED, retry_at=T0 + MINUTE)) == "transition"


def test_a_zombie_is_requeued_as_a_new_attempt_due_at_the_record_time() -> None:
    at = T0 + MINUTE
    occ = current(S.RUNNING)
    batch = one(
        occ, [record(OCC, S.UNKNOWN, at, exception="lost"), record(OCC, S.QUEUED, at, attempt=2)]
    )
    assert [c.to_status for c in batch.applied] == [S.UNKNOWN, S.QUEUED]
    assert (occ.status, occ.attempt, occ.changed["due_at"]) == (S.QUEUED, 2, at)


def test_a_requeued_zombie_that_completes_drops_the_zombie_message() -> None:
    at = T0 + MINUTE
    occ = current(S.RUNNING)
    lost = record(OCC, S.UNKNOWN, at, exception="no heartbeat", failure_type=FailureType.ZOMBIE)
    batch = one(occ, [lost, record(OCC, S.QUEUED, at, attempt=2)])
    assert occ.changed["exception"] == "no heartbeat"  # while it waits: why attempt 2
    assert batch.changes[0]["reason"] == "zombie: no heartbeat"  # the history keeps why
    one(occ, [record(OCC, S.RUNNING, at, attempt=2), record(OCC, S.COMPLETED, at, attempt=2)])
    assert (occ.status, occ.changed["exception"]) == (S.COMPLETED, None)


def test_a_retried_occurrence_that_completes_drops_the_failed_attempt_s_exception() -> None:
    occ = current(S.RUNNING)
    one(occ, [record(OCC, S.FAILED, retry_at=T0 + MINUTE, exception="boom")])
    one(occ, [record(OCC, S.COMPLETED, T0 + MINUTE, attempt=2)])
    assert occ.changed["exception"] is None


def test_an_applied_change_says_whether_its_job_queues_its_occurrences() -> None:
    queue = Current(JOB, "sync", None, int(S.RUNNING), 1, None, None, None, T0, 1)
    [ended] = one(queue, [record(OCC, S.COMPLETED)]).applied
    assert ended.queue_policy  # its end may release the next one
    [other] = one(current(S.RUNNING), [record(OCC, S.COMPLETED)]).applied
    assert not other.queue_policy


def test_queued_of_the_same_attempt_is_a_transition() -> None:
    assert decide(current(S.UNKNOWN), record(OCC, S.QUEUED, attempt=1)) == "transition"


# --- reasons and final failures ---------------------------------------------------------------


def test_the_reason_recorded_with_a_change() -> None:
    failed = record(OCC, S.FAILED, failure_type=FailureType.RETRIES_EXHAUSTED)
    assert change_reason(failed, S.FAILED) == "retries_exhausted"
    retried = record(OCC, S.FAILED, retry_at=T0 + MINUTE, failure_type=FailureType.PERMANENT)
    assert change_reason(retried, S.QUEUED) == "retry"
    assert change_reason(record(OCC, S.CANCELLED, exception="by alice"), S.CANCELLED) == (
        "by alice"
    )
    assert change_reason(record(OCC, S.COMPLETED), S.COMPLETED) is None


def test_final_failures_of_a_batch_with_their_failure_type() -> None:
    zombie, exhausted, timed_out, permanent, done, retried = (new_id() for _ in range(6))
    batch = apply_records(
        {
            zombie: current(S.UNKNOWN),
            exhausted: current(S.RUNNING),
            timed_out: current(S.RUNNING),
            permanent: current(S.RUNNING, attempt=3),
            done: current(S.RUNNING),
            retried: current(S.RUNNING),
        },
        [
            record(zombie, S.FAILED, T0, exception="zombie: x"),
            record(exhausted, S.FAILED, T0 + SECOND),
            record(timed_out, S.TIMED_OUT, T0 + 2 * SECOND),
            record(permanent, S.FAILED, T0, attempt=3, failure_type=FailureType.PERMANENT),
            record(done, S.COMPLETED),
            record(retried, S.FAILED, retry_at=T0 + MINUTE),
        ],
    )
    assert final_failures(batch.changes) == {
        zombie: (FailureType.ZOMBIE, 1, T0),
        exhausted: (FailureType.RETRIES_EXHAUSTED, 1, T0 + SECOND),
        timed_out: (FailureType.TIMED_OUT, 1, T0 + 2 * SECOND),
        permanent: (FailureType.PERMANENT, 3, T0),
    }


# --- statistics -------------------------------------------------------------------------------


def test_statistics_deltas_by_job() -> None:
    occs = [new_id() for _ in range(7)]
    other_job = new_id()
    state = {o: current() for o in occs[:6]} | {occs[6]: current(job_id=other_job)}
    state[occs[5]] = current(S.UNKNOWN)
    batch = apply_records(
        state,
        [
            record(occs[0], S.COMPLETED, duration_ms=100.0),
            record(occs[1], S.COMPLETED),
            record(occs[2], S.FAILED, failure_type=FailureType.RETRIES_EXHAUSTED),
            record(occs[3], S.TIMED_OUT),
            record(occs[4], S.CANCELLED),
            record(occs[5], S.FAILED),
            record(occs[6], S.COMPLETED, duration_ms=400.0),
        ],
    )
    stats = batch.stats[JOB]
    assert (stats.total, stats.success, stats.failure) == (6, 2, 3)
    assert (stats.duration_sum, stats.duration_count) == (100.0, 1)
    assert [failed for failed, _, _ in stats.outcomes] == [False, False, True, True, True]
    assert (stats.only_successes, stats.any_failure) == (False, True)
    healthy = batch.stats[other_job]
    assert (healthy.total, healthy.success, healthy.duration_sum) == (1, 1, 400.0)
    assert (healthy.only_successes, healthy.any_failure) == (True, False)
    assert batch.failing_jobs == [JOB]


def test_a_cancellation_counts_as_an_execution_but_not_as_an_outcome() -> None:
    stats = JobStats()
    stats.count(S.CANCELLED, None, T0, None)
    assert (stats.total, stats.success, stats.failure, stats.outcomes) == (1, 0, 0, [])
    assert (stats.only_successes, stats.any_failure) == (False, False)


# --- the auto-disable streak ------------------------------------------------------------------

DEFAULTS = AutoDisableDefaults(3, 600.0, None)


def streak(**state: Any) -> Streak:
    values: dict[str, Any] = {
        "threshold": None,
        "window_seconds": None,
        "consecutive_failures": 0,
        "last_failure_at": None,
        "is_active": True,
        "next_run_at": T0 + MINUTE,
        "probing": False,
        "disabled_reason": None,
        "disabled_at": None,
    }
    values.update(state)
    return Streak.of(DEFAULTS, **values)


def test_failures_count_and_a_success_resets() -> None:
    s = streak()
    s.fold_all([(True, T0, "boom"), (True, T0 + MINUTE, "boom")])
    assert (s.count, s.last_failure_at, s.disabled_now) == (2, T0 + MINUTE, False)
    s.fold(False, T0 + 2 * MINUTE, None)
    assert (s.count, s.is_active, s.disabled_reason) == (0, True, None)


def test_a_failure_after_the_window_starts_a_new_count() -> None:
    s = streak()
    s.fold_all([(True, T0, "boom"), (True, T0 + 5 * MINUTE, "boom"), (True, T0 + 16 * MINUTE, "x")])
    assert (s.count, s.is_active) == (1, True)


def test_the_threshold_disables_once_with_a_reason_and_a_time() -> None:
    s = streak()
    s.fold_all(
        [
            (True, T0, "boom"),
            (True, T0 + MINUTE, "boom"),
            (True, T0 + 2 * MINUTE, "KeyError: 'customer'\nTraceback …"),
        ]
    )
    assert s.disabled_now
    assert (s.is_active, s.next_run_at, s.disabled_at) == (False, None, T0 + 2 * MINUTE)
    assert s.disabled_reason == "3 consecutive failures within 10 min; last: KeyError: 'customer'"
    # A further failure of an occurrence still in flight counts, but disables nothing new.
    later = streak(
        consecutive_failures=3,
        last_failure_at=T0 + 2 * MINUTE,
        is_active=False,
        next_run_at=None,
        disabled_reason=s.disabled_reason,
        disabled_at=T0 + 2 * MINUTE,
    )
    later.fold(True, T0 + 3 * MINUTE, "boom")
    assert (later.count, later.disabled_now, later.disabled_at) == (4, False, T0 + 2 * MINUTE)


def test_one_batch_with_many_outcomes_is_folded_in_order() -> None:
    occs = [new_id() for _ in range(5)]
    batch = apply_records(
        {o: current(S.RUNNING) for o in occs},
        [
            record(o, status, T0 + i * MINUTE, exception="ValueError: boom")
            for i, (o, status) in enumerate(
                zip(occs, [S.FAILED, S.COMPLETED, S.FAILED, S.TIMED_OUT, S.FAILED], strict=True)
            )
        ],
    )
    s = streak()
    s.fold_all(batch.stats[JOB].outcomes)
    assert (s.count, s.is_active, s.disabled_at) == (3, False, T0 + 4 * MINUTE)


def test_the_jobs_threshold_and_window_override_the_defaults_and_zero_never_disables() -> None:
    strict = streak(threshold=1)
    strict.fold(True, T0, "ValueError: boom")
    assert strict.disabled_reason == "1 consecutive failures within 10 min; last: ValueError: boom"
    never = streak(threshold=0)
    never.fold_all([(True, T0 + i * MINUTE, "boom") for i in range(5)])
    assert (never.count, never.is_active, never.disabled_now) == (5, True, False)
    wide = streak(window_seconds=7200.0)
    wide.fold_all([(True, T0 + i * 50 * MINUTE, "boom") for i in range(3)])
    assert (wide.count, wide.is_active) == (3, False)
    assert wide.disabled_reason is not None
    assert "within 120 min" in wide.disabled_reason


def test_a_probe_success_enables_the_job_and_a_failure_disables_it_again() -> None:
    disabled_at = T0 - timedelta(hours=1)
    state = {
        "is_active": True,
        "probing": True,
        "consecutive_failures": 3,
        "last_failure_at": disabled_at,
        "disabled_reason": "3 consecutive failures within 10 min; last: boom",
        "disabled_at": disabled_at,
    }
    good = streak(**state)
    good.fold(False, T0, None)
    assert (good.is_active, good.probing, good.count) == (True, False, 0)
    assert (good.disabled_reason, good.disabled_at, good.disabled_now) == (None, None, False)
    bad = streak(**state)
    bad.fold(True, T0, "OSError: still down")
    assert bad.disabled_now
    assert (bad.is_active, bad.probing, bad.next_run_at, bad.disabled_at) == (
        False,
        False,
        None,
        T0,
    )
    assert bad.disabled_reason == "probe run failed after the cooldown; last: OSError: still down"


def test_a_completion_while_disabled_resets_the_count_but_keeps_it_disabled() -> None:
    reason = "3 consecutive failures within 10 min; last: boom"
    s = streak(
        is_active=False,
        next_run_at=None,
        consecutive_failures=3,
        disabled_reason=reason,
        disabled_at=T0,
    )
    s.fold(False, T0 + MINUTE, None)
    assert (s.count, s.is_active, s.disabled_reason, s.disabled_now) == (0, False, reason, False)


def test_a_retried_attempt_and_a_cancellation_leave_the_streak_alone() -> None:
    retried, cancelled = new_id(), new_id()
    batch = apply_records(
        {retried: current(S.RUNNING), cancelled: current(S.RUNNING)},
        [record(retried, S.FAILED, retry_at=T0 + MINUTE), record(cancelled, S.CANCELLED)],
    )
    assert batch.stats[JOB].outcomes == []
    assert batch.failing_jobs == []


# --- a Running report folded into the final one -----------------------------------------------


def history(batch: StatusBatch) -> list[tuple[int | None, int, datetime, int]]:
    return [(c["from_status"], c["to_status"], c["timestamp"], c["attempt"]) for c in batch.changes]


@pytest.mark.parametrize("final", [S.COMPLETED, S.FAILED, S.TIMED_OUT])
def test_a_folded_run_shows_queued_running_and_the_end_each_at_its_time(final: S) -> None:
    occ = current()
    end = T0 + 10 * SECOND
    batch = one(occ, [record(OCC, final, end, duration_ms=2500.0, instance_id="w-1")])
    start = end - timedelta(milliseconds=2500)
    assert history(batch) == [
        (int(S.QUEUED), int(S.RUNNING), start, 1),
        (int(S.RUNNING), int(final), end, 1),
    ]
    assert (occ.changed["start_time"], occ.changed["end_time"]) == (start, end)
    # what was applied is still the one record (events, metrics, statistics)
    assert [(c.from_status, c.to_status) for c in batch.applied] == [(S.QUEUED, final)]
    assert batch.stats[JOB].total == 1


def test_a_folded_run_starts_at_the_time_of_the_running_report_it_carries() -> None:
    """The worker sends the folded Running report's time along (``started_at``): that is the
    start, as it would have been had the Running report been sent on its own; the duration
    (the handler's own run time) is kept as it is."""
    occ = current()
    started, end = T0 + 7 * SECOND, T0 + 10 * SECOND
    folded = record(
        OCC, S.COMPLETED, end, duration_ms=2500.0, instance_id="w-1", started_at=started
    )
    batch = one(occ, [folded])
    assert history(batch) == [
        (int(S.QUEUED), int(S.RUNNING), started, 1),
        (int(S.RUNNING), int(S.COMPLETED), end, 1),
    ]
    assert (occ.changed["start_time"], occ.changed["duration_ms"]) == (started, 2500.0)


def test_a_folded_failed_attempt_with_a_retry_shows_its_run() -> None:
    occ = current()
    end = T0 + 3 * SECOND
    batch = one(
        occ,
        [record(OCC, S.FAILED, end, duration_ms=1000.0, instance_id="w-1", retry_at=T0 + MINUTE)],
    )
    assert history(batch) == [
        (int(S.QUEUED), int(S.RUNNING), end - SECOND, 1),
        (int(S.RUNNING), int(S.QUEUED), end, 2),
    ]
    assert batch.changes[-1]["reason"] == "retry"
    assert (occ.status, occ.attempt) == (S.QUEUED, 2)


def test_reports_of_no_run_add_no_running_step() -> None:
    unrun, cancelled, server, running = (new_id() for _ in range(4))
    batch = apply_records(
        {
            unrun: current(),
            cancelled: current(),
            server: current(),
            running: current(S.RUNNING, start_time=T0),
        },
        [
            # the worker could not run it: no duration
            record(unrun, S.FAILED, instance_id="w-1", failure_type=FailureType.UNKNOWN_JOB_TYPE),
            # cancelled before it started
            record(cancelled, S.CANCELLED, duration_ms=0.0, instance_id="w-1", exception="x"),
            # the scheduler's own record (no instance)
            record(server, S.TIMED_OUT, duration_ms=5.0),
            # Running was applied earlier: nothing implied
            record(running, S.COMPLETED, T0 + SECOND, duration_ms=1000.0, instance_id="w-1"),
        ],
    )
    assert [(c["from_status"], c["to_status"]) for c in batch.changes] == [
        (int(S.QUEUED), int(S.FAILED)),
        (int(S.QUEUED), int(S.CANCELLED)),
        (int(S.QUEUED), int(S.TIMED_OUT)),
        (int(S.RUNNING), int(S.COMPLETED)),
    ]


def test_the_final_failure_of_a_folded_run_keeps_its_failure_type() -> None:
    occ = current()
    batch = one(
        occ,
        [record(OCC, S.FAILED, T0, duration_ms=10.0, instance_id="w-1")],
    )
    assert final_failures(batch.changes) == {OCC: (FailureType.RETRIES_EXHAUSTED, 1, T0)}
