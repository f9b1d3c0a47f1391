"""The store's periodic polls (every server asks them every few seconds, whatever it holds)
read from an index, not the whole table, however the planner's statistics stand: a table
just bulk-loaded and not yet analyzed is where a poll that the planner may scan is scanned
(found by ``auto_explain`` in a throughput bench: the end-of-pause probe and the graph
sweep's catch-up read every job and every occurrence on each sweep)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from rota.core.dependencies import Dependency
from rota.core.ports import Store
from rota.core.records import JobQuery, OccurrenceQuery
from rota.stores.sql import SqlStore
from tests.contract.test_store import NOW, T0, S, make_job, occurrence
from tests.contract.test_store_batches import pg_plan
from tests.contract.test_store_search import page_reads


async def test_the_end_of_pause_probe_reads_the_paused_jobs_index_on_a_fresh_load(
    store: Store, store_kind: str
) -> None:
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's statistics and plans")
    assert isinstance(store, SqlStore)
    await store.create_jobs([make_job() for _ in range(20_000)])  # COPY; not analyzed
    with page_reads(store, only="") as statements:
        assert await store.end_pauses(NOW, 10) == []
    [(probe, params)] = [s for s in statements if "paused_until" in s[0]]
    plan = await pg_plan(store, probe, params)
    assert "ix_jobs_paused_until" in plan, plan
    assert "Seq Scan" not in plan, plan


async def test_the_graph_sweep_reads_no_occurrence_without_a_dependency(
    store: Store, store_kind: str
) -> None:
    assert isinstance(store, SqlStore)
    a, b = make_job(), make_job()
    await store.create_jobs([a, b])
    await store.insert_occurrences([occurrence(a, NOW)])
    since = T0 - timedelta(hours=1)
    with page_reads(store, only="") as statements:
        assert await store.unrooted_occurrences(since, 10) == []
    assert statements, "the sweep asked nothing"
    assert not [s for s, _ in statements if "FROM occurrences" in s], statements
    await store.set_dependencies(b.id, [Dependency(b.id, a.id)], T0)
    with page_reads(store, only="") as statements:
        assert len(await store.unrooted_occurrences(since, 10)) == 1


async def test_the_queued_sweeps_read_the_index_of_the_queued_only(
    store: Store, store_kind: str
) -> None:
    """The sweeps for Queued occurrences (never dispatched and due; dispatched long ago and
    not started) read ``ix_occurrences_queued``, which holds the Queued only (migration
    0026), among a history of finished ones (on PostgreSQL, or the status index, which holds
    no Completed run: migration 0034). They write the status into their text: a
    partial index is no use to a plan made for any value of a parameter (PostgreSQL's
    generic plan, forced here; SQLite never looks into parameters for one)."""
    if store_kind == "memory":
        pytest.skip("SQL plans")
    assert isinstance(store, SqlStore)
    job = make_job()
    await store.create_jobs([job])
    history = [
        occurrence(job, T0 - n * timedelta(seconds=1), status=S.COMPLETED, end_time=T0)
        for n in range(1, 2001)
    ]
    waiting = occurrence(job, T0, dispatched_at=None)
    await store.insert_occurrences([*history, waiting])
    with page_reads(store, only="") as statements:
        assert [o.id for o in await store.undispatched(NOW, 10)] == [waiting.id]
        await store.stale_occurrences(NOW, running_threshold=60, queued_threshold=60, limit=10)
    sweeps = [(s, p) for s, p in statements if "dispatched_at" in s and "status = 0" in s]
    assert len(sweeps) == 2, statements
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        for statement, params in sweeps:
            if store_kind == "postgres":
                # the index, or each partition's copy of it; or, on PostgreSQL, the status
                # index, which leaves the Completed out too (migration 0034)
                parents = ("ix_occurrences_queued", "ix_occurrences_status_id")
                copies = set(parents) | {
                    r[0]
                    for r in await driver.fetch(
                        "SELECT c.relname FROM pg_inherits i "
                        "JOIN pg_class c ON c.oid = i.inhrelid "
                        "JOIN pg_class p ON p.oid = i.inhparent "
                        "WHERE p.relname = ANY($1::text[])",
                        list(parents),
                    )
                }
                await driver.execute("SET plan_cache_mode = force_generic_plan")
                rows = await driver.fetch(f"EXPLAIN {statement}", *params)
                await driver.execute("RESET plan_cache_mode")
                plan = "\n".join(r[0] for r in rows)
                assert any(f" {name} " in plan for name in copies), plan
                assert "Seq Scan on occurrences_p" not in plan, plan
            else:
                cursor = await driver.execute(f"EXPLAIN QUERY PLAN {statement}", params)
                plan = " / ".join(str(r[3]) for r in await cursor.fetchall())
                assert "ix_occurrences_queued" in plan, (statement, plan)


async def test_status_and_tag_reads_use_their_partial_indexes_in_a_generic_plan(
    store: Store, store_kind: str
) -> None:
    """PostgreSQL: the status indexes hold no Completed run, the tags' index no job without
    tags (migration 0034: a run's end and a fire write fewer entries). The reads of other
    statuses and of a tag write the condition into their text, so that even a generic plan
    (forced here) reads those indexes among a history of Completed runs and untagged jobs:
    the runs of a status, a job's runs of a status, the zombie and orphan sweeps, the jobs
    of a tag."""
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's partial indexes (SQLite keeps whole ones)")
    assert isinstance(store, SqlStore)
    job, tagged = make_job(), make_job(tags=("red",))
    await store.create_jobs([job, tagged, *(make_job() for _ in range(2000))])
    history = [
        occurrence(job, T0 - n * timedelta(seconds=1), status=S.COMPLETED, end_time=T0)
        for n in range(1, 2001)
    ]
    failed = occurrence(job, T0, status=S.FAILED, end_time=T0)
    long_ago = T0 - timedelta(hours=1)
    running = occurrence(
        tagged, long_ago, status=S.RUNNING, instance_id="gone", start_time=long_ago
    )
    await store.insert_occurrences([*history, failed, running])
    with page_reads(store, only="") as statements:
        page = await store.list_occurrences(OccurrenceQuery(statuses=(S.FAILED,), limit=5))
        assert [o.id for o in page.items] == [failed.id]
        query = OccurrenceQuery(job_id=job.id, statuses=(S.FAILED, S.CANCELLED), limit=5)
        assert [o.id for o in (await store.list_occurrences(query)).items] == [failed.id]
        stale = await store.stale_occurrences(
            NOW, running_threshold=60, queued_threshold=60, limit=10
        )
        assert [s.occurrence.id for s in stale] == [running.id]
        orphans = await store.orphaned_occurrences(
            NOW, live_instances=["w"], silent_for=60, limit=10
        )
        assert [s.occurrence.id for s in orphans] == [running.id]
        assert [j.id for j in (await store.list_jobs(JobQuery(tags=("red",)))).items] == [tagged.id]
    literal = re.compile(r"occurrences\.status (= \d|IN \(\d)")  # status_in's
    reads = [(s, p) for s, p in statements if literal.search(s) or "@>" in s]
    assert len(reads) >= 5, statements
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        await driver.execute("ANALYZE occurrences")  # as autovacuum would have
        await driver.execute("ANALYZE jobs")
        await driver.execute("SET plan_cache_mode = force_generic_plan")
        try:
            for statement, params in reads:
                rows = await driver.fetch(f"EXPLAIN {statement}", *params)
                plan = "\n".join(r[0] for r in rows)
                # the runs (of 2030) are in the default partition; the others are empty
                assert "Seq Scan on occurrences_default" not in plan, plan
                if "@>" in statement:
                    assert "ix_jobs_tags" in plan, plan
                else:  # the status index, or the Queued's (the sweep of the Queued)
                    assert "status_id_idx" in plan or "dispatched_at_due_at_idx" in plan, plan
        finally:
            await driver.execute("RESET plan_cache_mode")
