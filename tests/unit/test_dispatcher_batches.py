"""The dispatcher's batches: after an idle spell the first is small and each next one twice as
large, up to ``dispatch_batch_size``; a fire takes what is due within the lead and a fifth of
it more, in one batch. On a real SQLite store with the in-process broker."""

from __future__ import annotations

from datetime import timedelta

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import Job, utcnow
from rota.core.records import IndexEntry, OccurrenceQuery
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import FIRST_BATCH, GATHER, Dispatcher
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore

BUCKET = 0


async def due_jobs(
    store: SqlStore, index: MemoryScheduleIndex, count: int, *, in_seconds: float = -1.0
) -> list[Job]:
    """``count`` one-time jobs of a type a group runs, due ``in_seconds`` from now (a second
    ago by default) and indexed."""
    due = (utcnow() + timedelta(seconds=in_seconds)).replace(microsecond=0)
    jobs = [
        Job(id=new_id(), job_type="report", execute_at=due, next_run_at=due, bucket=BUCKET)
        for _ in range(count)
    ]
    await store.create_jobs(jobs)
    await index.upsert([IndexEntry(j.id, BUCKET, due.timestamp()) for j in jobs])
    return jobs


def dispatcher(store: SqlStore, index: MemoryScheduleIndex, **scheduler: float) -> Dispatcher:
    return Dispatcher(
        store,
        index,
        InProcessBroker(),
        WorkerDirectory(MemoryCoordination(), history=store),
        dispatcher_config(SchedulerSettings(**scheduler)),
        lambda: [BUCKET],
    )


async def test_a_burst_is_fired_in_batches_that_start_small_and_double(store: SqlStore) -> None:
    await store.record_job_types([("report", "w")], utcnow())
    index = MemoryScheduleIndex()
    full = 4 * FIRST_BATCH
    firing = dispatcher(store, index, dispatch_batch_size=full)
    await due_jobs(store, index, 12 * FIRST_BATCH)
    sizes = [await firing.dispatch_due([BUCKET]) for _ in range(5)]
    assert sizes == [FIRST_BATCH, 2 * FIRST_BATCH, full, full, FIRST_BATCH]  # 12 in all
    assert await firing.dispatch_due([BUCKET]) == 0  # all fired: an idle spell begins

    await due_jobs(store, index, 2 * FIRST_BATCH)
    assert await firing.dispatch_due([BUCKET]) == FIRST_BATCH  # small again after it
    assert await firing.dispatch_due([BUCKET]) == FIRST_BATCH  # the rest


async def test_a_fire_takes_what_is_due_within_a_fifth_of_the_lead_more(store: SqlStore) -> None:
    """Due times close together share a fire: with a 10 s lead, jobs due in 11 s are fired
    with those due now (seconds of margin either way for a slow machine), one due in 13 s
    is not."""
    assert GATHER == 0.2
    await store.record_job_types([("report", "w")], utcnow())
    index = MemoryScheduleIndex()
    firing = dispatcher(store, index, dispatch_lead_seconds=10.0)
    now = await due_jobs(store, index, 2)
    gathered = await due_jobs(store, index, 3, in_seconds=11.0)
    later = await due_jobs(store, index, 1, in_seconds=13.0)
    assert await firing.dispatch_due([BUCKET]) == 5  # one batch
    for job in [*now, *gathered]:
        [occ] = (await store.list_occurrences(OccurrenceQuery(job_id=job.id))).items
        assert occ.scheduled_for == job.next_run_at
    [left] = later
    assert (await store.list_occurrences(OccurrenceQuery(job_id=left.id))).items == []
    assert await index.earliest([BUCKET]) == left.next_run_at.timestamp()
