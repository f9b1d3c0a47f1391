"""A redelivered copy whose claim was lost (the claim memory flushed, or unreachable) is not run
by the worker that gets it; it is reported Running for the unknown holder
(``UNKNOWN_HOLDER``), and the store settles it (docs/reliability.md, "One run per attempt"):

- Queued there (nobody reported it Running): after the dead-worker silence it gets its next
  attempt, not after the zombie threshold;
- Running there for a real holder, or reported by one within the silence (its Running report
  was still on its way): that holder is named, and its own registration and heartbeats tell
  whether it lives;
- final there: nothing.

The rules on the SQL store (SQLite) with the in-memory coordination's registry, then the whole
path on the in-memory adapters: executor, in-process broker, status tracker, zombie detector."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

import rota
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import (
    UNKNOWN_HOLDER,
    Job,
    JobMessage,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    utcnow,
)
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.transitions import Current, apply_records
from rota.sdk.registry import JobRegistry
from rota.services.tracker import StatusTracker
from rota.services.zombies import ZombieDetector
from rota.stores.sql import SqlStore
from rota.worker.claims import CLAIM_EPOCH, AttemptClaims
from rota.worker.localstore import LocalStore
from tests.executors import make_executor
from tests.helpers import eventually
from tests.unit.registry_clock import T0, Clock, info

S = OccurrenceStatus
SILENCE = 5.0
THRESHOLD = 30.0
WORKER = "test-worker"


def detector(store: SqlStore, clock: Clock, coordination: MemoryCoordination) -> ZombieDetector:
    return ZombieDetector(
        store,
        threshold_seconds=THRESHOLD,
        interval_seconds=10.0,
        clock=clock,
        live_workers=coordination.workers,
        dead_silence_seconds=SILENCE,
    )


async def queued(store: SqlStore) -> Occurrence:
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=T0)
    await store.create_jobs([job])
    occ = new_occurrence(job, T0, T0, PlanSettings())
    await store.insert_occurrences([occ])
    await store.mark_dispatched([occ], T0)
    return occ


def running(oid: UUID, at: datetime, instance: str | None, attempt: int = 1) -> StatusRecord:
    return StatusRecord(
        occurrence_id=oid, status=S.RUNNING, timestamp=at, attempt=attempt, instance_id=instance
    )


# --- the rule, without a database -------------------------------------------------------------


def test_a_real_holders_report_names_it_the_holder_of_an_attempt_reported_for_nobody() -> None:
    oid = new_id()
    occ = Current(new_id(), "report", "g", int(S.QUEUED), 1, None, None, None, T0)
    batch = apply_records(
        {oid: occ},
        [
            running(oid, T0 + timedelta(seconds=1), UNKNOWN_HOLDER),  # the copy, parked
            running(oid, T0, "w-1"),  # the holder's Running, late (its start was earlier)
        ],
    )
    assert batch.heartbeats == 1
    assert (occ.status, occ.instance_id) == (S.RUNNING, "w-1")
    assert occ.changed["instance_id"] == "w-1"
    assert occ.last_heartbeat == T0 + timedelta(seconds=1)  # no regression of the last sign


def test_a_copy_reported_for_nobody_does_not_rename_a_known_holder() -> None:
    oid = new_id()
    occ = Current(new_id(), "report", "g", int(S.RUNNING), 1, T0, None, T0, T0, 0, "w-1")
    batch = apply_records({oid: occ}, [running(oid, T0, UNKNOWN_HOLDER), running(oid, T0, "w-2")])
    assert batch.heartbeats == 2
    assert occ.instance_id == "w-1"
    assert "instance_id" not in occ.changed


# --- the store's answer, and the dead-worker sweep ---------------------------------------------


async def test_an_attempt_nobody_reported_running_gets_its_next_attempt_after_the_silence(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    """Queued in the store: no holder ever reported it. Its copy's report for nobody makes it
    one of an unregistered instance: the next attempt comes after the dead-worker silence
    (5 s), while live workers are registered and long before the zombie threshold (30 s)."""
    await coordination.register_worker(info("w-live"), 60)
    occ = await queued(store)
    await store.apply_status([running(occ.id, T0, UNKNOWN_HOLDER)])
    zombies = detector(store, clock, coordination)

    clock.advance(SILENCE - 1)
    assert await zombies.sweep_dead() == 0  # a Running report on its way still has time
    clock.advance(1.5)
    assert await zombies.sweep_dead() == 1
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.due_at) == (S.QUEUED, 2, clock.now)
    assert "reported running by no worker" in (stored.exception or "")

    # One run per attempt: attempt 1's holder, if it did start it after all, is now late.
    result = await store.apply_status([running(occ.id, clock.now, "w-late")])
    assert [i.reason for i in result.ignored] == ["late"]
    assert (await store.get_occurrence(occ.id)).attempt == 2


async def test_a_holders_running_report_arriving_after_the_question_keeps_it(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    """The race: the holder's Running report was still in its outbox when the copy was
    parked. It arrives within the silence: the holder is named, and while it is registered
    nothing is taken from it, whatever the silence; once it is gone, it is a dead worker's."""
    await coordination.register_worker(info("w-1"), 60)
    occ = await queued(store)
    await store.apply_status([running(occ.id, T0 + timedelta(seconds=1), UNKNOWN_HOLDER)])
    clock.advance(3)
    await store.apply_status([running(occ.id, T0, "w-1")])  # replayed from its outbox
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.instance_id) == (S.RUNNING, "w-1")

    zombies = detector(store, clock, coordination)
    clock.advance(20)
    assert await zombies.sweep_dead() == 0  # registered: its heartbeats tell
    await coordination.unregister_worker("w-1")
    assert await zombies.sweep_dead() == 1
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.QUEUED, 2)
    assert "w-1 is gone" in (stored.exception or "")


