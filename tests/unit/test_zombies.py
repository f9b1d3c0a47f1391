"""Zombie detection on a real SQLite store with a fixed clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from msgspec.structs import replace

from rota.core.ids import new_id
from rota.core.models import (
    FailureType,
    Job,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    WorkerInfo,
    ZombiePolicy,
)
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.records import FailedQuery, StatusResult
from rota.services.zombies import ZombieDetector, zombie_records
from rota.stores.sql import SqlStore
from tests.helpers import eventually

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
THRESHOLD = 30.0
QUEUED_DEFAULT = 1800.0


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


def worker(
    instance: str,
    *,
    job_types: tuple[str, ...] = ("report",),
    group: str = "g",
    started_at: datetime = T0,
) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance,
        worker_id=group,
        host="h",
        pid=1,
        job_types={t: {} for t in job_types},
        concurrency=1,
        started_at=started_at,
    )


def registry(*infos: WorkerInfo) -> Callable[[], Awaitable[list[WorkerInfo]]]:
    async def live() -> list[WorkerInfo]:
        return list(infos)

    return live


def detector(store: SqlStore, clock: Clock, **kwargs: object) -> ZombieDetector:
    return ZombieDetector(
        store,
        threshold_seconds=THRESHOLD,
        interval_seconds=0.05,
        clock=clock,
        **kwargs,  # type: ignore[arg-type]
    )


async def running(store: SqlStore, at: datetime, instance: str = "w-1") -> Occurrence:
    """A new occurrence of a new job, reported Running by ``instance`` at ``at``."""
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0)
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.mark_dispatched([occ], T0)
    record = StatusRecord(
        occurrence_id=occ.id, status=S.RUNNING, timestamp=at, instance_id=instance
    )
    await store.apply_status([record])
    return occ


async def test_silent_running_becomes_unknown_then_a_new_attempt(
    store: SqlStore, clock: Clock
) -> None:
    occ = await running(store, T0)
    clock.now = T0 + timedelta(seconds=31)
    seen: list[StatusResult] = []
    assert await detector(store, clock, on_applied=seen.append).sweep() == 1

    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.due_at) == (S.QUEUED, 2, clock.now)
    assert stored.dispatched_at is None
    assert stored.exception == "no heartbeat from worker instance w-1 for 31 s"
    unknown, queued = stored.status_changes[-2:]
    assert (unknown.from_status, unknown.to_status, unknown.reason) == (
        S.RUNNING,
        S.UNKNOWN,
        f"{FailureType.ZOMBIE.value}: no heartbeat from worker instance w-1 for 31 s",
    )
    assert (queued.to_status, queued.attempt) == (S.QUEUED, 2)
    assert [c.to_status for c in seen[0].applied] == [S.UNKNOWN, S.QUEUED]
    # The new attempt is what the sweep publishes next.
    assert [o.id for o in await store.undispatched(clock.now, 10)] == [occ.id]


async def test_heartbeats_keep_an_occurrence_alive(store: SqlStore, clock: Clock) -> None:
    occ = await running(store, T0)
    beat = StatusRecord(
        occurrence_id=occ.id, status=S.RUNNING, timestamp=T0 + timedelta(seconds=20)
    )
    await store.apply_status([beat])
    clock.now = T0 + timedelta(seconds=31)
    zombies = detector(store, clock)
    assert await zombies.sweep() == 0
    assert (await store.get_occurrence(occ.id)).status is S.RUNNING
    clock.now = T0 + timedelta(seconds=51)
    assert await zombies.sweep() == 1
    assert zombies.requeued == 1


async def test_a_still_registered_worker_gets_the_long_threshold(
    store: SqlStore, clock: Clock
) -> None:
    """Reports held up (broker away) while the worker is registered: not a zombie yet."""
    alive = await running(store, T0, instance="w-alive")
    gone = await running(store, T0, instance="w-gone")
    zombies = detector(
        store, clock, live_workers=registry(worker("w-alive")), live_threshold_seconds=300
    )
    clock.now = T0 + timedelta(seconds=60)
    assert await zombies.sweep() == 1
    assert (await store.get_occurrence(alive.id)).status is S.RUNNING
    assert (await store.get_occurrence(gone.id)).status is S.QUEUED

    clock.now = T0 + timedelta(seconds=301)  # registered, but silent past the long threshold
    assert await zombies.sweep() == 1
    assert (await store.get_occurrence(alive.id)).status is S.QUEUED


async def test_a_worker_that_goes_away_makes_its_silent_occurrence_a_zombie(
    store: SqlStore, clock: Clock
) -> None:
    occ = await running(store, T0, instance="w-1")
    registered = {"w-1"}

    async def live() -> list[WorkerInfo]:
        return [worker(i) for i in registered]

    zombies = detector(store, clock, live_workers=live)
    clock.now = T0 + timedelta(seconds=40)
    assert await zombies.sweep() == 0
    registered.clear()  # its registration expired: killed
    assert await zombies.sweep() == 1
    assert (await store.get_occurrence(occ.id)).attempt == 2


async def test_sweeps_in_batches(store: SqlStore, clock: Clock) -> None:
    occs = [await running(store, T0) for _ in range(5)]
    clock.now = T0 + timedelta(minutes=5)
    assert await detector(store, clock, batch_size=2).sweep() == 5
    for occ in occs:
        assert (await store.get_occurrence(occ.id)).attempt == 2


async def test_several_servers_requeue_a_zombie_once(
    store: SqlStore, url: str, clock: Clock
) -> None:
    occs = [await running(store, T0, f"w-{i}") for i in range(10)]
    clock.now = T0 + timedelta(minutes=1)
    stale_view = [
        s.occurrence
        for s in await store.stale_occurrences(
            clock.now, running_threshold=THRESHOLD, queued_threshold=1800, limit=100
        )
    ]
    others = [SqlStore(url) for _ in range(2)]
    for other in others:
        await other.open()
    try:
        counts = await asyncio.gather(
            *(detector(s, clock).sweep() for s in [store, *others, store])
        )
    finally:
        for other in others:
            await other.close()
    assert sum(counts) == len(occs)
    for occ in occs:
        stored = await store.get_occurrence(occ.id)
        assert (stored.status, stored.attempt) == (S.QUEUED, 2)
        assert [c.to_status for c in stored.status_changes].count(S.UNKNOWN) == 1

    # A server acting on what it read before the requeue changes nothing.
    late = await store.apply_status([r for o in stale_view for r in zombie_records(o, clock.now)])
    assert late.applied == []
    assert {i.reason for i in late.ignored} == {"late", "transition"}
    # Nor does the superseded attempt's worker reporting in after all.
    done = StatusRecord(occurrence_id=occs[0].id, status=S.COMPLETED, timestamp=clock.now)
    result = await store.apply_status([done])
    assert [i.reason for i in result.ignored] == ["late"]
    assert (await store.get_occurrence(occs[0].id)).status is S.QUEUED


async def test_run_sweeps_until_stopped(store: SqlStore, clock: Clock) -> None:
    zombies = detector(store, clock)
    task = asyncio.create_task(zombies.run())
    occ = await running(store, T0)
    clock.now = T0 + timedelta(minutes=1)

    async def requeued() -> bool:
        return (await store.get_occurrence(occ.id)).attempt != 1

    await eventually(requeued, 10, "the zombie requeued")
    zombies.stop()
    await asyncio.wait_for(task, 5)
    assert zombies.requeued == 1


# --- policies, per-job thresholds, Queued zombies ---------------------------------------------


async def running_job(store: SqlStore, at: datetime, **job_fields: object) -> Occurrence:
    """A Running occurrence of a new job with the given settings."""
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0, **job_fields)  # type: ignore[arg-type]
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.mark_dispatched([occ], T0)
    await store.apply_status(
        [StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=at, instance_id="w-1")]
    )
    return occ


async def test_fail_policy_fails_the_zombie_instead_of_requeueing(
    store: SqlStore, clock: Clock
) -> None:
    occ = await running_job(store, T0, zombie_policy=ZombiePolicy.FAIL)
    other = await running_job(store, T0)
    clock.now = T0 + timedelta(seconds=31)
    zombies = detector(store, clock)
    assert await zombies.sweep() == 2
    assert (zombies.requeued, zombies.failed) == (1, 1)
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.FAILED, 1)
    assert stored.exception == "zombie: no heartbeat from worker instance w-1 for 31 s"
    assert [(c.to_status, c.reason) for c in stored.status_changes[-2:]] == [
        (S.UNKNOWN, "zombie: no heartbeat from worker instance w-1 for 31 s"),
        (S.FAILED, FailureType.ZOMBIE.value),
    ]
    assert (await store.get_occurrence(other.id)).status is S.QUEUED
    job = await store.get_job(occ.job_id)
    assert (job.failure_count, job.consecutive_failures) == (1, 1)


async def test_the_global_policy_applies_to_jobs_without_one(store: SqlStore, clock: Clock) -> None:
    default = await running_job(store, T0)
    own = await running_job(store, T0, zombie_policy=ZombiePolicy.REQUEUE)
    clock.now = T0 + timedelta(seconds=31)
    assert await detector(store, clock, policy=ZombiePolicy.FAIL).sweep() == 2
    assert (await store.get_occurrence(default.id)).status is S.FAILED
    assert (await store.get_occurrence(own.id)).status is S.QUEUED


async def test_a_jobs_own_threshold_replaces_the_global_one(store: SqlStore, clock: Clock) -> None:
    quick = await running_job(store, T0, zombie_threshold_seconds=5.0)
    slow = await running_job(store, T0, zombie_threshold_seconds=120.0)
    plain = await running_job(store, T0)
    zombies = detector(store, clock)
    clock.now = T0 + timedelta(seconds=6)
    assert await zombies.sweep() == 1
    assert (await store.get_occurrence(quick.id)).status is S.QUEUED
    clock.now = T0 + timedelta(seconds=31)
    assert await zombies.sweep() == 1
    assert (await store.get_occurrence(plain.id)).status is S.QUEUED
    assert (await store.get_occurrence(slow.id)).status is S.RUNNING
    clock.now = T0 + timedelta(seconds=121)
    assert await zombies.sweep() == 1
    assert (await store.get_occurrence(slow.id)).status is S.QUEUED


async def test_a_queued_occurrence_lost_after_dispatch_is_a_zombie_only_after_its_threshold(
    store: SqlStore, clock: Clock
) -> None:
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0)
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    waiting = new_occurrence(replace(job, id=new_id()), T0, T0, PlanSettings())
    await store.insert_occurrences([occ, waiting])
    await store.mark_dispatched([occ], T0)  # ``waiting`` never dispatched: not a zombie
    zombies = detector(store, clock, queued_threshold_seconds=600.0)
    clock.now = T0 + timedelta(seconds=599)  # long past the Running threshold: still waiting
    assert await zombies.sweep() == 0
    clock.now = T0 + timedelta(seconds=601)
    assert await zombies.sweep() == 1
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.dispatched_at) == (S.QUEUED, 2, None)
    unknown = stored.status_changes[-2]
    assert (unknown.from_status, unknown.to_status) == (S.QUEUED, S.UNKNOWN)
    assert stored.exception == "dispatched 601 s ago and never started: its message was lost"
    assert (await store.get_occurrence(waiting.id)).attempt == 1


async def test_a_queued_occurrence_is_a_zombie_only_while_a_worker_able_to_run_it_is_up(
    store: SqlStore, clock: Clock
) -> None:
    """While no worker of its group (with its job type) has been up for the whole threshold,
    its message waits in the queue: a new attempt would make it run twice."""
    job = Job(id=new_id(), job_type="report", worker_id="g", execute_at=T0, next_run_at=T0)
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.mark_dispatched([occ], T0)
    clock.now = T0 + timedelta(hours=4)
    just_back = clock.now - timedelta(seconds=60)  # working through the backlog
    not_serving = [
        worker("w-other-type", job_types=("mail",)),
        worker("w-other-group", group="h"),
        worker("w-just-back", started_at=just_back),
    ]
    zombies = detector(store, clock, live_workers=registry(*not_serving))
    zombies_none = detector(store, clock, live_workers=registry())
    for d in (zombies, zombies_none):
        assert await d.sweep() == 0
    assert (await store.get_occurrence(occ.id)).attempt == 1
    serving = worker("w-up", started_at=clock.now - timedelta(seconds=QUEUED_DEFAULT + 1))
    assert await detector(store, clock, live_workers=registry(serving)).sweep() == 1
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.QUEUED, 2)


async def test_requeues_are_bounded_then_the_zombie_fails(store: SqlStore, clock: Clock) -> None:
    """A handler that kills its worker every time ends in a dead letter, not in an endless
    series of new attempts."""
    occ = await running(store, T0)
    zombies = detector(store, clock, max_requeues=2)
    for attempt in (1, 2, 3):
        clock.now += timedelta(seconds=THRESHOLD + 1)
        record = StatusRecord(
            occurrence_id=occ.id,
            status=S.RUNNING,
            timestamp=clock.now,
            attempt=attempt,
            instance_id="w-1",
        )
        if attempt > 1:
            await store.apply_status([record])
            clock.now += timedelta(seconds=THRESHOLD + 1)
        assert await zombies.sweep() == 1
        stored = await store.get_occurrence(occ.id)
        if attempt < 3:
            assert (stored.status, stored.attempt) == (S.QUEUED, attempt + 1)
    assert stored.status is S.FAILED
    assert stored.attempt == 3
    assert stored.exception is not None
    assert "gave up after 3 attempts" in stored.exception
    assert (zombies.requeued, zombies.failed) == (2, 1)
    failed = await store.list_failed(FailedQuery(job_id=occ.job_id))
    assert [f.failure_type for f in failed.items] == [FailureType.ZOMBIE]


async def test_zombie_records_by_policy() -> None:
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0)
    occ = new_occurrence(job, T0, T0, PlanSettings())
    requeue = zombie_records(occ, T0)
    assert [(r.status, r.attempt) for r in requeue] == [(S.UNKNOWN, 1), (S.QUEUED, 2)]
    fail = zombie_records(occ, T0, ZombiePolicy.FAIL)
    assert [(r.status, r.attempt, r.failure_type) for r in fail] == [
        (S.UNKNOWN, 1, FailureType.ZOMBIE),
        (S.FAILED, 1, FailureType.ZOMBIE),
    ]


async def test_an_attempt_reported_running_for_an_unknown_holder_gets_a_new_attempt(
    store: SqlStore, clock: Clock
) -> None:
    """A worker that skipped a redelivered copy whose claim was lost reports the attempt
    Running for nobody (worker/claims.py): with nobody to heartbeat it, it is a zombie after
    the threshold, and the next attempt runs — even while workers are registered."""
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0)
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.mark_dispatched([occ], T0)
    await store.apply_status(
        [StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=T0, instance_id=None)]
    )
    clock.now = T0 + timedelta(seconds=31)
    assert await detector(store, clock, live_workers=registry(worker("w-1"))).sweep() == 1
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.QUEUED, 2)


async def test_an_older_running_report_for_the_holder_is_only_a_heartbeat(
    store: SqlStore, clock: Clock
) -> None:
    """The copy's Running, stamped with the claim time, reaches a store that has the holder's
    later heartbeat: it changes nothing (no regression of the last sign of life)."""
    occ = await running(store, T0, instance="w-1")
    later = T0 + timedelta(seconds=20)
    beat = StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=later, instance_id="w-1")
    copy = StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=T0, instance_id="w-1")
    await store.apply_status([beat])
    await store.apply_status([copy])
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.last_heartbeat, stored.instance_id) == (S.RUNNING, later, "w-1")
    clock.now = T0 + timedelta(seconds=31)
    assert await detector(store, clock).sweep() == 0
