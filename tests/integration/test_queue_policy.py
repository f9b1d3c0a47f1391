"""A Queue-policy job's next occurrence starts as soon as the previous one ends (not at the
pending sweep's next round, 5 s by default), in the embedded runtime end to end: real
executor, dispatcher, tracker and API over SQLite and the in-process adapters."""

from __future__ import annotations

import itertools
from datetime import timedelta
from uuid import UUID

import httpx
import pytest

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus

DISPATCH_GAP = timedelta(milliseconds=250)
"""From the stored end of one occurrence (the worker's time) to the dispatch of the one held
behind it: the report's way to the store (the worker's flush, 20 ms, and the tracker's batch
wait, up to 50 ms) and the sweep. 55-76 ms measured here; generous for a loaded machine (the
sweep's next round, what it used to wait for, is 5 s). The part the release controls, from
the end applied to the dispatch, is held to 100 ms in ``test_queue_release.py``."""
START_GAP = timedelta(seconds=1)
"""From the stored end of one to the start of the next: the dispatch gap plus the broker hop
and the worker's start (58-84 ms measured here), generous for a loaded machine."""


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory(
        {"scheduler.sweeper_interval_seconds": 5.0}, ["tests.integration.reliability_jobs"]
    )


async def test_the_next_queued_occurrence_is_dispatched_when_the_previous_one_ends(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    response = await client.post(
        "/api/v1/jobs",
        json={
            "jobType": "rel.short",
            "cronExpression": "0 0 1 1 *",
            "concurrentExecutionPolicy": 1,  # Queue
        },
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    ids = []
    for _ in range(3):  # the second and third wait behind the first
        triggered = await client.post(f"/api/v1/jobs/{job_id}/trigger")
        assert triggered.status_code == 202, triggered.text
        ids.append(UUID(triggered.json()["id"]))

    async def all_completed() -> bool:
        found = [await runtime.store.get_occurrence(i) for i in ids]
        return all(o.status is S.COMPLETED for o in found)

    await eventually(all_completed, 20, "the three occurrences to complete, one at a time")
    found = [await runtime.store.get_occurrence(i) for i in ids]
    for before, after in itertools.pairwise(found):
        assert before.end_time is not None
        assert after.start_time is not None
        assert after.dispatched_at is not None
        assert after.start_time >= before.end_time  # one at a time
        assert after.dispatched_at - before.end_time <= DISPATCH_GAP
        assert after.start_time - before.end_time <= START_GAP
