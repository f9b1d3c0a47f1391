"""Interval schedules and schedule bounds (issue 20): parsing durations, the fires an interval
job plans (aligned to ``start_at`` or to its creation), ``start_at``/``end_at``, ``max_runs``,
jitter and the per-job misfire window. Intervals are absolute time: a DST change moves
nothing (the time zone is not read), so no DST case is needed here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rota.core.bounds import checked_schedule
from rota.core.errors import ValidationError
from rota.core.ids import new_id
from rota.core.intervals import IntervalSchedule, format_duration, parse_duration
from rota.core.jobspec import JobSpec
from rota.core.models import ConcurrencyPolicy, Job, MisfirePolicy, SkipReason
from rota.core.planning import PlanSettings, first_run_at, is_fire, plan_fires

T0 = datetime(2030, 3, 31, 0, 30, tzinfo=UTC)  # the night Europe/Berlin springs forward
S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400), ("1h30m", 5400), ("45s", 45), ("2d", 172_800), ("1d 2h 3m 4s", 93_784),
     ("120", 120), (30, 30), ("366d", 366 * 86_400)],
)  # fmt: skip
def test_durations_parse(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad", ["", "0s", "90", "m", "1m1h", "1h1h", "1.5h", "367d", "-1m", 0, True, 1.5]
)
def test_a_bad_duration_names_the_field(bad: object) -> None:
    if bad == "90":  # whole seconds as text are fine
        assert parse_duration(bad) == 90
        return
    with pytest.raises(ValidationError) as info:
        parse_duration(bad)
    assert info.value.field == "every"


def test_durations_format_canonically() -> None:
    assert [format_duration(s) for s in (5400, 45, 172_800, 93_784, None)] == [
        "1h30m", "45s", "2d", "1d2h3m4s", None,
    ]  # fmt: skip


def test_an_interval_is_aligned_to_its_anchor_on_both_sides() -> None:
    grid = IntervalSchedule(T0, 90)
    assert grid.next_after(T0) == T0 + 90 * S
    assert grid.next_after(T0 + 89 * S) == T0 + 90 * S
    assert grid.next_after(T0 + 90 * S) == T0 + 180 * S
    assert grid.next_after(T0 - 1 * S) == T0
    assert grid.next_after(T0 - 91 * S) == T0 - 90 * S


def job(**fields: object) -> Job:
    values: dict[str, object] = {"id": new_id(), "job_type": "t", "created_at": T0}
    values.update(fields)
    return Job(**values)  # type: ignore[arg-type]


def test_first_fire_is_aligned_to_start_at_or_to_the_creation_second() -> None:
    created = T0 + timedelta(microseconds=400_000)
    assert first_run_at(job(interval_seconds=60, created_at=created), created) == T0 + 60 * S
    later = T0 + 10 * S
    # start_at in the future: its first fire is start_at itself
    assert first_run_at(job(interval_seconds=60, start_at=later), T0) == later
    # start_at in the past: the grid from start_at, the first point after now
    assert first_run_at(job(interval_seconds=60, start_at=T0 - 100 * S), T0) == T0 + 20 * S
    # in Europe/Berlin the clock jumps from 02:00 to 03:00 at T0 + 30 min: nothing moves
    berlin = job(interval_seconds=3600, time_zone="Europe/Berlin", start_at=T0)
    assert first_run_at(berlin, T0 + 1 * S) == T0 + 3600 * S


def test_bounds_end_the_schedule() -> None:
    ends = job(interval_seconds=60, start_at=T0, end_at=T0 + 90 * S)
    assert first_run_at(ends, T0 + 61 * S) is None
    assert first_run_at(job(cron_expression="* * * * *", end_at=T0), T0) is None
    done = job(interval_seconds=60, max_runs=3, run_count=3)
    assert first_run_at(done, T0) is None
    assert is_fire(ends, T0 + 60 * S)
    assert not is_fire(ends, T0 + 30 * S)


def test_a_cron_job_never_fires_before_start_at() -> None:
    cron = job(cron_expression="0 * * * *", start_at=T0 + 2 * 3600 * S)
    assert first_run_at(cron, T0) == T0 + timedelta(hours=2, minutes=30)


def _plan(j: Job, now: datetime, **kw: object) -> list[tuple[datetime, str | None]]:
    plan = plan_fires(j, 0, now, PlanSettings(), **kw)  # type: ignore[arg-type]
    return [(o.scheduled_for, o.skip_reason) for o in plan.occurrences]


def test_max_runs_counts_only_fires_that_run() -> None:
    j = job(
        interval_seconds=30, start_at=T0, next_run_at=T0, max_runs=3, run_count=1,
        concurrency_policy=ConcurrencyPolicy.ALLOW_ALL,
    )  # fmt: skip
    plan = plan_fires(j, 0, T0 + 100 * S, PlanSettings())
    # T0 and T0 + 30 s are over 60 s late: missed (Skipped, not counted); two run: done
    miss = SkipReason.MISFIRE.value
    assert [(o.scheduled_for, o.skip_reason) for o in plan.occurrences] == [
        (T0, miss), (T0 + 30 * S, miss), (T0 + 60 * S, None), (T0 + 90 * S, None),
    ]  # fmt: skip
    assert (plan.next_run_at, plan.run_count) == (None, 3)


def test_the_jobs_misfire_window_overrides_the_servers() -> None:
    j = job(
        interval_seconds=30, start_at=T0, next_run_at=T0, misfire_window_seconds=5,
        misfire_policy=MisfirePolicy.SKIP,
    )  # fmt: skip
    assert _plan(j, T0 + 10 * S) == [(T0, SkipReason.MISFIRE.value)]
    wide = job(interval_seconds=600, start_at=T0, next_run_at=T0, misfire_window_seconds=300)
    assert _plan(wide, T0 + 200 * S) == [(T0, None)]  # 200 s late: past the server's 60 s


def test_jitter_delays_each_fire_within_its_bound_and_keeps_its_time() -> None:
    j = job(
        interval_seconds=10, start_at=T0, next_run_at=T0, jitter_seconds=7,
        misfire_policy=MisfirePolicy.CATCH_UP, concurrency_policy=ConcurrencyPolicy.ALLOW_ALL,
    )  # fmt: skip
    draws = iter([0.0, 0.5, 0.999999])
    plan = plan_fires(j, 0, T0 + 25 * S, PlanSettings(), rng=lambda: next(draws))
    got = [(o.scheduled_for, o.jitter_seconds, o.due_at, o.dispatched_at) for o in plan.occurrences]
    assert got == [
        (T0, 0.0, T0, None),
        (T0 + 10 * S, 3.5, T0 + 13.5 * S, None),
        (T0 + 20 * S, 7.0, T0 + 27 * S, None),
    ]
    plain = plan_fires(job(interval_seconds=10, next_run_at=T0), 0, T0, PlanSettings())
    assert plain.occurrences[0].jitter_seconds is None


def spec(**fields: object) -> JobSpec:
    return JobSpec(job_type="t", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron_expression": "61 * * * *"}, "cronExpression"),
        ({"interval_seconds": "5m", "cron_expression": "* * * * *"}, "every"),
        ({"interval_seconds": "5m", "execute_at": T0}, "every"),
        ({"interval_seconds": "soon"}, "every"),
        ({"execute_at": T0, "max_runs": 2}, "maxRuns"),
        ({"execute_at": T0, "end_at": T0}, "endAt"),
        ({"interval_seconds": 60, "start_at": T0, "end_at": T0}, "endAt"),
        ({"interval_seconds": 60, "max_runs": 0}, "maxRuns"),
        ({"interval_seconds": 60, "jitter_seconds": 3601}, "jitterSeconds"),
        ({"interval_seconds": 60, "misfire_window_seconds": 0}, "misfireWindowSeconds"),
    ],
)
def test_schedule_checks_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        checked_schedule(spec(**fields))
    assert info.value.field == field


def test_no_schedule_at_all_is_a_job_run_only_when_triggered() -> None:
    out = checked_schedule(spec())
    assert (out["cron_expression"], out["interval_seconds"], out["execute_at"]) == (None,) * 3


def test_a_checked_interval_is_stored_in_seconds() -> None:
    out = checked_schedule(spec(interval_seconds="1h30m", jitter_seconds=5, max_runs=4))
    assert (out["interval_seconds"], out["jitter_seconds"], out["max_runs"]) == (5400, 5.0, 4)
