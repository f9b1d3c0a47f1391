"""The Store contract for retention and silence detection, on SQLite and PostgreSQL: final
occurrences deleted in small steps with their history and logs, old log lines, resolved dead
letters; which jobs have fires in a window."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rota.core.errors import NotFoundError
from rota.core.models import LogRecord, Occurrence
from rota.core.ports import Store
from rota.core.records import FailedQuery
from tests.contract.test_store import NOW, S, make_job, one_time, status

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


async def finished(store: Store, at: datetime, end: S = S.COMPLETED) -> Occurrence:
    """A one-time job fired at ``at`` whose occurrence ran and ended ``end``, with a log line."""
    job = make_job(execute_at=at, next_run_at=at)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], at, one_time)
    [occ] = result.queued
    await store.apply_status([status(occ, S.RUNNING, at), status(occ, end, at)])
    await store.append_logs(
        [LogRecord(occurrence_id=occ.id, timestamp=at, level="INFO", message="ran")]
    )
    return occ


async def exists(store: Store, occ: Occurrence) -> bool:
    try:
        await store.get_occurrence(occ.id)
    except NotFoundError:
        return False
    return True


async def test_old_final_occurrences_go_in_steps_with_history_and_logs(store: Store) -> None:
    old = [await finished(store, NOW + i * HOUR) for i in range(5)]
    new = await finished(store, NOW + 10 * DAY)
    failed = await finished(store, NOW, S.CANCELLED)
    cutoff = NOW + DAY

    first = await store.purge_occurrences(S.COMPLETED, cutoff, 2)
    assert first.deleted == 2
    assert first.next_after is not None
    assert [await exists(store, o) for o in old] == [False, False, True, True, True]
    second = await store.purge_occurrences(S.COMPLETED, cutoff, 2, after=first.next_after)
    third = await store.purge_occurrences(S.COMPLETED, cutoff, 2, after=second.next_after)
    assert (second.deleted, third.deleted) == (2, 1)
    assert third.next_after is None  # it met the new occurrence: nothing older is left
    assert not any([await exists(store, o) for o in old])
    assert await exists(store, new)
    assert await exists(store, failed)  # another status has its own retention
    for occ in old:
        assert await store.occurrence_logs(occ.id) == []
    assert len(await store.occurrence_logs(new.id)) == 1
    assert (await store.get_occurrence(new.id)).status_changes
    again = await store.purge_occurrences(S.COMPLETED, cutoff, 100)
    assert (again.deleted, again.next_after) == (0, None)


async def test_an_unresolved_dead_letter_keeps_its_occurrence(store: Store) -> None:
    kept = await finished(store, NOW, S.FAILED)
    later = await finished(store, NOW + HOUR, S.FAILED)
    [record] = [
        r
        for r in (await store.list_failed(FailedQuery(limit=10))).items
        if r.occurrence_id == kept.id
    ]
    await store.update_failed(
        next(
            r.id
            for r in (await store.list_failed(FailedQuery(limit=10))).items
            if r.occurrence_id == later.id
        ),
        resolved=True,
        now=NOW + HOUR,
    )
    batch = await store.purge_occurrences(S.FAILED, NOW + DAY, 100)
    assert batch.deleted == 1
    assert await exists(store, kept)
    assert not await exists(store, later)
    await store.update_failed(record.id, resolved=True, now=NOW + HOUR)
    assert (await store.purge_occurrences(S.FAILED, NOW + DAY, 100)).deleted == 1
    assert not await exists(store, kept)


async def test_only_final_statuses_are_purged(store: Store) -> None:
    with pytest.raises(ValueError, match="final"):
        await store.purge_occurrences(S.RUNNING, NOW, 10)
    with pytest.raises(ValueError, match="final"):
        await store.purge_occurrences(S.QUEUED, NOW, 10)


async def test_old_log_lines_go_oldest_first_within_the_window(store: Store) -> None:
    occ = await finished(store, NOW)
    await store.append_logs(
        [
            LogRecord(occurrence_id=occ.id, timestamp=NOW + i * HOUR, level="INFO", message=f"{i}")
            for i in range(1, 6)
        ]
    )
    # lines at NOW (from finished) and NOW+1h … NOW+5h; cut at NOW+3h: three are older
    assert await store.purge_logs(NOW + 3 * HOUR, 2) == 2
    assert await store.purge_logs(NOW + 3 * HOUR, 2) == 1
    assert await store.purge_logs(NOW + 3 * HOUR, 2) == 0
    left = [record.message for _, record in await store.occurrence_logs(occ.id)]
    assert left == ["3", "4", "5"]
    assert await exists(store, occ)  # log retention leaves occurrences alone


async def test_resolved_dead_letters_go_unresolved_stay(store: Store) -> None:
    for i in range(3):
        await finished(store, NOW + i * HOUR, S.FAILED)
    records = sorted(
        (await store.list_failed(FailedQuery(limit=10))).items, key=lambda r: r.failed_at
    )
    await store.update_failed(records[0].id, resolved=True, now=NOW)
    await store.update_failed(records[1].id, resolved=True, now=NOW + 5 * DAY)
    assert await store.purge_failed(NOW + DAY, 10) == 1
    left = {r.id for r in (await store.list_failed(FailedQuery(limit=10))).items}
    assert left == {records[1].id, records[2].id}
    assert await store.purge_failed(NOW + 10 * DAY, 1) == 1
    assert await store.purge_failed(NOW + 10 * DAY, 1) == 0
    assert {r.id for r in (await store.list_failed(FailedQuery(limit=10))).items} == {records[2].id}


async def test_jobs_with_fires_in_a_window(store: Store) -> None:
    a = await finished(store, NOW)
    b = await finished(store, NOW + HOUR)
    silent = make_job()
    await store.create_jobs([silent])
    ids = [a.job_id, b.job_id, silent.id]
    assert await store.jobs_with_fires(ids, NOW, NOW + HOUR) == {a.job_id, b.job_id}
    assert await store.jobs_with_fires(ids, NOW + 2 * HOUR, NOW + DAY) == set()
    assert await store.jobs_with_fires(ids, NOW + HOUR, NOW + HOUR) == {b.job_id}
    assert await store.jobs_with_fires([], NOW, NOW + DAY) == set()


async def test_recurring_jobs_of_some_buckets_by_id(store: Store) -> None:
    cron = [make_job(cron_expression="* * * * *", bucket=b % 3) for b in range(5)]
    cron.append(make_job(interval_seconds=60, execute_at=None, bucket=2))  # an interval job
    one_time = make_job(bucket=0)
    inactive = make_job(cron_expression="* * * * *", bucket=0, is_active=False)
    await store.create_jobs([*cron, one_time, inactive])
    wanted = sorted((j for j in cron if j.bucket in (0, 2)), key=lambda j: j.id)
    first = await store.recurring_jobs([0, 2], 3)
    assert [j.id for j in first] == [j.id for j in wanted[:3]]
    rest = await store.recurring_jobs([0, 2], 3, after=first[-1].id)
    assert [j.id for j in rest] == [j.id for j in wanted[3:]]
    assert {j.cron_expression for j in [*first, *rest]} == {"* * * * *", None}
    assert await store.recurring_jobs([], 10) == []
