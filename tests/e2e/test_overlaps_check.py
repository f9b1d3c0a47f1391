"""The chaos soak's overlap check (``overlaps.py``) on rows written as the real cases write
them, on PostgreSQL: a skip decided while a late report's end was being committed is
justified; a skip long after a run ended is reported."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from rota.core.ids import new_id
from rota.core.models import ConcurrencyPolicy, Job, OccurrenceStatus, SkipReason, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from rota.stores.sql import SqlStore
from tests.stores import pg_database

from .overlaps import unjustified_overlaps

pytestmark = pytest.mark.postgres

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
S = OccurrenceStatus


@pytest.fixture
def url(pg_template: str) -> Iterator[str]:
    with pg_database(pg_template) as database:
        yield database


def _job() -> Job:
    return Job(
        id=new_id(),
        job_type="report",
        cron_expression="* * * * * *",
        execute_at=None,
        next_run_at=None,
        concurrency_policy=ConcurrencyPolicy.SKIP,
    )


async def _scene(url: str, *, end_committed_first: bool, recent_fire: bool) -> list[Any]:
    """A run of a Skip-policy job created at ``T0`` and Running; its end (the worker's clock:
    ``T0 + 0.1 s``) applied by a transaction that takes its id before the dispatch that skips
    the fire of ``T0 + 5 s`` and commits after it, or (``end_committed_first``) commits
    before the dispatch. ``recent_fire``: another job fired at ``T0 + 4.5 s`` just before
    the end's transaction began (as the fires of every second do in the soak)."""
    store = SqlStore(url)
    await store.open()
    try:
        job, other = _job(), _job()
        await store.create_jobs([job, other])
        run = new_occurrence(job, T0, T0, PlanSettings(), dispatched_at=T0)
        await store.insert_occurrences([run])
        await store.apply_status(
            [StatusRecord(occurrence_id=run.id, status=S.RUNNING, timestamp=T0)]
        )
        if recent_fire:
            at = T0 + timedelta(seconds=4.5)
            await store.insert_occurrences([new_occurrence(other, at, at, PlanSettings())])
        skipped_at = T0 + timedelta(seconds=5)
        skip = new_occurrence(
            job, skipped_at, skipped_at, PlanSettings(), skip_reason=SkipReason.OVERLAP
        )
    finally:
        await store.close()
    status = await asyncpg.connect(url)
    try:
        ending = status.transaction()
        await ending.start()
        await status.execute(
            "UPDATE occurrences SET status = $2, end_time = $3 WHERE id = $1",
            run.id,
            int(S.COMPLETED),
            T0 + timedelta(milliseconds=100),
        )
        if end_committed_first:
            await ending.commit()
        store = SqlStore(url)
        await store.open()
        try:
            await store.insert_occurrences([skip])  # the dispatch: its own transaction
        finally:
            await store.close()
        if not end_committed_first:
            await ending.commit()
    finally:
        await status.close()
    assert skip.status is S.SKIPPED
    cluster: Any = SimpleNamespace(env={"ROTA_DATABASE_URL": url})  # what the check reads
    return await asyncio.to_thread(unjustified_overlaps, cluster)


async def test_a_skip_decided_while_a_late_report_was_being_committed_is_justified(
    url: str,
) -> None:
    assert await _scene(url, end_committed_first=False, recent_fire=True) == []


async def test_a_skip_long_after_the_run_ended_is_reported(url: str) -> None:
    found = await _scene(url, end_committed_first=True, recent_fire=False)
    assert [row["created_at"] for row in found] == [T0 + timedelta(seconds=5)]


async def test_a_late_reports_transaction_that_began_long_before_is_not_an_excuse(
    url: str,
) -> None:
    """Its id is older than the skip's, but nothing fired within the second before the skip
    was written before it: it did not begin around the skip."""
    found = await _scene(url, end_committed_first=False, recent_fire=False)
    assert len(found) == 1
