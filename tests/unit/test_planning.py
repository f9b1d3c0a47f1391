"""Misfire policy, concurrency policy and no-worker rules of the fire planner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rota.core.ids import new_id
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    MisfirePolicy,
    OccurrenceStatus,
    SkipReason,
)
from rota.core.planning import PlanSettings, first_run_at, new_occurrence, plan_fires

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
SETTINGS = PlanSettings(misfire_threshold=timedelta(seconds=30), catch_up_cap=3)


def every_minute(**kw: object) -> Job:
    return Job(id=new_id(), job_type="t", cron_expression="* * * * *", next_run_at=T0, **kw)  # type: ignore[arg-type]


def statuses(plan: object) -> list[tuple[OccurrenceStatus, str | None]]:
    return [(o.status, o.skip_reason) for o in plan.occurrences]  # type: ignore[attr-defined]


def test_on_time_fire_runs_and_next_fire_follows() -> None:
    plan = plan_fires(every_minute(), 0, T0 + timedelta(seconds=1), SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]
    assert plan.occurrences[0].scheduled_for == T0
    assert plan.next_run_at == T0 + timedelta(minutes=1)


def test_late_fire_within_threshold_runs_late() -> None:
    plan = plan_fires(every_minute(), 0, T0 + timedelta(seconds=29), SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]


def test_fire_once_runs_only_the_latest_missed_fire() -> None:
    now = T0 + timedelta(minutes=4, seconds=45)  # fires 12:00..12:04 all missed
    plan = plan_fires(every_minute(), 0, now, SETTINGS)
    assert [o.scheduled_for for o in plan.occurrences] == [
        T0 + timedelta(minutes=m) for m in range(5)
    ]
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, "misfire")] * 4 + [
        (OccurrenceStatus.QUEUED, None)
    ]
    assert plan.next_run_at == T0 + timedelta(minutes=5)


def test_fire_once_with_an_on_time_fire_skips_all_missed() -> None:
    now = T0 + timedelta(minutes=3, seconds=10)  # 12:03 is on time, 12:00-12:02 missed
    plan = plan_fires(every_minute(), 0, now, SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, "misfire")] * 3 + [
        (OccurrenceStatus.QUEUED, None)
    ]


def test_skip_policy_runs_no_missed_fire() -> None:
    now = T0 + timedelta(minutes=2, seconds=45)
    plan = plan_fires(every_minute(misfire_policy=MisfirePolicy.SKIP), 0, now, SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, "misfire")] * 3


def test_catch_up_runs_missed_fires_up_to_the_cap() -> None:
    now = T0 + timedelta(minutes=4, seconds=45)
    job = every_minute(
        misfire_policy=MisfirePolicy.CATCH_UP, concurrency_policy=ConcurrencyPolicy.QUEUE
    )
    plan = plan_fires(job, 0, now, SETTINGS)
    # five missed fires, cap 3: the latest three run, the two oldest are skipped
    assert (
        statuses(plan)
        == [(OccurrenceStatus.SKIPPED, "misfire")] * 2 + [(OccurrenceStatus.QUEUED, None)] * 3
    )


def test_skip_concurrency_records_overlap() -> None:
    plan = plan_fires(every_minute(), 1, T0 + timedelta(seconds=1), SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, SkipReason.OVERLAP.value)]


def test_queue_concurrency_queues_behind_the_active_one() -> None:
    job = every_minute(concurrency_policy=ConcurrencyPolicy.QUEUE)
    plan = plan_fires(job, 1, T0 + timedelta(seconds=1), SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]


def test_catch_up_with_skip_concurrency_runs_every_missed_fire_one_after_another() -> None:
    now = T0 + timedelta(minutes=2, seconds=45)
    job = every_minute(misfire_policy=MisfirePolicy.CATCH_UP)
    plan = plan_fires(job, 0, now, SETTINGS, dispatched_at=now)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)] * 3
    assert plan.sequential
    # the first goes at once; the others wait for the one before them (not sent yet)
    assert [o.dispatched_at for o in plan.occurrences] == [now, None, None]


def test_skip_fires_late_within_the_threshold_all_run_after_a_gap() -> None:
    """A failover's backlog: nothing ran for 5 s, every fire is late but within the threshold;
    none is judged against another fire of the same plan."""
    job = Job(
        id=new_id(), job_type="t", cron_expression="* * * * * *", next_run_at=T0
    )  # every second, Skip (the default)
    now = T0 + timedelta(seconds=4, milliseconds=300)
    plan = plan_fires(job, 0, now, SETTINGS, horizon=now + timedelta(milliseconds=500))
    assert [o.scheduled_for for o in plan.occurrences] == [
        T0 + timedelta(seconds=s) for s in range(5)
    ]
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)] * 5
    assert plan.sequential
    # the fire not due yet (12:00:05, within the lead) is left for its due time: the
    # backlog may have ended by then
    assert plan.next_run_at == T0 + timedelta(seconds=5)


def test_skip_fires_due_while_a_run_from_before_is_in_progress_are_overlaps() -> None:
    job = every_minute(misfire_policy=MisfirePolicy.CATCH_UP)
    now = T0 + timedelta(minutes=2, seconds=45)
    plan = plan_fires(job, 1, now, SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, "overlap")] * 3
    assert not plan.sequential


def test_a_single_skip_fire_is_not_sequential() -> None:
    plan = plan_fires(every_minute(), 0, T0 + timedelta(seconds=1), SETTINGS, dispatched_at=T0)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]
    assert not plan.sequential
    assert plan.occurrences[0].dispatched_at == T0


def test_a_probing_job_runs_one_fire_of_a_backlog() -> None:
    job = every_minute(misfire_policy=MisfirePolicy.CATCH_UP, probing=True)
    now = T0 + timedelta(minutes=2, seconds=45)
    plan = plan_fires(job, 0, now, SETTINGS)
    assert (
        statuses(plan)
        == [(OccurrenceStatus.QUEUED, None)] + [(OccurrenceStatus.SKIPPED, "overlap")] * 2
    )
    assert not plan.sequential


def test_buffer_one_queues_one_behind_the_active_one_and_skips_more() -> None:
    job = every_minute(concurrency_policy=ConcurrencyPolicy.BUFFER_ONE)
    soon = T0 + timedelta(seconds=1)
    assert statuses(plan_fires(job, 0, soon, SETTINGS)) == [(OccurrenceStatus.QUEUED, None)]
    assert statuses(plan_fires(job, 1, soon, SETTINGS)) == [(OccurrenceStatus.QUEUED, None)]
    skipped = [(OccurrenceStatus.SKIPPED, SkipReason.OVERLAP.value)]
    assert statuses(plan_fires(job, 2, soon, SETTINGS)) == skipped
    # catching up three fires with one running: one waits, the others are skipped
    catch_up = every_minute(
        concurrency_policy=ConcurrencyPolicy.BUFFER_ONE, misfire_policy=MisfirePolicy.CATCH_UP
    )
    now = T0 + timedelta(minutes=2, seconds=45)
    assert statuses(plan_fires(catch_up, 1, now, SETTINGS)) == [
        (OccurrenceStatus.QUEUED, None),
        *[(OccurrenceStatus.SKIPPED, "overlap")] * 2,
    ]


def test_allow_all_and_cancel_other_run_every_due_fire() -> None:
    for policy in (ConcurrencyPolicy.ALLOW_ALL, ConcurrencyPolicy.CANCEL_OTHER):
        job = every_minute(concurrency_policy=policy, misfire_policy=MisfirePolicy.CATCH_UP)
        now = T0 + timedelta(minutes=2, seconds=45)
        assert statuses(plan_fires(job, 5, now, SETTINGS)) == [(OccurrenceStatus.QUEUED, None)] * 3


def test_cancel_other_does_not_plan_ahead_over_an_active_one() -> None:
    """A fire planned ahead (the dispatch lead) would cancel the running one before its own
    due instant: it is left for when it is due."""
    job = every_minute(concurrency_policy=ConcurrencyPolicy.CANCEL_OTHER)
    early = T0 - timedelta(milliseconds=300)
    plan = plan_fires(job, 1, early, SETTINGS, horizon=T0)
    assert plan.occurrences == ()
    assert plan.next_run_at == T0
    ahead = plan_fires(job, 0, early, SETTINGS, horizon=T0)  # nothing to cancel: sent ahead
    assert statuses(ahead) == [(OccurrenceStatus.QUEUED, None)]


def test_no_worker_is_recorded() -> None:
    plan = plan_fires(every_minute(), 0, T0, SETTINGS, has_worker=False)
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, "no_worker")]
    assert plan.occurrences[0].status_changes[0].reason == "no_worker"


def test_one_time_job_fires_once_and_finishes() -> None:
    job = Job(id=new_id(), job_type="t", execute_at=T0, next_run_at=T0)
    plan = plan_fires(job, 0, T0 + timedelta(milliseconds=5), SETTINGS)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]
    assert plan.next_run_at is None


def test_job_not_yet_due_plans_nothing() -> None:
    plan = plan_fires(every_minute(), 0, T0 - timedelta(seconds=1), SETTINGS)
    assert plan.occurrences == ()
    assert plan.next_run_at == T0


def test_long_outage_records_a_bounded_number_of_misses() -> None:
    settings = PlanSettings(max_recorded_misses=10)
    now = T0 + timedelta(days=1)
    plan = plan_fires(every_minute(), 0, now, settings)
    assert len(plan.occurrences) == 10
    assert plan.next_run_at == now + timedelta(minutes=1)
    assert sum(o.status is OccurrenceStatus.QUEUED for o in plan.occurrences) == 1


def test_occurrence_snapshots_the_job() -> None:
    job = every_minute(max_retries=4, timeout_seconds=30.0, job_data={"a": 1})
    occ = plan_fires(job, 0, T0, SETTINGS).occurrences[0]
    assert (occ.max_retries, occ.timeout_seconds, occ.job_data) == (4, 30.0, {"a": 1})
    assert occ.attempt == 1
    assert occ.due_at == occ.scheduled_for == T0
    assert occ.status_changes[0].from_status is None


def test_first_run() -> None:
    job = Job(id=new_id(), job_type="t", cron_expression="0 * * * *")
    assert first_run_at(job, T0) == T0 + timedelta(hours=1)
    once = Job(id=new_id(), job_type="t", execute_at=T0 - timedelta(hours=1))
    assert first_run_at(once, T0) == T0 - timedelta(hours=1)


# --- the dispatch lead: fires planned ahead of their due time ---------------------------------


def test_a_fire_within_the_horizon_is_planned_ahead_with_its_own_time() -> None:
    now = T0 - timedelta(milliseconds=500)
    job = every_minute()
    assert plan_fires(job, 0, now, SETTINGS).occurrences == ()
    plan = plan_fires(job, 0, now, SETTINGS, horizon=T0)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]
    assert plan.occurrences[0].scheduled_for == T0  # the true due time, not now
    assert plan.occurrences[0].due_at == T0
    assert plan.occurrences[0].created_at == now
    assert plan.next_run_at == T0 + timedelta(minutes=1)


def test_a_horizon_never_makes_a_due_fire_missed() -> None:
    # judged by now, not by the horizon: 29 s late is on time with a 30 s threshold
    now = T0 + timedelta(seconds=29)
    plan = plan_fires(every_minute(), 0, now, SETTINGS, horizon=now + timedelta(seconds=5))
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]


def test_a_horizon_before_now_plans_up_to_now() -> None:
    plan = plan_fires(every_minute(), 0, T0, SETTINGS, horizon=T0 - timedelta(seconds=1))
    assert [o.scheduled_for for o in plan.occurrences] == [T0]


def test_an_overlap_ahead_of_its_fire_is_left_for_its_due_time() -> None:
    # Skip policy, an occurrence still active: a fire not yet due is not Skipped ahead of
    # time (the active one may end before it); it stays the job's next fire.
    now = T0 - timedelta(milliseconds=500)
    job = every_minute(concurrency_policy=ConcurrencyPolicy.SKIP)
    plan = plan_fires(job, 1, now, SETTINGS, horizon=T0)
    assert plan.occurrences == ()
    assert plan.next_run_at == T0
    # at its due time the overlap decides as ever
    plan = plan_fires(job, 1, T0, SETTINGS, horizon=T0 + timedelta(milliseconds=500))
    assert statuses(plan) == [(OccurrenceStatus.SKIPPED, "overlap")]
    assert plan.next_run_at == T0 + timedelta(minutes=1)


def test_a_queue_policy_fire_ahead_is_planned_while_one_is_active() -> None:
    now = T0 - timedelta(milliseconds=500)
    job = every_minute(concurrency_policy=ConcurrencyPolicy.QUEUE)
    plan = plan_fires(job, 1, now, SETTINGS, horizon=T0)
    assert statuses(plan) == [(OccurrenceStatus.QUEUED, None)]


def test_a_new_fire_leaves_what_a_worker_writes_empty() -> None:
    """The store inserts a new fire without ``UNSTARTED_COLUMNS`` (they stay NULL): planning
    must never set one of them, Queued or Skipped (whose ``end_time`` it does set)."""
    from rota.stores.sql.rows import UNSTARTED_COLUMNS

    job = every_minute()
    for skip in (None, SkipReason.OVERLAP):
        occ = new_occurrence(job, T0, T0, SETTINGS, skip_reason=skip)
        assert {name: getattr(occ, name) for name in UNSTARTED_COLUMNS} == dict.fromkeys(
            UNSTARTED_COLUMNS
        )
    assert new_occurrence(job, T0, T0, SETTINGS, skip_reason=SkipReason.OVERLAP).end_time == T0
