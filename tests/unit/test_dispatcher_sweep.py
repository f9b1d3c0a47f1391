"""The dispatcher's pending sweep claims what it publishes: on a real SQLite store shared by
several dispatchers (as by several servers), with the in-process broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.models import Job, JobMessage, Occurrence
from rota.core.planning import PlanSettings, new_occurrence
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import Dispatcher
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)


class RecordingBroker(InProcessBroker):
    """The in-process broker, remembering every published occurrence; ``fail`` makes the
    next publishes raise as a broker outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[UUID] = []
        self.fail = False

    async def publish_jobs(self, messages: Sequence[JobMessage]) -> None:
        await asyncio.sleep(0)  # let concurrent sweeps interleave here
        if self.fail:
            raise BackendUnavailableError("broker down")
        self.published.extend(m.occurrence_id for m in messages)
        await super().publish_jobs(messages)


@pytest.fixture
async def stores(url: str) -> AsyncIterator[list[SqlStore]]:
    """Three stores on one database: three servers."""
    opened = [SqlStore(url) for _ in range(3)]
    for store in opened:
        await store.open()
    yield opened
    for store in opened:
        await store.close()


def dispatcher(store: SqlStore, broker: RecordingBroker, batch: int = 7) -> Dispatcher:
    settings = SchedulerSettings(dispatch_batch_size=batch, sweeper_claim_seconds=60)
    return Dispatcher(
        store,
        MemoryScheduleIndex(),
        broker,
        WorkerDirectory(MemoryCoordination()),
        dispatcher_config(settings),
        lambda: [],
        lambda: NOW,
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
