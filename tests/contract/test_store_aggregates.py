"""The maintained statistics (``rota.stores.sql.aggregates``) equal a fresh scan of the
occurrences after every kind of write: fires, transitions, retries (automatic, zombie and
manual), direct inserts, job deletion, retention purges and dropped partitions; and stay
exact when several stores write at once. The job counts equal a scan of the jobs after
every write that adds, removes, activates or deactivates a job. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from msgspec.structs import replace
from sqlalchemy import select

from rota.core.models import Job, Occurrence
from rota.core.planning import FirePlan
from rota.core.records import FailedQuery
from rota.stores.schema import (
    finished_hours,
    finished_minutes,
    job_totals,
    job_type_counts,
    jobs,
    occurrence_counts,
    occurrence_totals,
    occurrences,
    tag_counts,
)
from rota.stores.sql import SqlStore
from rota.stores.sql.aggregates import SHARDS, WINDOWED, minute_of
from rota.stores.sql.rows import ACTIVE
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
)
from tests.contract.test_store import status as report
from tests.contract.test_store_auto_disable import REASON, Runs, cron_job, disabled_job
from tests.contract.test_store_partitions import JUNE, MARCH, POSTGRES, fired_at, upkeep

SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


async def assert_jobs_counted(store: SqlStore) -> tuple[int, int]:
    """``job_totals`` and the overview's job counts equal a count of the jobs, and the tags
    in use (``tag_counts``) a count of the jobs' tags; returns (jobs, active)."""
    async with store._read() as conn:
        rows = (await conn.execute(select(jobs.c.is_active, jobs.c.tags, jobs.c.job_type))).all()
        shards = (await conn.execute(select(job_totals))).all()
        types = (await conn.execute(select(job_type_counts))).all()
        tag_shards = (await conn.execute(select(tag_counts.c.shard))).scalars().all()
    flags = [r.is_active for r in rows]
    want_tags = Counter(tag for r in rows for tag in set(r.tags or ()))
    assert {t.tag: t.jobs for t in await store.tags()} == dict(want_tags)
    assert [t.tag for t in await store.tags()] == sorted(want_tags)
    assert set(tag_shards) <= set(range(SHARDS))
    got_types: Counter[str] = Counter()
    for t in types:
        got_types[t.job_type] += t.n
    assert +got_types == Counter(r.job_type for r in rows)
    assert {t.shard for t in types} <= set(range(SHARDS))
    want = (len(flags), sum(1 for f in flags if f))
    assert (sum(t.jobs for t in shards), sum(t.active for t in shards)) == want
    assert {t.shard for t in shards} <= set(range(SHARDS))
    overview = await store.overview(NOW)
    assert (overview.jobs, overview.active_jobs) == want
    return want


