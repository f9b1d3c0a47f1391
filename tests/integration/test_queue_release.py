"""A Queue-policy job's held occurrence is released the moment the one before it ends, when
another server applies that end than the one that holds it, with the distributed mode's
sweep grace: two servers' stores and dispatchers on one database (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from uuid import UUID

import pytest

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import ConcurrencyPolicy, Job, OccurrenceStatus, StatusRecord, utcnow
from rota.core.planning import PlanSettings, new_occurrence
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import Dispatcher
from rota.services.events import EventPublisher
from rota.services.reactions import StatusReactions
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore
from tests.helpers import eventually

S = OccurrenceStatus
GRACE = 2.0
"""``ROTA_SCHEDULER__SWEEPER_GRACE_SECONDS``' default: the distributed mode's."""
DISPATCH_GAP = timedelta(seconds=1)
"""Released at once, not by a later sweep (5 s apart here) nor after a claim (2 s): a bound
far from both, and from what a loaded machine adds to an immediate release (136 ms seen)."""


class NoJobs:
    async def drop_disabled(self, entries: Sequence[tuple[int, UUID]]) -> None:
        pass


@pytest.fixture
async def servers(store_url: str) -> AsyncIterator[tuple[SqlStore, SqlStore]]:
    a, b = SqlStore(store_url), SqlStore(store_url)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_a_held_occurrence_goes_when_another_server_applies_the_end_before_it(
    servers: tuple[SqlStore, SqlStore],
) -> None:
    store_a, store_b = servers
    now = utcnow()
    job = Job(
        id=new_id(),
        job_type="report",
        execute_at=now + timedelta(days=1),
        next_run_at=None,
        concurrency_policy=ConcurrencyPolicy.QUEUE,
    )
    await store_a.create_jobs([job])
    await store_a.record_job_types([("report", "w")], utcnow())  # a group runs it
    first = new_occurrence(job, now - timedelta(seconds=1), now, PlanSettings(), dispatched_at=now)
    await store_a.insert_occurrences([first])
    running = StatusRecord(occurrence_id=first.id, status=S.RUNNING, timestamp=now)
    await store_a.apply_status([running])
    held = new_occurrence(job, now, utcnow(), PlanSettings())
    await store_a.insert_occurrences([held])  # behind the first: held

    # Server B: its dispatcher sweeps with the distributed grace; its tracker applies the end.
    broker = InProcessBroker()
    directory = WorkerDirectory(MemoryCoordination(), history=store_b)
    dispatcher = Dispatcher(
        store_b,
        MemoryScheduleIndex(),
        broker,
        directory,
        dispatcher_config(SchedulerSettings(sweeper_interval_seconds=5.0)),
        lambda: [],
        pending_grace=GRACE,
    )
    reactions = StatusReactions(
        events=EventPublisher(MemoryCoordination()), dispatcher=dispatcher, jobs=NoJobs()
    )
    loop = asyncio.create_task(dispatcher.run())
    try:
        assert await dispatcher.dispatch_pending() == 0  # held while the first runs
        ended = StatusRecord(
            occurrence_id=first.id, status=S.COMPLETED, timestamp=utcnow(), attempt=1
        )
        reactions(await store_b.apply_status([ended]))

        async def dispatched() -> bool:
            return (await store_b.get_occurrence(held.id)).dispatched_at is not None

        await eventually(dispatched, 10, "the held occurrence to be dispatched")
    finally:
        dispatcher.stop()
        await loop
    end = (await store_b.get_occurrence(first.id)).end_time
    released = (await store_b.get_occurrence(held.id)).dispatched_at
    assert end is not None
    assert released is not None
    # Seen once in CI (5.8 s, the next sweep's), not reproduced in 150 runs under load: what
    # the dispatcher went through says which pass missed it if it happens again.
    assert released - end <= DISPATCH_GAP, (
        f"released {released - end} after the end; {dispatcher.stats}; "
        f"history read: {directory.complete}"
    )
