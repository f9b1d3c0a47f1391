"""The dispatcher on PostgreSQL when a due job's row is locked by another transaction (the
status tracker writing the job's statistics, or another server dispatching it while a bucket
changes hands): the store passes the job over, and its index entry is kept and tried again
shortly — not dropped until the loader's next sync (15 s by default) puts it back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.ids import bucket_of, new_id
from rota.core.models import Job, utcnow
from rota.core.records import IndexEntry, OccurrenceQuery
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import LOCKED_RETRY_SECONDS, Dispatcher
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore
from tests.stores import pg_database

pytestmark = pytest.mark.postgres

BUCKETS = 16


@pytest.fixture
def url(pg_template: str) -> Iterator[str]:
    with pg_database(pg_template) as database:
        yield database


@pytest.fixture
async def store(url: str) -> AsyncIterator[SqlStore]:
    sql = SqlStore(url)
    await sql.open()
    yield sql
    await sql.close()


async def test_a_locked_due_job_stays_in_the_index_and_fires_once_the_lock_is_gone(
    store: SqlStore, url: str
) -> None:
    due = datetime.now(UTC) - timedelta(seconds=1)
    job_id = new_id()
    job = Job(
        id=job_id,
        job_type="report",
        execute_at=due,
        next_run_at=due,
        bucket=bucket_of(job_id, BUCKETS),
    )
    await store.create_jobs([job])
    await store.record_job_types([("report", "w")], utcnow())  # a group runs it
    index = MemoryScheduleIndex()
    await index.upsert([IndexEntry(job.id, job.bucket, due.timestamp())])
    dispatcher = Dispatcher(
        store,
        index,
        InProcessBroker(),
        WorkerDirectory(MemoryCoordination(), history=store),
        dispatcher_config(SchedulerSettings()),
        lambda: [job.bucket],
    )

    lead = dispatcher_config(SchedulerSettings()).dispatch_lead_seconds
    other = await asyncpg.connect(url)
    try:
        locking = other.transaction()
        await locking.start()
        await other.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", job.id)
        before = time.time()
        assert await dispatcher.dispatch_due([job.bucket]) == 0
        (entry,) = await index.due([job.bucket], time.time() + 3600, 10)
        assert entry.job_id == job.id
        # read again LOCKED_RETRY_SECONDS later (an entry is read ``lead`` before its time)
        retry = entry.due - lead
        assert before + LOCKED_RETRY_SECONDS <= retry <= time.time() + LOCKED_RETRY_SECONDS
        # The loop does not read it back at once while the row stays locked: one look per
        # retry, not one statement after another.
        looks = dispatcher.stats.batches
        loop = asyncio.create_task(dispatcher.run())
        try:  # the loop runs for two retries past the first (a span of time, not a wait)
            await asyncio.sleep(retry + 2 * LOCKED_RETRY_SECONDS - time.time())
        finally:
            dispatcher.stop()
            await loop
        assert 1 <= dispatcher.stats.batches - looks <= 3
        (entry,) = await index.due([job.bucket], time.time() + 3600, 10)
        await locking.rollback()
    finally:
        await other.close()

    await asyncio.sleep(max(0.0, entry.due - lead - time.time()))  # the retry's time
    await dispatcher.dispatch_due([job.bucket])  # fired: Skipped (no worker here), recorded
    occurrences = await store.list_occurrences(OccurrenceQuery(job_id=job.id))
    assert [o.scheduled_for for o in occurrences.items] == [due]
    assert await index.size([job.bucket]) == 0  # a one-time job: done
