"""Dead-worker recovery: the occurrences of a worker instance whose registration expired get
their next attempt at once (no zombie threshold), with the in-memory coordination's registry and
the detector on one injected clock; and the attempts a worker interrupted at its stop."""

from __future__ import annotations

from datetime import datetime, timedelta

from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import (
    FailureType,
    Job,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    ZombiePolicy,
)
from rota.core.planning import PlanSettings, new_occurrence
from rota.services.zombies import ZombieDetector
from rota.stores.sql import SqlStore
from tests.unit.registry_clock import T0, Clock, info

S = OccurrenceStatus
TTL = 6.0
"""The registration's lifetime: three missed heartbeats of 2 s (the defaults)."""
SILENCE = 5.0


def detector(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination, **kwargs: object
) -> ZombieDetector:
    return ZombieDetector(
        store,
        threshold_seconds=30.0,
        interval_seconds=10.0,
        clock=clock,
        live_workers=coordination.workers,
        dead_silence_seconds=SILENCE,
        **kwargs,  # type: ignore[arg-type]
    )


async def running(
    store: SqlStore,
    at: datetime,
    instance: str,
    *,
    zombie_policy: ZombiePolicy | None = None,
    zombie_threshold_seconds: float | None = None,
) -> Occurrence:
    job = Job(
        id=new_id(),
        job_type="report",
        execute_at=T0,
        next_run_at=T0,
        zombie_policy=zombie_policy,
        zombie_threshold_seconds=zombie_threshold_seconds,
    )
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.mark_dispatched([occ], T0)
    await store.apply_status(
        [StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=at, instance_id=instance)]
    )
    return occ


async def test_a_dead_instances_occurrence_gets_its_next_attempt_when_its_registration_expires(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    await coordination.register_worker(info("w-dead"), TTL)
    await coordination.register_worker(info("w-live"), TTL)
    dead = await running(store, T0, "w-dead")
    live = await running(store, T0, "w-live")
    zombies = detector(store, clock, coordination)

    clock.advance(TTL - 0.5)  # both registered, both silent past the silence
    assert await zombies.sweep_dead() == 0
    await coordination.register_worker(info("w-live"), TTL)  # w-live beats; w-dead was killed
    clock.advance(1.0)  # w-dead's registration expired, 6.5 s after its last sign of life
    assert await zombies.sweep_dead() == 1

    stored = await store.get_occurrence(dead.id)
    assert (stored.status, stored.attempt, stored.due_at) == (S.QUEUED, 2, clock.now)
    assert stored.exception == (
        "worker instance w-dead is gone (its registration expired); no heartbeat for 6 s"
    )
    assert [(c.to_status, c.reason) for c in stored.status_changes[-2:]] == [
        (S.UNKNOWN, f"{FailureType.ZOMBIE.value}: {stored.exception}"),
        (S.QUEUED, None),
    ]
    assert (await store.get_occurrence(live.id)).status is S.RUNNING
    assert zombies.requeued == 1
    # the per-occurrence zombie threshold (30 s) has not been reached: sweep() finds nothing
    assert await zombies.sweep() == 0


async def test_a_late_report_of_the_dead_attempt_is_ignored(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    occ = await running(store, T0, "w-dead")
    clock.advance(TTL + 1)
    assert await detector(store, clock, coordination).sweep_dead() == 1
    late = StatusRecord(
        occurrence_id=occ.id,
        status=S.COMPLETED,
        timestamp=clock.now,
        attempt=1,
        instance_id="w-dead",
        result="late",
    )
    result = await store.apply_status([late])
    assert result.applied == []
    assert [i.reason for i in result.ignored] == ["late"]
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.result) == (S.QUEUED, 2, None)


async def test_an_unregistered_instance_that_still_reports_is_not_taken_for_dead(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    """Cut off from the registry (Redis) only: its Running re-reports still reach the store."""
    occ = await running(store, T0, "w-1")
    zombies = detector(store, clock, coordination)
    clock.advance(TTL + 1)
    beat = StatusRecord(
        occurrence_id=occ.id, status=S.RUNNING, timestamp=clock.now - timedelta(seconds=2)
    )
    await store.apply_status([beat])
    assert await zombies.sweep_dead() == 0
    clock.advance(SILENCE - 2 + 0.5)  # its reports stopped too
    assert await zombies.sweep_dead() == 1
    assert (await store.get_occurrence(occ.id)).attempt == 2


async def test_the_jobs_own_zombie_threshold_does_not_delay_a_dead_instance(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    occ = await running(store, T0, "w-1", zombie_threshold_seconds=3600.0)
    clock.advance(TTL + 1)
    assert await detector(store, clock, coordination).sweep_dead() == 1
    assert (await store.get_occurrence(occ.id)).status is S.QUEUED


async def test_the_fail_policy_fails_a_dead_instances_occurrence(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    occ = await running(store, T0, "w-1", zombie_policy=ZombiePolicy.FAIL)
    clock.advance(TTL + 1)
    zombies = detector(store, clock, coordination)
    assert await zombies.sweep_dead() == 1
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.FAILED, 1)
    assert (zombies.requeued, zombies.failed) == (0, 1)


async def test_only_the_leader_acts_and_only_with_a_registry(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    occ = await running(store, T0, "w-1")
    clock.advance(TTL + 1)
    leader = False
    follower = detector(store, clock, coordination, is_leader=lambda: leader)
    assert await follower.sweep_dead() == 0
    no_registry = ZombieDetector(store, threshold_seconds=30.0, interval_seconds=1, clock=clock)
    assert await no_registry.sweep_dead() == 0
    assert (await store.get_occurrence(occ.id)).status is S.RUNNING
    leader = True
    assert await follower.sweep_dead() == 1


async def test_an_occurrence_reported_running_for_nobody_waits_for_the_threshold(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    """No instance recorded (a redelivery after a loss of the claim memory): no dead worker to
    go by, so the zombie threshold decides."""
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0)
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.apply_status([StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=T0)])
    clock.advance(TTL + 1)
    assert await detector(store, clock, coordination).sweep_dead() == 0


async def test_an_attempt_interrupted_at_a_workers_stop_gets_its_next_attempt(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    """The worker reports Unknown at once (its stop's grace ran out): no wait for expiry."""
    await coordination.register_worker(info("w-1"), TTL)
    occ = await running(store, T0, "w-1")
    fail = await running(store, T0, "w-1", zombie_policy=ZombiePolicy.FAIL)
    clock.advance(1.0)
    text = "interrupted: worker stopped; still running after its grace of 30 s"
    await store.apply_status(
        [
            StatusRecord(
                occurrence_id=o.id,
                status=S.UNKNOWN,
                timestamp=clock.now,
                instance_id="w-1",
                exception=text,
                failure_type=FailureType.ZOMBIE,
                duration_ms=1000.0,
            )
            for o in (occ, fail)
        ]
    )
    zombies = detector(store, clock, coordination)
    assert await zombies.sweep_dead() == 2
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.exception) == (S.QUEUED, 2, text)
    failed = await store.get_occurrence(fail.id)
    assert (failed.status, failed.exception) == (S.FAILED, f"zombie: {text}")
    # an interruption is no failure of the job's own: only the fail policy's dead letter counts
    job = await store.get_job(occ.job_id)
    assert (job.failure_count, job.consecutive_failures) == (0, 0)
