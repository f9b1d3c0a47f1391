"""The loader on a real SQLite store and the in-memory index: it mirrors the store's hot window
into the index, drops what the store no longer has, and keeps what was added meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from msgspec.structs import replace

from rota.core.ids import bucket_of, new_id
from rota.core.models import Job
from rota.core.records import DueEntry, IndexEntry
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.loader import Loader
from rota.stores.sql import SqlStore

BUCKETS = 16
WINDOW = 120.0


def job_at(at: datetime) -> Job:
    return Job(id=new_id(), job_type="report", execute_at=at, next_run_at=at)


def in_bucket(job: Job) -> Job:
    return replace(job, bucket=bucket_of(job.id, BUCKETS))


def loader(store: SqlStore, index: MemoryScheduleIndex) -> Loader:
    return Loader(store, index, lambda: range(BUCKETS), window_seconds=WINDOW, interval_seconds=60)


async def indexed(index: MemoryScheduleIndex) -> dict[object, float]:
    return {e.job_id: e.due for e in await index.due(range(BUCKETS), 1e12, 10_000)}


async def test_sync_mirrors_the_window_and_drops_what_the_store_lost(store: SqlStore) -> None:
    now = datetime.now(UTC)
    soon, later = job_at(now + timedelta(seconds=30)), job_at(now + timedelta(hours=1))
    await store.create_jobs([soon, later])
    index = MemoryScheduleIndex()
    gone = new_id()
    await index.upsert([IndexEntry(gone, bucket_of(gone, BUCKETS), now.timestamp())])

    assert await loader(store, index).sync() == 1
    assert await indexed(index) == {soon.id: soon.next_run_at.timestamp()}  # type: ignore[union-attr]


async def test_an_entry_added_while_the_store_is_read_survives_the_sync(
    store: SqlStore, url: str
) -> None:
    """A job created through the API (committed, then indexed) while the loader reads the
    store: the read cannot see it, and the sync must not drop its fresh index entry."""
    now = datetime.now(UTC)
    existing = job_at(now + timedelta(seconds=10))
    await store.create_jobs([existing])
    index = MemoryScheduleIndex()
    created = job_at(now + timedelta(seconds=5))

    class RacingStore(SqlStore):
        async def due_jobs(
            self, until: datetime, buckets: Sequence[int] | None, limit: int
        ) -> list[DueEntry]:
            rows = await super().due_jobs(until, buckets, limit)
            # Meanwhile another server's API creates a job and indexes it.
            await store.create_jobs([created])
            bucket = bucket_of(created.id, BUCKETS)
            await index.upsert([IndexEntry(created.id, bucket, now.timestamp() + 5)])
            return rows

    racing = RacingStore(url)
    await racing.open()
    try:
        await loader(racing, index).sync()
    finally:
        await racing.close()
    assert set(await indexed(index)) == {existing.id, created.id}


async def test_buckets_gained_during_a_sync_are_loaded_at_once(store: SqlStore, url: str) -> None:
    """The bucket owner gains buckets (and kicks the loader) while a sync of the old ones is
    reading the store: the gained buckets are loaded right after, not an interval later."""
    now = datetime.now(UTC)
    first, gained = in_bucket(job_at(now)), in_bucket(job_at(now))
    while gained.bucket == first.bucket:
        gained = in_bucket(job_at(now))
    await store.create_jobs([first, gained])
    owned = [first.bucket]
    reading, go_on = asyncio.Event(), asyncio.Event()

    class SlowStore(SqlStore):
        async def due_jobs(
            self, until: datetime, buckets: Sequence[int] | None, limit: int
        ) -> list[DueEntry]:
            rows = await super().due_jobs(until, buckets, limit)
            reading.set()
            await go_on.wait()
            return rows

    slow = SlowStore(url)
    await slow.open()
    index = MemoryScheduleIndex()
    syncs: list[float] = []
    second_sync = asyncio.Event()

    def loaded(due: float) -> None:
        syncs.append(due)
        if len(syncs) == 2:
            second_sync.set()

    # The interval is far longer than the test: only a kick can start the second sync.
    worker = Loader(
        slow, index, lambda: owned, window_seconds=WINDOW, interval_seconds=600, on_loaded=loaded
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(reading.wait(), 5)
        owned.append(gained.bucket)  # the owner's tick gains a bucket…
        worker.kick()  # … and kicks the loader (Runtime's on_gained)
        go_on.set()
        await asyncio.wait_for(second_sync.wait(), 5)
    finally:
        worker.stop()
        await task
        await slow.close()
    assert set(await indexed(index)) == {first.id, gained.id}


class Clock:
    """The loader's clock, moved by the test (no waiting for the window to pass)."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_a_job_beyond_the_window_enters_the_index_only_as_it_nears(
    store: SqlStore,
) -> None:
    """The index holds the window, not the backlog: of jobs due from 1 minute to a week
    ahead only those within ``WINDOW`` are entered, and each of the others when the clock
    brings its due time into the window."""
    clock = Clock(datetime.now(UTC))
    ahead = [timedelta(minutes=1), timedelta(minutes=5), timedelta(hours=2), timedelta(days=7)]
    jobs = [job_at(clock.now + delta) for delta in ahead]
    await store.create_jobs(jobs)
    index = MemoryScheduleIndex()
    sync = Loader(
        store,
        index,
        lambda: range(BUCKETS),
        window_seconds=WINDOW,
        interval_seconds=60,
        clock=clock,
    )

    assert await sync.sync() == 1
    assert set(await indexed(index)) == {jobs[0].id}

    clock.now += timedelta(minutes=4)  # the 5-minute job is 1 minute away
    await sync.sync()
    assert set(await indexed(index)) == {jobs[0].id, jobs[1].id}

    clock.now += timedelta(hours=2)
    await sync.sync()
    assert set(await indexed(index)) == {jobs[0].id, jobs[1].id, jobs[2].id}
    assert await index.size(range(BUCKETS)) == 3  # the week-ahead job is still out


