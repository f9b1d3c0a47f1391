"""An interval job with ``maxRuns`` and jitter on the embedded runtime, end to end: it fires
on its grid, each run sent after its jitter delay, N times, and then has no next fire."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from rota.core.records import OccurrenceQuery
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.sweeper_interval_seconds": 0.5}
    return await runtime_factory(overrides, ["tests.integration.runtime_jobs"])


async def test_an_interval_job_runs_max_runs_times_then_stops(runtime: Runtime) -> None:
    start = runtime.jobs.now().replace(microsecond=0) + timedelta(seconds=1)
    job = await runtime.jobs.create_job(
        {
            "job_type": "it.fast",
            "interval_seconds": "1s",
            "start_at": start,
            "max_runs": 3,
            "jitter_seconds": 0.4,
            "concurrency_policy": 2,  # AllowAll: a slow sweep must not skip a fire
        }
    )
    assert job.next_run_at == start

    async def finished() -> bool:
        stored = await runtime.store.get_job(job.id)
        page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id))
        done = [o for o in page.items if o.status is S.COMPLETED]
        return stored.next_run_at is None and len(done) == 3

    await eventually(finished, 20, "three runs and no next fire")
    stored = await runtime.store.get_job(job.id)
    assert (stored.run_count, stored.max_runs, stored.is_active) == (3, 3, True)
    page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id))
    runs = sorted(page.items, key=lambda o: o.scheduled_for)
    assert [o.scheduled_for for o in runs] == [start + timedelta(seconds=k) for k in range(3)]
    for occ in runs:
        assert occ.jitter_seconds is not None
        assert 0 <= occ.jitter_seconds <= 0.4
        assert occ.start_time is not None
        # sent after its delay: it never starts before its fire time plus its jitter
        assert occ.start_time >= occ.scheduled_for + timedelta(seconds=occ.jitter_seconds)
