"""A one-time job's fire is kept out of ``occurrence_counts`` (``occurrences.counted`` false,
migration 0033): its job's counts and run statistics are read from the occurrence itself,
and stay what a counted occurrence's would be through a manual retry, a purge, a rebuild and
a dropped partition. Every other fire and insert is counted as before. On SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID

from msgspec.structs import replace
from sqlalchemy import select

from rota.core.models import Occurrence
from rota.core.records import FailedQuery, JobQuery
from rota.stores.schema import occurrence_counts, occurrences
from rota.stores.sql import SqlStore
from tests.contract.test_store import (
    MINUTE,
    NOW,
    T0,
    S,
    fired,
    make_job,
    minutely,
    occurrence,
    one_time,
    status,
)
from tests.contract.test_store_aggregates import assert_matches_a_scan
from tests.contract.test_store_partitions import JUNE, MARCH, POSTGRES, upkeep

DAY = timedelta(days=1)
Figures = tuple[int, int, int, float | None]
"""A job's total executions, successes, failures and average duration."""


async def count_rows(store: SqlStore, job_id: UUID) -> dict[S, tuple[int, int, float, int]]:
    """The job's ``occurrence_counts`` rows: status -> (n, runs, duration sum and count)."""
    c = occurrence_counts.c
    async with store._read() as conn:
        rows = await conn.execute(
            select(c.status, c.n, c.runs, c.duration_sum, c.duration_count).where(
                c.job_id == job_id
            )
        )
        return {S(r[0]): (int(r[1]), int(r[2]), float(r[3]), int(r[4])) for r in rows}


async def is_counted(store: SqlStore, occurrence_id: UUID) -> bool:
    async with store._read() as conn:
        stmt = select(occurrences.c.counted).where(occurrences.c.id == occurrence_id)
        return bool((await conn.execute(stmt)).scalar_one())


async def figures(store: SqlStore, job_id: UUID) -> Figures:
    """The job's statistics as its read gives them, the same as the job list's."""
    job = await store.get_job(job_id)
    [listed] = (await store.list_jobs(JobQuery(ids=(job_id,)))).items
    got = (job.total_executions, job.success_count, job.failure_count, job.average_duration_ms)
    assert (
        listed.total_executions,
        listed.success_count,
        listed.failure_count,
        listed.average_duration_ms,
    ) == got
    return got


async def settled(store: SqlStore, job_id: UUID) -> dict[S, int]:
    """The job's occurrences by status (those it has), as ``count_occurrences`` gives them."""
    return {s: n for s, n in (await store.count_occurrences(job_id=job_id)).items() if n}


async def ran(store: SqlStore, occ: Occurrence, end: S, duration: float | None, **at: int) -> None:
    """``occ`` started and ended ``end`` (attempt ``at['attempt']``, 1 by default)."""
    attempt = at.get("attempt", 1)
    await store.apply_status(
        [
            status(occ, S.RUNNING, NOW, attempt=attempt),
            status(occ, end, NOW + MINUTE, attempt=attempt, duration_ms=duration),
        ]
    )


async def test_a_one_time_jobs_fire_is_its_counts_and_statistics(store: SqlStore) -> None:
    done, failing = make_job(), make_job()
    ok = await fired(store, done)
    bad = await fired(store, failing)
    assert not await is_counted(store, ok.id)
    assert await settled(store, done.id) == {S.QUEUED: 1}
    await ran(store, ok, S.COMPLETED, 40.0)
    await ran(store, bad, S.FAILED, 3.0)
    assert await figures(store, done.id) == (1, 1, 0, 40.0)
    assert await figures(store, failing.id) == (1, 0, 1, None)
    assert await settled(store, done.id) == {S.COMPLETED: 1}
    assert await settled(store, failing.id) == {S.FAILED: 1}
    assert await count_rows(store, done.id) == {}  # no count row written for either
    assert await count_rows(store, failing.id) == {}
    overall = await store.count_occurrences((S.COMPLETED, S.FAILED))
    assert overall == {S.COMPLETED: 1, S.FAILED: 1}  # the shards' totals count them
    await assert_matches_a_scan(store)


async def test_a_manual_retry_folds_the_fire_and_keeps_both_runs(store: SqlStore) -> None:
    job = make_job()
    occ = await fired(store, job)
    await ran(store, occ, S.FAILED, 5.0)
    assert await figures(store, job.id) == (1, 0, 1, None)
    [dead] = (await store.list_failed(FailedQuery(job_id=job.id))).items
    await store.retry_failed(dead.id, NOW + 2 * MINUTE, "ops")
    # it left its final status: its Failed run is in the count rows now, the row counted
    assert await is_counted(store, occ.id)
    assert await count_rows(store, job.id) == {S.FAILED: (0, 1, 0.0, 0)}
    assert await settled(store, job.id) == {S.QUEUED: 1}
    assert await figures(store, job.id) == (1, 0, 1, None)
    await assert_matches_a_scan(store)
    await ran(store, occ, S.COMPLETED, 30.0, attempt=2)
    assert await figures(store, job.id) == (2, 1, 1, 30.0)
    assert await settled(store, job.id) == {S.COMPLETED: 1}
    assert await count_rows(store, job.id) == {
        S.FAILED: (0, 1, 0.0, 0),
        S.COMPLETED: (1, 1, 30.0, 1),
    }
    await assert_matches_a_scan(store)


