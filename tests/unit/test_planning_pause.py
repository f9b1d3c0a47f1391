"""The fire planner's pause and skip rules: fires while paused and the next N skipped fires
are recorded Skipped with the note; a timed pause ends at its time; a missed fire counts no
skip; a fire ahead of its time is decided when it is due."""

from __future__ import annotations

from datetime import timedelta

from rota.core.models import MisfirePolicy, OccurrenceStatus
from rota.core.planning import plan_fires
from tests.unit.test_planning import SETTINGS, T0, every_minute, statuses

MIN = timedelta(minutes=1)
S = OccurrenceStatus


def test_fires_while_paused_are_recorded_skipped_with_the_note() -> None:
    job = every_minute(paused_at=T0 - MIN, pause_note="db migration")
    plan = plan_fires(job, 0, T0 + 2 * MIN + timedelta(seconds=1), SETTINGS)
    # 12:00 and 12:01 missed (misfire first), 12:02 on time: paused, not run
    assert statuses(plan) == [(S.SKIPPED, "misfire")] * 2 + [(S.SKIPPED, "paused")]
    change = plan.occurrences[-1].status_changes[0]
    assert change.reason == "paused: db migration"
    assert plan.next_run_at == T0 + 3 * MIN
    assert plan.skips_used == 0


def test_a_pause_without_a_note_says_paused() -> None:
    plan = plan_fires(every_minute(paused_at=T0), 0, T0, SETTINGS)
    assert statuses(plan) == [(S.SKIPPED, "paused")]
    assert plan.occurrences[0].status_changes[0].reason == "paused"


def test_a_timed_pause_ends_at_its_time_whatever_the_loop() -> None:
    job = every_minute(
        paused_at=T0 - MIN,
        paused_until=T0 + MIN,
        misfire_policy=MisfirePolicy.CATCH_UP,
    )
    plan = plan_fires(job, 0, T0 + MIN, SETTINGS)
    # 12:00 is before the end: paused; 12:01 is the end itself: runs
    assert statuses(plan) == [(S.SKIPPED, "paused"), (S.QUEUED, None)]


def test_the_next_n_fires_are_skipped_and_counted() -> None:
    job = every_minute(
        skip_next=2, skip_note="deploy freeze", misfire_policy=MisfirePolicy.CATCH_UP
    )
    plan = plan_fires(job, 0, T0 + 2 * MIN, SETTINGS)
    assert statuses(plan) == [(S.SKIPPED, "skip_next")] * 2 + [(S.QUEUED, None)]
    assert plan.occurrences[0].status_changes[0].reason == "skip_next: deploy freeze"
    assert plan.skips_used == 2


def test_a_missed_or_paused_fire_counts_no_skip() -> None:
    missed = every_minute(skip_next=1)
    plan = plan_fires(missed, 0, T0 + MIN + timedelta(seconds=1), SETTINGS)
    # 12:00 missed (fire_once keeps the latest), 12:01 the skipped one
    assert statuses(plan) == [(S.SKIPPED, "misfire"), (S.SKIPPED, "skip_next")]
    assert plan.skips_used == 1
    paused = every_minute(skip_next=1, paused_at=T0)
    plan = plan_fires(paused, 0, T0, SETTINGS)
    assert statuses(plan) == [(S.SKIPPED, "paused")]
    assert plan.skips_used == 0


def test_a_paused_or_skipped_fire_ahead_is_left_for_its_due_time() -> None:
    now = T0 - timedelta(milliseconds=500)
    for job in (every_minute(paused_at=T0 - MIN), every_minute(skip_next=3)):
        plan = plan_fires(job, 0, now, SETTINGS, horizon=T0)
        assert plan.occurrences == ()
        assert plan.next_run_at == T0
        assert plan.skips_used == 0


def test_a_paused_job_is_still_active() -> None:
    plan = plan_fires(every_minute(paused_at=T0), 0, T0, SETTINGS)
    assert plan.is_active
    job = every_minute(paused_at=T0)
    assert job.is_paused
    assert job.paused_for(T0 + 1000 * MIN)
    timed = every_minute(paused_at=T0, paused_until=T0 + MIN)
    assert timed.paused_for(T0)
    assert not timed.paused_for(T0 + MIN)
    assert not every_minute().paused_for(T0)
