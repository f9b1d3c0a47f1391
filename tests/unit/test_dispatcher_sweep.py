"""The dispatcher's pending sweep claims what it publishes, and leaves alone only what another
dispatcher's fire claimed (no age-based grace): on a real SQLite store shared by several
dispatchers (as by several servers), with the in-process broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.models import Job, JobMessage, Occurrence, WorkerInfo, utcnow
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.records import IndexEntry, OccurrenceQuery
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import Dispatcher
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore
from tests.helpers import eventually

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)
GRACE = 2.0
"""``ROTA_SCHEDULER__SWEEPER_GRACE_SECONDS``' default: how long a fire's own claim lasts in
the distributed mode."""


class RecordingBroker(InProcessBroker):
    """The in-process broker, remembering every published occurrence; ``fail`` makes the
    next publishes raise as a broker outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[UUID] = []
        self.fail = False

    async def publish_jobs(
        self, messages: Sequence[JobMessage], *, envelopes: Mapping[str, int] | None = None
    ) -> None:
        await asyncio.sleep(0)  # let concurrent sweeps interleave here
        if self.fail:
            raise BackendUnavailableError("broker down")
        self.published.extend(m.occurrence_id for m in messages)
        await super().publish_jobs(messages, envelopes=envelopes)


@pytest.fixture
async def stores(url: str) -> AsyncIterator[list[SqlStore]]:
    """Three stores on one database: three servers."""
    opened = [SqlStore(url) for _ in range(3)]
    for store in opened:
        await store.open()
    await opened[0].record_job_types([("report", "w")], T0)  # the group the sweeps send to
    yield opened
    for store in opened:
        await store.close()


def dispatcher(
    store: SqlStore,
    broker: RecordingBroker,
    batch: int = 7,
    *,
    at: datetime = NOW,
    grace: float = 0.0,
) -> Dispatcher:
    settings = SchedulerSettings(
        dispatch_batch_size=batch, sweeper_claim_seconds=60, sweeper_interval_seconds=60
    )
    return Dispatcher(
        store,
        MemoryScheduleIndex(),
        broker,
        WorkerDirectory(MemoryCoordination(), history=store),
        dispatcher_config(settings),
        lambda: [],
        lambda: at,
        pending_grace=grace,
    )


async def pending(store: SqlStore, count: int) -> list[Occurrence]:
    job = Job(id=new_id(), job_type="report", execute_at=T0, next_run_at=None)
    await store.create_jobs([job])
    occs = [
        new_occurrence(job, T0 + timedelta(seconds=i), T0, PlanSettings()) for i in range(count)
    ]
    await store.insert_occurrences(occs)
    return occs


async def test_several_sweeping_servers_publish_each_occurrence_once(
    stores: list[SqlStore],
) -> None:
    occs = await pending(stores[0], 40)
    broker = RecordingBroker()
    counts = await asyncio.gather(
        *(dispatcher(s, broker).dispatch_pending() for s in [*stores, *stores])
    )
    assert sum(counts) == len(occs)
    assert len(broker.published) == len(set(broker.published)), "published twice"
    assert sorted(broker.published) == sorted(o.id for o in occs)
    assert await stores[0].undispatched(NOW, 100) == []
    for occ in occs:
        stored = await stores[0].get_occurrence(occ.id)
        assert (stored.dispatched_at, stored.due_at) == (NOW, occ.due_at)


async def test_failed_publish_releases_the_claim(stores: list[SqlStore]) -> None:
    store = stores[0]
    occs = await pending(store, 3)
    broker = RecordingBroker()
    broker.fail = True
    with pytest.raises(BackendUnavailableError):
        await dispatcher(store, broker).dispatch_pending()
    again = await store.undispatched(NOW, 10)
    assert [(o.id, o.due_at) for o in again] == [(o.id, o.due_at) for o in occs]

    broker.fail = False
    assert await dispatcher(store, broker).dispatch_pending() == 3
    assert broker.published == [o.id for o in occs]


