"""Retries in the embedded runtime: a failed attempt goes back to Queued with its due time, the
dispatcher sends it again when due (not at its next periodic sweep), and a job's own
``maxRetries`` / ``retryDelaySeconds`` win over its job type's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from rota.core.records import OccurrenceQuery
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus
DELAY = 0.2
"""The job's base retry delay (its job type says 30 s)."""
SLACK = timedelta(seconds=1.5)
"""How late a retry may start after its due time: the dispatcher wakes for it (the periodic
sweep is 5 s away and the job type's delay 30 s); generous for a loaded CI machine."""


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    rt = await runtime_factory(None, ["tests.integration.retry_jobs"])
    assert rt.settings.scheduler.sweeper_interval_seconds >= 5  # the default: no fast polling
    return rt


async def test_failed_attempts_are_retried_with_backoff_and_the_jobs_override(
    runtime: Runtime,
) -> None:
    job = await runtime.jobs.create_job(
        {
            "job_type": "it.flaky",
            "execute_at": runtime.jobs.now(),
            "max_retries": 2,
            "retry_delay_seconds": DELAY,
        }
    )

    async def final() -> bool:
        page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id))
        return bool(page.items) and page.items[0].status.is_terminal

    await eventually(final, 15, "a final status")
    page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id))
    [only] = page.items
    occurrence = await runtime.store.get_occurrence(only.id)
    assert occurrence.status is S.COMPLETED
    assert occurrence.result == "done on attempt 3"
    assert occurrence.attempt == 3
    assert occurrence.max_retries == 2
    assert occurrence.retry_delay_seconds == DELAY

    changes = occurrence.status_changes
    assert [c.attempt for c in changes] == sorted(c.attempt for c in changes)
    retries = [c for c in changes if c.to_status is S.QUEUED and c.reason == "retry"]
    assert [c.attempt for c in retries] == [2, 3]
    assert [c.to_status for c in changes][-1] is S.COMPLETED
    assert changes[-1].attempt == 3

    # Each retry is due at its failure's time plus base × 2^(retry − 1): 0.2 s, then 0.4 s.
    # The failure's time is the retry change's timestamp; an attempt's start is its first log
    # line (a Running report packed with the final one may not be recorded on its own).
    lines: dict[int, list[object]] = {}
    for _, record in await runtime.store.occurrence_logs(occurrence.id):
        lines.setdefault(record.attempt or 0, []).append(record.timestamp)
    assert sorted(lines) == [1, 2, 3]
    for change, retry in zip(retries, (1, 2), strict=True):
        due = change.timestamp + timedelta(seconds=DELAY * 2 ** (retry - 1))
        started = min(lines[change.attempt])  # type: ignore[type-var]
        assert due <= started < due + SLACK, (retry, due, started)
    failed_apart = retries[1].timestamp - retries[0].timestamp
    assert failed_apart >= timedelta(seconds=DELAY)
    assert changes[-1].timestamp - retries[1].timestamp >= timedelta(seconds=2 * DELAY)

    # A manual run of the job carries the same overrides.
    manual = await runtime.jobs.trigger(job.id, reason="by hand")
    stored = await runtime.store.get_occurrence(manual.id)
    assert (stored.max_retries, stored.retry_delay_seconds) == (2, DELAY)
