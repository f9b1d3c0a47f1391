"""The Store contract for the missed-fire check, on SQLite and PostgreSQL: the active cron jobs
of some buckets, each with the latest fire its schedule recorded in a window (run or Skipped;
manual runs left out), a page at a time."""

from __future__ import annotations

from datetime import timedelta

from rota.core.models import SkipReason
from rota.core.planning import new_occurrence
from rota.core.ports import Store
from tests.contract.test_store import MINUTE, NOW, SETTINGS, T0, make_job


async def test_watched_schedules_carry_their_latest_recorded_fire(store: Store) -> None:
    every_minute = "* * * * *"
    ran = make_job(
        cron_expression=every_minute,
        time_zone="Europe/Paris",
        display_name="ran",
        execute_at=None,
        bucket=0,
    )
    silent = make_job(cron_expression=every_minute, execute_at=T0 + 5 * MINUTE, bucket=2)
    elsewhere = make_job(cron_expression=every_minute, bucket=1)
    disabled = make_job(cron_expression=every_minute, bucket=0, is_active=False)
    one_time = make_job(bucket=0)
    interval = make_job(interval_seconds=90, execute_at=None, bucket=2)
    await store.create_jobs([ran, silent, elsewhere, disabled, one_time, interval])
    fire1, fire2, fire3 = (NOW + i * MINUTE for i in (1, 2, 3))
    await store.insert_occurrences(
        [
            new_occurrence(ran, fire1, fire1, SETTINGS),
            new_occurrence(ran, fire2, fire2, SETTINGS, skip_reason=SkipReason.OVERLAP),
            # a manual run is no fire of the schedule
            new_occurrence(ran, fire3, fire3, SETTINGS, trigger_reason="manual"),
            new_occurrence(elsewhere, fire1, fire1, SETTINGS),
            new_occurrence(disabled, fire1, fire1, SETTINGS),
        ]
    )

    watched = await store.watched_schedules([0, 2], NOW, NOW + 10 * MINUTE, 10)
    assert [w.job_id for w in watched] == sorted([ran.id, silent.id, interval.id])
    by_id = {w.job_id: w for w in watched}
    assert (by_id[interval.id].cron_expression, by_id[interval.id].interval_seconds) == (None, 90)
    assert by_id[ran.id].last_fire == fire2  # the Skipped fire counts, the manual run does not
    assert by_id[silent.id].last_fire is None
    seen = by_id[ran.id]
    assert (seen.job_type, seen.display_name) == (ran.job_type, "ran")
    assert (seen.cron_expression, seen.time_zone) == (every_minute, "Europe/Paris")
    assert seen.execute_at is None
    assert (seen.created_at, seen.updated_at) == (ran.created_at, ran.updated_at)
    assert by_id[silent.id].execute_at == T0 + 5 * MINUTE

    # the window bounds the fires read, both ends included
    [early] = await store.watched_schedules([0], NOW, fire1, 10)  # bucket 0: ``ran`` alone
    assert early.last_fire == fire1
    [late] = await store.watched_schedules([0], fire1 + timedelta(seconds=1), fire3, 10)
    assert late.last_fire == fire2
    [after] = await store.watched_schedules([0], fire3, NOW + 10 * MINUTE, 10)
    assert after.last_fire is None


async def test_watched_schedules_page_by_id(store: Store) -> None:
    cron = [make_job(cron_expression="*/5 * * * *", bucket=b % 3) for b in range(6)]
    await store.create_jobs(cron)
    wanted = sorted(j.id for j in cron if j.bucket in (0, 2))
    first = await store.watched_schedules([0, 2], NOW, NOW + MINUTE, 3)
    assert [w.job_id for w in first] == wanted[:3]
    rest = await store.watched_schedules([0, 2], NOW, NOW + MINUTE, 3, after=first[-1].job_id)
    assert [w.job_id for w in rest] == wanted[3:]
    assert await store.watched_schedules([], NOW, NOW + MINUTE, 10) == []
