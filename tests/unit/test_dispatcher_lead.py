"""The dispatcher's lead: fires due within it are committed (and sent) ahead, each with its
own fire time; on a real SQLite store with the in-process broker."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from rota.app.configs import dispatcher_config
from rota.app.settings import SchedulerSettings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import Job, utcnow
from rota.core.records import IndexEntry, OccurrenceQuery
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.dispatcher import Dispatcher
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore

AHEAD = timedelta(seconds=10)
"""How far ahead the job is due: far more than any stall of a loaded machine."""


async def indexed_dispatcher(
    store: SqlStore, job: Job, lead: float
) -> tuple[Dispatcher, MemoryScheduleIndex]:
    """``job`` stored and indexed at its ``next_run_at``, a group running its type, and a
    dispatcher with ``lead`` over its bucket (and its index)."""
    assert job.next_run_at is not None
    await store.create_jobs([job])
    await store.record_job_types([(job.job_type, "w")], utcnow())  # a group runs it
    index = MemoryScheduleIndex()
    await index.upsert([IndexEntry(job.id, job.bucket, job.next_run_at.timestamp())])
    dispatcher = Dispatcher(
        store,
        index,
        InProcessBroker(),
        WorkerDirectory(MemoryCoordination(), history=store),
        dispatcher_config(SchedulerSettings(dispatch_lead_seconds=lead)),
        lambda: [job.bucket],
    )
    return dispatcher, index


@pytest.mark.parametrize("lead", [0.0, 30.0])
async def test_a_fire_within_the_lead_is_dispatched_ahead(store: SqlStore, lead: float) -> None:
    due = (utcnow() + AHEAD).replace(microsecond=0)
    job = Job(id=new_id(), job_type="report", execute_at=due, next_run_at=due)
    dispatcher, index = await indexed_dispatcher(store, job, lead)
    assert dispatcher.lead_seconds == lead
    before = utcnow()
    await dispatcher.dispatch_due([job.bucket])
    page = await store.list_occurrences(OccurrenceQuery(job_id=job.id))
    if lead == 0:
        assert page.items == []  # not due: nothing fired
        assert await index.earliest([job.bucket]) == due.timestamp()
        return
    [occ] = page.items
    assert occ.scheduled_for == due  # its own fire time, not the dispatch time
    assert before <= occ.created_at < due  # recorded ahead of it
    assert (await store.get_job(job.id)).next_run_at is None  # a one-time job: fired


async def test_a_jittered_fire_draws_nothing_from_the_process_random_state(
    store: SqlStore,
) -> None:
    """The fire's jitter and the store's aggregates shard come from generators of their own:
    an app that seeds the global ``random`` (or a tool watching it, as Hypothesis does while
    it draws) sees no change when a fire is dispatched."""
    due = (utcnow() + AHEAD).replace(microsecond=0)
    job = Job(id=new_id(), job_type="report", execute_at=due, next_run_at=due, jitter_seconds=5)
    dispatcher, _ = await indexed_dispatcher(store, job, 30.0)
    state = random.getstate()
    await dispatcher.dispatch_due([job.bucket])
    [occ] = (await store.list_occurrences(OccurrenceQuery(job_id=job.id))).items
    assert occ.jitter_seconds is not None  # drawn
    assert random.getstate() == state