async def assert_matches_a_scan(store: SqlStore) -> None:
    """The aggregate tables (zero rows and shards folded away) equal the scan, and so do the
    overview's window, its job counts and every job's counts."""
    await assert_jobs_counted(store)
    async with store._read() as conn:
        rows = (await conn.execute(select(occurrences))).all()
        counts = (await conn.execute(select(occurrence_counts))).all()
        totals = (await conn.execute(select(occurrence_totals))).all()
        minutes = (await conn.execute(select(finished_minutes))).all()
        hours = (await conn.execute(select(finished_hours))).all()
    want_counts = Counter((r.job_id, r.status) for r in rows)
    # a job's in-flight occurrences are counted from the occurrences, never kept (0025);
    # its uncounted ones (a one-time job's fire, 0033) neither
    assert not [c for c in counts if c.status in ACTIVE]
    counted = Counter((r.job_id, r.status) for r in rows if r.counted)
    assert {(c.job_id, c.status): c.n for c in counts if c.n} == {
        key: n for key, n in counted.items() if key[1] not in ACTIVE
    }
    want_totals = Counter(r.status for r in rows)
    got_totals: Counter[int] = Counter()
    for t in totals:
        got_totals[t.status] += t.n
    assert +got_totals == want_totals
    want_minutes: dict[tuple[int, int], list[Any]] = {}
    for r in rows:
        if r.end_time is not None and r.status in WINDOWED:
            into = want_minutes.setdefault((minute_of(r.end_time), r.status), [0, 0.0, 0])
            into[0] += 1
            if r.duration_ms is not None:
                into[1] += r.duration_ms
                into[2] += 1
    got_minutes: dict[tuple[int, int], list[Any]] = {}
    for m in minutes:
        into = got_minutes.setdefault((m.minute, m.status), [0, 0.0, 0])
        into[0] += m.n
        into[1] += m.duration_sum
        into[2] += m.duration_count
    want_hours: dict[tuple[int, int], list[Any]] = {}
    for (minute, st), (n, dsum, dcount) in want_minutes.items():
        into = want_hours.setdefault((minute // 3600 * 3600, st), [0, 0.0, 0])
        into[0] += n
        into[1] += dsum
        into[2] += dcount
    got_hours: dict[tuple[int, int], list[Any]] = {}
    for h in hours:
        into = got_hours.setdefault((h.hour, h.status), [0, 0.0, 0])
        into[0] += h.n
        into[1] += h.duration_sum
        into[2] += h.duration_count
    for want, got_all in ((want_minutes, got_minutes), (want_hours, got_hours)):
        got = {k: v for k, v in got_all.items() if v[0] or v[2]}
        assert got.keys() == want.keys()
        for key, (n, dsum, dcount) in want.items():
            assert (got[key][0], got[key][2]) == (n, dcount), key
            assert got[key][1] == pytest.approx(dsum)
    # On an hour, on a minute, late in a minute (the rest of it scanned), early in a minute
    # (the minute's figures less what ended before ``since``).
    sinces = (T0 - HOUR, T0 - MINUTE, T0 - 20 * SECOND, T0 + 30 * SECOND, T0 + 62 * SECOND)
    for since in (*sinces, NOW + 90 * SECOND, MARCH):
        overview = await store.overview(since)
        window = [r for r in rows if r.end_time is not None and r.end_time >= since]
        done = [r for r in window if r.status == S.COMPLETED]
        assert overview.completed == len(done)
        assert overview.failed == sum(r.status in (S.FAILED, S.TIMED_OUT) for r in window)
        assert overview.cancelled == sum(r.status == S.CANCELLED for r in window)
        durations = [r.duration_ms for r in done if r.duration_ms is not None]
        average = sum(durations) / len(durations) if durations else None
        assert overview.average_duration_ms == pytest.approx(average)
        assert {int(s): n for s, n in overview.by_status.items() if n} == dict(want_totals)
    for start, bucket, buckets in ((T0 - HOUR, 60, 90), (T0, 900, 4), (T0 - 2 * HOUR, 3600, 3)):
        assert store.bucketed_throughput_statement(start, bucket, buckets) is not None
        scan = store.throughput_statement(start, bucket, buckets)
        async with store._read() as conn:
            scanned = {int(i): (int(c), int(f)) for i, c, f in (await conn.execute(scan)).all()}
        points = await store.throughput(start, bucket, buckets)
        assert {
            i: (p.completed, p.failed) for i, p in enumerate(points) if p.completed or p.failed
        } == {i: cf for i, cf in scanned.items() if cf != (0, 0)}
    for job_id in {r.job_id for r in rows}:
        by_job = await store.count_occurrences(job_id=job_id)
        assert {int(s): n for s, n in by_job.items() if n} == {
            s: n for (j, s), n in want_counts.items() if j == job_id
        }


async def test_every_kind_of_write_keeps_the_aggregates_equal_to_a_scan(
    store: SqlStore,
) -> None:
    recurring = make_job(next_run_at=T0)
    await store.create_jobs([recurring])
    queued = (await store.dispatch_due([recurring.id], T0 + 4 * MINUTE, minutely)).queued
    assert len(queued) == 5
    await assert_matches_a_scan(store)
    a, b, c, d, e = queued
    at = NOW + 20 * SECOND
    await store.apply_status(
        [
            report(a, S.RUNNING, at),
            report(a, S.COMPLETED, at + 45 * SECOND, duration_ms=120.5),
            report(b, S.RUNNING, at),
            report(b, S.FAILED, at + SECOND, retry_at=at + MINUTE, exception="again"),
            report(c, S.RUNNING, at),
            report(d, S.RUNNING, at),
            report(d, S.CANCELLED, at + 2 * MINUTE),
        ]
    )
    await assert_matches_a_scan(store)
    await store.apply_status(
        [
            report(b, S.RUNNING, at + MINUTE, attempt=2),
            report(b, S.COMPLETED, at + 2 * MINUTE, attempt=2, duration_ms=7.0),
            report(c, S.UNKNOWN, at + MINUTE, exception="lost"),
            report(c, S.QUEUED, at + MINUTE, attempt=2),
            report(e, S.RUNNING, at),
            report(e, S.FAILED, at + 3 * MINUTE, exception="final", duration_ms=3.0),
        ]
    )
    await assert_matches_a_scan(store)
    [dead] = (await store.list_failed(FailedQuery(job_id=recurring.id))).items
    await store.retry_failed(dead.id, at + 4 * MINUTE, "ops")  # Failed -> Queued again
    await assert_matches_a_scan(store)

    other = make_job()
    one = await fired(store, other)
    direct = [
        occurrence(other, T0 - n * MINUTE, status=st, end_time=T0 - n * SECOND, duration_ms=d)
        for n, (st, d) in enumerate(
            [(S.COMPLETED, 5.0), (S.TIMED_OUT, None), (S.SKIPPED, None), (S.COMPLETED, None)],
            start=1,
        )
    ]
    await store.insert_occurrences(direct)
    await store.apply_status([report(one, S.RUNNING), report(one, S.COMPLETED, NOW + MINUTE)])
    await assert_matches_a_scan(store)
    await store.delete_job(other.id)  # its occurrences stay, and so do their counts
    await assert_matches_a_scan(store)
    purged = await store.purge_occurrences(S.COMPLETED, NOW + timedelta(days=1), 3)
    assert purged.deleted == 3
    await assert_matches_a_scan(store)
    await store.purge_occurrences(S.TIMED_OUT, NOW + timedelta(days=1), 100)
    await assert_matches_a_scan(store)


async def test_a_finished_one_time_job_leaves_no_count_row(store: SqlStore) -> None:
    """Its Queued and Running are counted from the occurrence while it is in flight
    (migration 0025), and so is the status it settles in: the fire of a one-time job is
    inserted uncounted (migration 0033), its job's counts read from it."""
    job = make_job()  # one-time, at T0
    occ = await fired(store, job)

    async def rows() -> list[tuple[int, int]]:
        async with store._read() as conn:
            c = occurrence_counts.c
            found = await conn.execute(select(c.status, c.n).where(c.job_id == job.id))
        return sorted((int(s), int(n)) for s, n in found)

    assert await rows() == []
    assert (await store.count_occurrences(job_id=job.id))[S.QUEUED] == 1
    await store.apply_status([report(occ, S.RUNNING)])
    assert await store.count_occurrences((S.QUEUED, S.RUNNING), job_id=job.id) == {
        S.QUEUED: 0,
        S.RUNNING: 1,
    }
    await store.apply_status([report(occ, S.COMPLETED, NOW + MINUTE, duration_ms=2.0)])
    assert await rows() == []
    counts = await store.count_occurrences(job_id=job.id)
    assert {s: n for s, n in counts.items() if n} == {S.COMPLETED: 1}
    assert (await store.count_occurrences((S.RUNNING,)))[S.RUNNING] == 0
    await assert_matches_a_scan(store)


async def test_rebuild_gives_what_the_writes_kept(store: SqlStore) -> None:
    job = make_job(next_run_at=T0)
    await store.create_jobs([job])
    queued = (await store.dispatch_due([job.id], T0 + 2 * MINUTE, minutely)).queued
    await store.apply_status(
        [report(o, S.COMPLETED, NOW + n * SECOND, duration_ms=n) for n, o in enumerate(queued)]
    )
    before = await store.overview(T0), await store.count_occurrences(job_id=job.id)
    stats = await store.get_job(job.id)
    assert stats.total_executions == len(queued) > 0
    await store.rebuild_aggregates()
    await assert_matches_a_scan(store)
    assert (await store.overview(T0), await store.count_occurrences(job_id=job.id)) == before
    assert await store.get_job(job.id) == stats  # the run statistics of the count rows stay
    # The bench's padding: zero rows for every shard and final status, nothing counted.
    await store.rebuild_aggregates(pad_since=datetime.now(UTC) - 2 * MINUTE)
    await assert_matches_a_scan(store)
    async with store._read() as conn:
        padded = (
            await conn.execute(select(finished_minutes).where(finished_minutes.c.n == 0))
        ).all()
    assert len(padded) >= 2 * SHARDS * len(WINDOWED)  # the first minute and the last, at least
    assert {(r.shard, r.status) for r in padded} == {
        (shard, status) for shard in range(SHARDS) for status in WINDOWED
    }


async def test_concurrent_writers_count_exactly(store: SqlStore, store_url: str) -> None:
    job = make_job(next_run_at=T0)
    await store.create_jobs([job])
    queued = (await store.dispatch_due([job.id], T0 + 39 * MINUTE, minutely)).queued
    assert len(queued) == 40
    others = [SqlStore(store_url) for _ in range(3)]
    for other in others:
        await other.open()
    try:
        writers = [store, *others]

        async def finish(i: int, occ: Occurrence) -> None:
            end = S.COMPLETED if i % 3 else S.FAILED
            await writers[i % 4].apply_status(
                [report(occ, S.RUNNING), report(occ, end, NOW + MINUTE, duration_ms=float(i))]
            )

        await asyncio.gather(*(finish(i, o) for i, o in enumerate(queued)))
    finally:
        for other in others:
            await other.close()
    await assert_matches_a_scan(store)
    counts = await store.count_occurrences(job_id=job.id)
    assert (counts[S.COMPLETED], counts[S.FAILED], counts[S.QUEUED]) == (26, 14, 0)


@POSTGRES
async def test_a_dropped_partition_leaves_the_aggregates(store: SqlStore) -> None:
    await store.maintain_partitions(MARCH, upkeep(drop=False))
    await fired_at(store, MARCH)
    await fired_at(store, MARCH + timedelta(days=2))
    kept = await fired_at(store, JUNE - timedelta(days=1))
    await assert_matches_a_scan(store)
    report_ = await store.maintain_partitions(JUNE, upkeep())
    assert "occurrences_p20310301" in report_.dropped
    await assert_matches_a_scan(store)
    assert (await store.count_occurrences())[S.COMPLETED] == 1
    assert (await store.count_occurrences(job_id=kept.job_id))[S.COMPLETED] == 1


async def test_every_write_of_a_job_keeps_the_job_counts(store: SqlStore) -> None:
    assert await assert_jobs_counted(store) == (0, 0)
    # created one by one and in bulk, active and not
    single = make_job(tags=("mail", "daily"))
    off = make_job(is_active=False, next_run_at=None, tags=("mail",))
    await store.create_jobs([single])
    await store.create_jobs([off])
    bulk = [make_job(is_active=n % 3 != 0, tags=("bulk", f"n{n % 2}")) for n in range(7)]
    await store.create_jobs(bulk)
    assert await assert_jobs_counted(store) == (9, 5)
    # updated: deactivated, activated again, and changed without touching is_active
    stored = await store.get_job(single.id)
    stored = await store.update_job(
        replace(stored, is_active=False, next_run_at=None, version=2), expected_version=1
    )
    assert await assert_jobs_counted(store) == (9, 4)
    stored = await store.update_job(
        replace(stored, is_active=True, next_run_at=T0, version=3), expected_version=2
    )
    stored = await store.update_job(replace(stored, description="same state"), expected_version=3)
    assert await assert_jobs_counted(store) == (9, 5)
    # retagged: one tag kept, one gone (no job holds it any more), one new; and retyped
    retagged = replace(stored, tags=("mail", "weekly"), job_type="send-digest", version=4)
    await store.update_job(retagged, expected_version=3)
    assert "daily" not in {t.tag for t in await store.tags()}
    assert await assert_jobs_counted(store) == (9, 5)
    # a fire leaves a job active (a one-time one keeps no next fire); a plan that retires
    # the job deactivates it
    once = make_job()
    await fired(store, once, one_time)
    assert (await store.get_job(once.id)).is_active
    recurring = make_job(next_run_at=T0, execute_at=None, cron_expression="* * * * *")
    await store.create_jobs([recurring])

    def retiring(job: Job, active: int, now: datetime) -> FirePlan:
        return replace(minutely(job, active, now), next_run_at=None, is_active=False)

    await store.dispatch_due([recurring.id], T0 + 2 * MINUTE, retiring)
    assert not (await store.get_job(recurring.id)).is_active
    assert await assert_jobs_counted(store) == (11, 6)
    # the failure that reaches a job's threshold disables it; a probe enables it again
    failing = cron_job(auto_disable_threshold=1)
    await store.create_jobs([failing])
    assert [d.job_id for d in await Runs(store, failing).apply(S.FAILED, T0)] == [failing.id]
    assert await assert_jobs_counted(store) == (12, 6)
    probed = disabled_job(T0 - 2 * MINUTE)
    await store.create_jobs([probed])
    released = await store.release_probe(
        probed.id, seen_disabled_at=T0 - 2 * MINUTE, seen_version=1, next_run_at=T0, at=T0
    )
    assert released is not None
    assert released.disabled_reason == REASON
    assert await assert_jobs_counted(store) == (13, 7)
    # deleted, active and not
    await store.delete_job(released.id)
    await store.delete_job(off.id)
    assert await assert_jobs_counted(store) == (11, 6)


async def test_jobs_created_and_deleted_at_once_are_counted_exactly(
    store: SqlStore, store_url: str
) -> None:
    others = [SqlStore(store_url) for _ in range(3)]
    for other in others:
        await other.open()
    try:
        writers = [store, *others]
        batches = [
            [make_job(is_active=(i + n) % 2 == 0, tags=("all", f"t{n}")) for n in range(5)]
            for i in range(8)
        ]

        async def create(i: int) -> None:
            await writers[i % 4].create_jobs(batches[i])

        await asyncio.gather(*(create(i) for i in range(8)))
        doomed = [job.id for batch in batches[:4] for job in batch[:2]]
        await asyncio.gather(
            *(writers[i % 4].delete_job(job_id) for i, job_id in enumerate(doomed))
        )
    finally:
        for other in others:
            await other.close()
    assert (await assert_jobs_counted(store))[0] == 40 - 8
