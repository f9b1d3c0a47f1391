"""The dispatcher's batches after an idle spell: the first is small and each next one twice
as large, up to ``dispatch_batch_size``; on a real SQLite store with the in-process broker."""

from __future__ import annotations

from datetime import timedelta

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import Job, utcnow
from rota.core.records import IndexEntry
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import FIRST_BATCH, Dispatcher
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore

BUCKET = 0


async def due_jobs(store: SqlStore, index: MemoryScheduleIndex, count: int) -> None:
    """``count`` one-time jobs of a type a group runs, due a second ago and indexed."""
    due = (utcnow() - timedelta(seconds=1)).replace(microsecond=0)
    jobs = [
        Job(id=new_id(), job_type="report", execute_at=due, next_run_at=due, bucket=BUCKET)
        for _ in range(count)
    ]
    await store.create_jobs(jobs)
    await index.upsert([IndexEntry(j.id, BUCKET, due.timestamp()) for j in jobs])


async def test_a_burst_is_fired_in_batches_that_start_small_and_double(store: SqlStore) -> None:
    await store.record_job_types([("report", "w")], utcnow())
    index = MemoryScheduleIndex()
    full = 4 * FIRST_BATCH
    dispatcher = Dispatcher(
        store,
        index,
        InProcessBroker(),
        WorkerDirectory(MemoryCoordination(), history=store),
        dispatcher_config(SchedulerSettings(dispatch_batch_size=full)),
        lambda: [BUCKET],
    )
    await due_jobs(store, index, 12 * FIRST_BATCH)
    sizes = [await dispatcher.dispatch_due([BUCKET]) for _ in range(5)]
    assert sizes == [FIRST_BATCH, 2 * FIRST_BATCH, full, full, FIRST_BATCH]  # 12 in all
    assert await dispatcher.dispatch_due([BUCKET]) == 0  # all fired: an idle spell begins

    await due_jobs(store, index, 2 * FIRST_BATCH)
    assert await dispatcher.dispatch_due([BUCKET]) == FIRST_BATCH  # small again after it
    assert await dispatcher.dispatch_due([BUCKET]) == FIRST_BATCH  # the rest