async def test_a_sweep_that_failed_is_tried_again_after_the_backoff_not_the_interval(
    stores: list[SqlStore],
) -> None:
    """A publication that failed (a broker blip) hands its batch back; the loop sweeps again
    after its error backoff (0.1 s first), not a whole sweep interval (here a minute) later."""
    store = stores[0]
    occs = await pending(store, 2)
    broker = RecordingBroker()
    broker.fail = True
    looping = dispatcher(store, broker)
    loop = asyncio.create_task(looping.run())
    try:
        await eventually(lambda: looping.stats.errors >= 1, 10, "the failed sweep")
        broker.fail = False
        await eventually(lambda: len(broker.published) == 2, 10, "the sweep tried again")
    finally:
        looping.stop()
        await loop
    assert sorted(broker.published) == sorted(o.id for o in occs)


# --- what a distributed sweep leaves alone ----------------------------------------------------


async def test_a_distributed_sweep_publishes_what_was_created_this_instant(
    stores: list[SqlStore],
) -> None:
    """A trigger, a dead letter's retry, a released dependent, a backfill's run: created just
    now and unclaimed, published by the first sweep (its wake-up's), however young."""
    job = Job(id=new_id(), job_type="report", execute_at=NOW, next_run_at=None)
    await stores[0].create_jobs([job])
    triggered = new_occurrence(job, NOW, NOW, PlanSettings(), trigger_reason="manual")
    await stores[0].insert_occurrences([triggered])
    broker = RecordingBroker()
    assert await dispatcher(stores[1], broker, grace=GRACE).dispatch_pending() == 1
    assert broker.published == [triggered.id]


async def fire_once(store: SqlStore, broker: RecordingBroker) -> Occurrence:
    """Fire a due job through a distributed dispatcher (the real clock) and return its
    occurrence as stored (publishing failed if ``broker.fail``: the server died meanwhile)."""
    due = (utcnow() - timedelta(seconds=1)).replace(microsecond=0)
    job = Job(id=new_id(), job_type="report", execute_at=due, next_run_at=due)
    await store.create_jobs([job])
    index = MemoryScheduleIndex()
    await index.upsert([IndexEntry(job.id, job.bucket, due.timestamp())])
    coordination = MemoryCoordination()
    worker = WorkerInfo(
        instance_id="w-1", worker_id="w", host="h", pid=1, job_types={"report": {}}, concurrency=1
    )
    await coordination.register_worker(worker, 60)
    firing = Dispatcher(
        store,
        index,
        broker,
        WorkerDirectory(coordination),
        dispatcher_config(SchedulerSettings()),
        lambda: [job.bucket],
        pending_grace=GRACE,
    )
    if broker.fail:
        with pytest.raises(BackendUnavailableError):
            await firing.dispatch_due([job.bucket])
    else:
        assert await firing.dispatch_due([job.bucket]) == 1
    [occ] = (await store.list_occurrences(OccurrenceQuery(job_id=job.id))).items
    return occ


async def test_a_fire_is_left_to_its_dispatcher_until_its_claim_runs_out(
    stores: list[SqlStore],
) -> None:
    dead = RecordingBroker()
    dead.fail = True  # the firing server dies between its commit and its publish
    occ = await fire_once(stores[0], dead)
    claim_end = occ.created_at + timedelta(seconds=GRACE)
    # inserted dispatched, its own due time; the store's record of its batch holds the claim
    assert (occ.dispatched_at, occ.due_at) == (occ.created_at, occ.scheduled_for)

    broker = RecordingBroker()
    early = claim_end - timedelta(milliseconds=1)
    assert await dispatcher(stores[1], broker, at=early, grace=GRACE).dispatch_pending() == 0
    # the sweeper is the backstop: the claim ran out, another server sends it
    assert await dispatcher(stores[2], broker, at=claim_end, grace=GRACE).dispatch_pending() == 1
    assert broker.published == [occ.id]


async def test_a_published_fire_ends_its_claim(stores: list[SqlStore]) -> None:
    broker = RecordingBroker()
    occ = await fire_once(stores[0], broker)
    assert broker.published == [occ.id]
    assert occ.dispatched_at is not None
    assert occ.due_at == occ.scheduled_for  # its own due time again, not the claim's end
    later = occ.created_at + timedelta(seconds=GRACE)
    assert await dispatcher(stores[1], broker, at=later, grace=GRACE).dispatch_pending() == 0
    assert broker.published == [occ.id]