async def test_a_copy_of_an_attempt_running_or_final_in_the_store_changes_nothing(
    store: SqlStore, clock: Clock, coordination: MemoryCoordination
) -> None:
    await coordination.register_worker(info("w-1"), 60)
    runs, done = await queued(store), await queued(store)
    await store.apply_status(
        [
            running(runs.id, T0, "w-1"),
            running(done.id, T0, "w-1"),
            StatusRecord(
                occurrence_id=done.id, status=S.COMPLETED, timestamp=T0, instance_id="w-1"
            ),
        ]
    )
    result = await store.apply_status(
        [running(o.id, T0 + timedelta(seconds=1), UNKNOWN_HOLDER) for o in (runs, done)]
    )
    assert result.heartbeats == 1
    assert [i.reason for i in result.ignored] == ["transition"]
    clock.advance(SILENCE + 1)
    assert await detector(store, clock, coordination).sweep_dead() == 0
    stored = {o.id: await store.get_occurrence(o.id) for o in (runs, done)}
    assert (stored[runs.id].status, stored[runs.id].instance_id) == (S.RUNNING, "w-1")
    assert (stored[done.id].status, stored[done.id].attempt) == (S.COMPLETED, 1)


# --- the whole path on the in-memory adapters --------------------------------------------------

ran: Counter[tuple[UUID, int]] = Counter()


@rota.job("report")
async def report(ctx: rota.JobContext) -> None:
    ran[ctx.occurrence_id, ctx.attempt] += 1


def message_of(occ: Occurrence, attempt: int) -> JobMessage:
    return JobMessage(
        occurrence_id=occ.id,
        job_id=occ.job_id,
        job_type=occ.job_type,
        job_data=None,
        scheduled_for=occ.scheduled_for,
        timestamp=utcnow(),
        retry_count=attempt - 1,
        worker_id=WORKER,
    )


async def redelivered(broker: InProcessBroker, message: JobMessage) -> None:
    """Publish ``message`` and make its delivery a redelivery (taken and given back, as by a
    consumer whose channel died)."""
    await broker.declare_worker_group(WORKER, [message.job_type])
    await broker.publish_jobs([message])
    consumer = broker.consume_jobs(WORKER, 1)
    delivery = await anext(consumer)
    await delivery.reject(requeue=True)
    await consumer.aclose()


async def test_a_copy_redelivered_after_a_loss_runs_as_the_next_attempt_once(
    store: SqlStore, tmp_path: Path
) -> None:
    """A worker that knew an older claim epoch gets a redelivered copy of a fire nobody
    started: it does not run it, the store has it Queued, and the detector gives it its next
    attempt after the silence (here 0.3 s; the zombie threshold is 30 s). That attempt, sent
    again (the dispatcher's part), runs once; attempt 1 never runs."""
    ran.clear()
    broker = InProcessBroker()
    await broker.start()
    local = await LocalStore.open(tmp_path / "worker.sqlite3")
    await local.set_meta(CLAIM_EPOCH, "an-older-token")  # Redis lost its data since
    coordination = MemoryCoordination()
    executor = make_executor(
        broker,
        JobRegistry([report]),
        worker_id=WORKER,
        instance_id="w-1",
        concurrency=2,
        sync_threads=1,
        flush_interval=0.005,
        heartbeat_interval=0.05,
        claims=AttemptClaims(coordination, "w-1", ttl=3600.0, store=local),
    )
    tracker = StatusTracker(store, broker, batch_size=100, max_wait=0.01)
    zombies = ZombieDetector(
        store,
        threshold_seconds=THRESHOLD,
        interval_seconds=THRESHOLD,
        live_workers=coordination.workers,
        dead_interval_seconds=0.05,
        dead_silence_seconds=0.3,
    )
    tasks = [asyncio.create_task(tracker.run()), asyncio.create_task(zombies.run())]
    try:
        occ = await queued(store)
        await redelivered(broker, message_of(occ, 1))
        await executor.start()
        started = asyncio.get_running_loop().time()

        async def next_attempt() -> bool:
            stored = await store.get_occurrence(occ.id)
            return (stored.status, stored.attempt) == (S.QUEUED, 2)

        await eventually(next_attempt, 10, "the next attempt")
        assert asyncio.get_running_loop().time() - started < THRESHOLD / 10
        assert ran == {}  # the copy was not run
        await broker.publish_jobs([message_of(occ, 2)])

        async def completed() -> bool:
            return (await store.get_occurrence(occ.id)).status is S.COMPLETED

        await eventually(completed, 10, "attempt 2 completed")
        assert ran == {(occ.id, 2): 1}
        changes = (await store.get_occurrence(occ.id)).status_changes
        history = [(c.to_status, c.attempt) for c in changes]
        assert history.count((S.RUNNING, 1)) == 1  # the parked copy's report, nobody's run
        assert history.count((S.COMPLETED, 2)) == 1
    finally:
        await executor.stop(grace=1.0)
        tracker.stop()
        zombies.stop()
        await broker.close()  # ends the tracker's consumer
        await asyncio.gather(*tasks)
        await local.close()