async def test_a_job_moved_out_of_the_window_or_deleted_leaves_the_index(store: SqlStore) -> None:
    """Edits made behind the index's back (another server, a direct store write): the next
    sync drops the entry of a job moved beyond the window, deleted, or disabled, and enters
    the one moved into the window."""
    now = datetime.now(UTC)
    moved, deleted, disabled, kept = (job_at(now + timedelta(seconds=30)) for _ in range(4))
    later = job_at(now + timedelta(days=1))
    await store.create_jobs([moved, deleted, disabled, kept, later])
    index = MemoryScheduleIndex()
    sync = loader(store, index)
    await sync.sync()
    assert set(await indexed(index)) == {moved.id, deleted.id, disabled.id, kept.id}

    far = now + timedelta(hours=3)
    await store.update_job(replace(moved, execute_at=far, next_run_at=far), expected_version=1)
    await store.delete_job(deleted.id)
    await store.update_job(replace(disabled, is_active=False), expected_version=1)
    soon = now + timedelta(seconds=45)
    await store.update_job(replace(later, execute_at=soon, next_run_at=soon), expected_version=1)
    await sync.sync()
    assert await indexed(index) == {
        kept.id: kept.next_run_at.timestamp(),  # type: ignore[union-attr]
        later.id: soon.timestamp(),
    }


async def test_a_window_fuller_than_the_limit_is_taken_in_slices(store: SqlStore) -> None:
    """More jobs due within the window than a sync reads: the earliest are loaded, and the
    entries after the read's last due time (entered when their jobs were created) stay."""
    now = datetime.now(UTC)
    jobs = [job_at(now + timedelta(seconds=10 + n)) for n in range(5)]
    await store.create_jobs(jobs)
    index = MemoryScheduleIndex()
    last = jobs[-1]
    await index.upsert([IndexEntry(last.id, bucket_of(last.id, BUCKETS), now.timestamp() + 14)])
    sliced = Loader(
        store, index, lambda: range(BUCKETS), window_seconds=WINDOW, interval_seconds=60, limit=2
    )

    assert await sliced.sync() == 2
    assert set(await indexed(index)) == {jobs[0].id, jobs[1].id, last.id}


class _CountingIndex(MemoryScheduleIndex):
    """The in-memory index, counting the entries written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[IndexEntry] = []

    async def upsert(self, entries: Sequence[IndexEntry]) -> None:
        self.written.extend(entries)
        await super().upsert(entries)


async def test_a_sync_writes_only_the_entries_the_index_lacks_or_holds_otherwise(
    store: SqlStore,
) -> None:
    """A backlog due now is read again by every sync until it is fired: the index is not
    rewritten for it each time, only for what is new or moved."""
    now = datetime.now(UTC)
    held, moved, new = (in_bucket(job_at(now - timedelta(seconds=s))) for s in (1, 2, 3))
    await store.create_jobs([held, moved])
    index = _CountingIndex()
    sync = loader(store, index)
    assert await sync.sync() == 2
    assert {e.job_id for e in index.written} == {held.id, moved.id}

    index.written.clear()
    await store.create_jobs([new])
    earlier = moved.next_run_at - timedelta(seconds=5)  # type: ignore[operator]
    await index.upsert([IndexEntry(moved.id, moved.bucket, earlier.timestamp())])
    index.written.clear()
    assert await sync.sync() == 3
    names = {held.id: "held", moved.id: "moved", new.id: "new"}
    assert sorted(names[e.job_id] for e in index.written) == ["moved", "new"]
    assert (await indexed(index))[moved.id] == moved.next_run_at.timestamp()  # type: ignore[union-attr]
