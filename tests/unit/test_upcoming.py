"""A job's upcoming fires as the job page and `rota jobs show` list them, and the values its
runs get with their sources (rota.core.upcoming)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rota.core.ids import new_id
from rota.core.models import Job
from rota.core.upcoming import Effective, effective_values, upcoming_fires

T0 = datetime(2026, 3, 28, 0, 0, tzinfo=UTC)


def job(**kw: Any) -> Job:
    values: dict[str, Any] = {"cron_expression": "0 2 * * *", "next_run_at": T0.replace(hour=2)}
    return Job(id=new_id(), job_type="t", **(values | kw))


def ats(j: Job, count: int = 3) -> list[datetime]:
    return [f.at for f in upcoming_fires(j, count)]


def test_a_cron_jobs_next_fires_follow_its_zone_across_a_dst_change() -> None:
    j = job(time_zone="Europe/Berlin", next_run_at=datetime(2026, 3, 28, 1, 0, tzinfo=UTC))
    # 02:00 Berlin: 01:00 UTC in winter; on 29 March 02:00 does not exist (fires at 03:00
    # CEST = 01:00 UTC); then 00:00 UTC in summer
    assert ats(j) == [
        datetime(2026, 3, 28, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 0, tzinfo=UTC),
    ]


def test_bounds_cut_the_list() -> None:
    assert ats(job(max_runs=5, run_count=4)) == [T0.replace(hour=2)]
    assert ats(job(end_at=T0 + timedelta(days=1, hours=3))) == [
        T0.replace(hour=2),
        T0.replace(day=29, hour=2),
    ]
    assert ats(job(is_active=False)) == []
    assert ats(job(next_run_at=None)) == []  # nothing left to fire
    once = job(cron_expression=None, execute_at=T0, next_run_at=T0)
    assert ats(once) == [T0]


def test_an_interval_jobs_fires() -> None:
    j = job(cron_expression=None, interval_seconds=5400, start_at=T0, next_run_at=T0)
    assert ats(j) == [T0, T0 + timedelta(minutes=90), T0 + timedelta(minutes=180)]


def test_a_pause_and_skips_mark_the_fires_they_will_skip() -> None:
    paused = job(paused_at=T0, paused_until=T0.replace(day=29, hour=12))
    assert [f.skipped for f in upcoming_fires(paused, 3)] == ["paused", "paused", None]
    skipping = job(skip_next=1)
    assert [f.skipped for f in upcoming_fires(skipping, 3)] == ["skip_next", None, None]


def test_effective_values_name_their_source() -> None:
    declared = {"maxRetries": 3, "timeoutSeconds": 60.0, "concurrency": 2}
    found = effective_values(
        job(retry_delay_seconds=5.0),
        declared,
        default_max_retries=0,
        default_timeout_seconds=None,
    )
    assert found == {
        "maxRetries": Effective(3, "job type"),
        "timeoutSeconds": Effective(60.0, "job type"),
        "retryDelaySeconds": Effective(5.0, "job"),
        "concurrency": Effective(2, "job type"),
    }
    bare = effective_values(
        job(max_retries=1), None, default_max_retries=0, default_timeout_seconds=30.0
    )
    assert bare["maxRetries"] == Effective(1, "job")
    assert bare["timeoutSeconds"] == Effective(30.0, "worker default")
    assert bare["retryDelaySeconds"] == Effective(None, "none")
    none = effective_values(job(), None, default_max_retries=0, default_timeout_seconds=None)
    assert none["maxRetries"] == Effective(0, "server default")
    assert none["timeoutSeconds"] == Effective(None, "none")
