"""Zombie detection on a real SQLite store with a fixed clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rota.core.ids import new_id
from rota.core.models import FailureType, Job, Occurrence, OccurrenceStatus, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.ports import StatusResult
from rota.services.zombies import ZombieDetector, zombie_records
from rota.stores.sql import SqlStore

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
THRESHOLD = 30.0


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


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
    await store.mark_dispatched([occ.id], T0)
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
        FailureType.ZOMBIE.value,
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
    registered = {"w-alive"}

    async def live() -> set[str]:
        return set(registered)

    zombies = detector(store, clock, live_instances=live, live_threshold_seconds=300)
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

    async def live() -> set[str]:
        return set(registered)

    zombies = detector(store, clock, live_instances=live)
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
    stale_view = await store.stale_running(clock.now - timedelta(seconds=THRESHOLD), 100)
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
    deadline = asyncio.get_running_loop().time() + 10
    while (await store.get_occurrence(occ.id)).attempt == 1:
        assert asyncio.get_running_loop().time() < deadline, "zombie not requeued"
        await asyncio.sleep(0.02)
    zombies.stop()
    await asyncio.wait_for(task, 5)
    assert zombies.requeued == 1
