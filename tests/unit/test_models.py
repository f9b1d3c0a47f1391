"""The status transition table and the domain records."""

from __future__ import annotations

import itertools

import pytest

from rota.core.ids import bucket_of, new_id
from rota.core.models import TRANSITIONS, Job, OccurrenceStatus, can_transition

S = OccurrenceStatus

ALLOWED = {
    (S.QUEUED, S.RUNNING),
    (S.QUEUED, S.COMPLETED),
    (S.QUEUED, S.FAILED),
    (S.QUEUED, S.CANCELLED),
    (S.QUEUED, S.TIMED_OUT),
    (S.QUEUED, S.UNKNOWN),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLED),
    (S.RUNNING, S.TIMED_OUT),
    (S.RUNNING, S.UNKNOWN),
    (S.RUNNING, S.QUEUED),
    (S.UNKNOWN, S.QUEUED),
    (S.UNKNOWN, S.FAILED),
}


def test_status_codes_are_the_wire_codes() -> None:
    assert [(s.name, int(s)) for s in S] == [
        ("QUEUED", 0),
        ("RUNNING", 1),
        ("COMPLETED", 2),
        ("FAILED", 3),
        ("CANCELLED", 4),
        ("TIMED_OUT", 5),
        ("UNKNOWN", 6),
        ("SKIPPED", 7),
    ]


@pytest.mark.parametrize(("current", "new"), list(itertools.product(S, S)))
def test_transition_table(current: OccurrenceStatus, new: OccurrenceStatus) -> None:
    assert can_transition(current, new) is ((current, new) in ALLOWED)


def test_terminal_statuses_have_no_way_out() -> None:
    terminal = {s for s in S if s.is_terminal}
    assert terminal == {S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.SKIPPED}
    assert all(not TRANSITIONS[s] for s in terminal)


def test_a_late_running_after_completed_is_not_allowed() -> None:
    assert not can_transition(S.COMPLETED, S.RUNNING)


def test_active_statuses() -> None:
    assert {s for s in S if s.is_active} == {S.QUEUED, S.RUNNING}


def test_ids_are_time_ordered_uuid7() -> None:
    ids = [new_id() for _ in range(100)]
    assert all(i.version == 7 for i in ids)
    assert ids == sorted(ids)


def test_buckets_spread_jobs() -> None:
    counts = [0] * 16
    for _ in range(1600):
        counts[bucket_of(new_id(), 16)] += 1
    assert min(counts) > 50


def test_success_rate() -> None:
    job = Job(id=new_id(), job_type="t", success_count=3, failure_count=1)
    assert job.success_rate == 75.0
    assert Job(id=new_id(), job_type="t").success_rate is None
