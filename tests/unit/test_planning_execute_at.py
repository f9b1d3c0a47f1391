"""A cron job with an ``executeAt`` (the reference's sample job): the cron is its schedule and
nothing fires before ``executeAt``, whether the first fire is computed for a new job or the
planner meets a ``next_run_at`` that is earlier (a stale index entry or row)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rota.core.ids import new_id
from rota.core.models import Job, OccurrenceStatus
from rota.core.planning import PlanSettings, first_fire, first_run_at, plan_fires

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
SETTINGS = PlanSettings(misfire_threshold=timedelta(seconds=30))
EVERY_5_MIN = "0 */5 * * * *"


def job(execute_at: datetime | None, next_run_at: datetime | None = None) -> Job:
    return Job(
        id=new_id(),
        job_type="t",
        cron_expression=EVERY_5_MIN,
        execute_at=execute_at,
        next_run_at=next_run_at,
    )


def test_first_fire_is_the_first_cron_fire_at_or_after_execute_at() -> None:
    at = T0 + timedelta(hours=9, minutes=30)  # 21:30, itself a fire
    assert first_fire(EVERY_5_MIN, "UTC", at, T0) == at
    assert first_fire(EVERY_5_MIN, "UTC", at + timedelta(seconds=1), T0) == at + timedelta(
        minutes=5
    )


def test_an_execute_at_in_the_past_changes_nothing() -> None:
    assert first_run_at(job(T0 - timedelta(days=3)), T0) == T0 + timedelta(minutes=5)
    assert first_run_at(job(None), T0) == T0 + timedelta(minutes=5)


def test_a_one_time_job_still_fires_at_execute_at() -> None:
    past = T0 - timedelta(hours=1)
    assert first_fire(None, "UTC", past, T0) == past


def test_execute_at_in_a_zone_other_than_the_cron_s() -> None:
    at = datetime(2026, 1, 5, 21, 30, tzinfo=UTC)  # 22:30 in Berlin
    assert first_fire("0 0 23 * * *", "Europe/Berlin", at, T0) == datetime(
        2026, 1, 5, 22, 0, tzinfo=UTC
    )


def test_planner_does_not_fire_before_execute_at_even_if_due() -> None:
    at = T0 + timedelta(hours=1)
    stale = job(at, next_run_at=T0)  # a next_run_at from before executeAt was set
    plan = plan_fires(stale, 0, T0 + timedelta(seconds=1), SETTINGS)
    assert plan.occurrences == ()
    assert plan.next_run_at == at


def test_planner_fires_from_execute_at_on() -> None:
    at = T0 + timedelta(minutes=7)  # between fires: the first is 12:10
    stale = job(at, next_run_at=T0)
    now = T0 + timedelta(minutes=10, seconds=5)
    plan = plan_fires(stale, 0, now, SETTINGS)
    assert [(o.scheduled_for, o.status) for o in plan.occurrences] == [
        (T0 + timedelta(minutes=10), OccurrenceStatus.QUEUED)
    ]
    assert plan.next_run_at == T0 + timedelta(minutes=15)


def test_planner_after_execute_at_is_the_plain_cron() -> None:
    plan = plan_fires(job(T0 - timedelta(days=1), next_run_at=T0), 0, T0, SETTINGS)
    assert [o.scheduled_for for o in plan.occurrences] == [T0]
    assert plan.next_run_at == T0 + timedelta(minutes=5)