async def test_a_purge_keeps_a_one_time_jobs_statistics_as_a_counted_ones(
    store: SqlStore,
) -> None:
    fire_job, inserted_job = make_job(), make_job()
    fire = await fired(store, fire_job)
    await store.create_jobs([inserted_job])
    inserted = occurrence(inserted_job)  # inserted directly (a trigger): counted
    await store.insert_occurrences([inserted])
    assert (await is_counted(store, fire.id), await is_counted(store, inserted.id)) == (
        False,
        True,
    )
    await ran(store, fire, S.COMPLETED, 12.0)
    await ran(store, inserted, S.COMPLETED, 12.0)
    before = await figures(store, fire_job.id)
    assert before == await figures(store, inserted_job.id) == (1, 1, 0, 12.0)
    purged = await store.purge_occurrences(S.COMPLETED, NOW + DAY, 100)
    assert purged.deleted == 2
    for job in (fire_job, inserted_job):
        assert await figures(store, job.id) == before
        assert await settled(store, job.id) == {}
        assert await count_rows(store, job.id) == {S.COMPLETED: (0, 1, 12.0, 1)}
    await assert_matches_a_scan(store)


async def test_a_rebuild_keeps_every_jobs_counts_and_statistics(store: SqlStore) -> None:
    once, retried, recurring = make_job(), make_job(), make_job(cron_expression="* * * * *")
    await ran(store, await fired(store, once), S.COMPLETED, 8.0)
    occ = await fired(store, retried)
    await ran(store, occ, S.TIMED_OUT, None)
    [dead] = (await store.list_failed(FailedQuery(job_id=retried.id))).items
    await store.retry_failed(dead.id, NOW + 2 * MINUTE, "ops")
    await ran(store, occ, S.COMPLETED, 2.0, attempt=2)
    await store.create_jobs([recurring])
    fires = (await store.dispatch_due([recurring.id], T0 + MINUTE, minutely)).queued
    for n, fire in enumerate(fires):
        await ran(store, fire, S.COMPLETED if n else S.FAILED, 4.0)
    jobs = (once, retried, recurring)
    before = [(await figures(store, j.id), await settled(store, j.id)) for j in jobs]
    assert [b[0] for b in before] == [(1, 1, 0, 8.0), (2, 1, 1, 2.0), (2, 1, 1, 4.0)]
    overview = await store.overview(T0)
    await store.rebuild_aggregates()
    assert [(await figures(store, j.id), await settled(store, j.id)) for j in jobs] == before
    assert await store.overview(T0) == overview
    assert await count_rows(store, once.id) == {}  # still read from its occurrence
    await assert_matches_a_scan(store)


async def test_a_recurring_jobs_fires_still_write_count_rows(store: SqlStore) -> None:
    job = make_job(cron_expression="* * * * *", execute_at=None)
    await store.create_jobs([job])
    fires = (await store.dispatch_due([job.id], T0 + MINUTE, minutely)).queued
    assert len(fires) == 2
    for fire in fires:
        assert await is_counted(store, fire.id)
        await ran(store, fire, S.COMPLETED, 10.0)
    assert await count_rows(store, job.id) == {S.COMPLETED: (2, 2, 20.0, 2)}
    assert await figures(store, job.id) == (2, 2, 0, 10.0)
    # a one-time job fired again later (a new execute_at) is read from both of its fires
    again = make_job()
    first = await fired(store, again, one_time)
    await ran(store, first, S.COMPLETED, 1.0)
    stored = await store.get_job(again.id)
    later = T0 + 10 * MINUTE
    await store.update_job(
        replace(stored, execute_at=later, next_run_at=later, version=2), expected_version=1
    )
    [second] = (await store.dispatch_due([again.id], later, one_time)).queued
    await ran(store, second, S.COMPLETED, 3.0)
    assert await figures(store, again.id) == (2, 2, 0, 2.0)
    assert await settled(store, again.id) == {S.COMPLETED: 2}
    await assert_matches_a_scan(store)


async def test_one_time_jobs_finished_by_several_stores_at_once_count_exactly(
    store: SqlStore, store_url: str
) -> None:
    jobs = [make_job() for _ in range(12)]
    fires = [await fired(store, job) for job in jobs]
    others = [SqlStore(store_url) for _ in range(3)]
    for other in others:
        await other.open()
    try:
        writers = [store, *others]

        async def finish(i: int, occ: Occurrence) -> None:
            end = S.COMPLETED if i % 3 else S.FAILED
            await ran(writers[i % 4], occ, end, float(i))

        await asyncio.gather(*(finish(i, o) for i, o in enumerate(fires)))
    finally:
        for other in others:
            await other.close()
    for i, job in enumerate(jobs):
        want = (1, 1, 0, float(i)) if i % 3 else (1, 0, 1, None)
        assert await figures(store, job.id) == want
    assert await store.count_occurrences((S.COMPLETED, S.FAILED)) == {
        S.COMPLETED: 8,
        S.FAILED: 4,
    }
    await assert_matches_a_scan(store)


@POSTGRES
async def test_a_dropped_partition_keeps_a_one_time_jobs_statistics(store: SqlStore) -> None:
    await store.maintain_partitions(MARCH, upkeep(drop=False))
    job = make_job(execute_at=MARCH, next_run_at=MARCH)
    await store.create_jobs([job])
    [occ] = (await store.dispatch_due([job.id], MARCH, one_time)).queued
    at = {"instance_id": "w"}
    await store.apply_status(
        [
            status(occ, S.RUNNING, MARCH, **at),
            status(occ, S.COMPLETED, MARCH + MINUTE, duration_ms=12.0, **at),
        ]
    )
    assert not await is_counted(store, occ.id)
    assert await figures(store, job.id) == (1, 1, 0, 12.0)
    report = await store.maintain_partitions(JUNE, upkeep())
    assert "occurrences_p20310301" in report.dropped
    assert await figures(store, job.id) == (1, 1, 0, 12.0)
    assert await settled(store, job.id) == {}
    assert await count_rows(store, job.id) == {S.COMPLETED: (0, 1, 12.0, 1)}
    await assert_matches_a_scan(store)
