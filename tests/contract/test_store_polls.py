"""The store's periodic polls (every server asks them every few seconds, whatever it holds)
read from an index, not the whole table, however the planner's statistics stand: a table
just bulk-loaded and not yet analyzed is where a poll that the planner may scan is scanned
(found by ``auto_explain`` in a throughput bench: the end-of-pause probe and the graph
sweep's catch-up read every job and every occurrence on each sweep)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.core.dependencies import Dependency
from rota.core.ports import Store
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
    0026), among a history of finished ones. They write the status into their text: a
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
                # the index, or each partition's copy of it
                copies = {"ix_occurrences_queued"} | {
                    r[0]
                    for r in await driver.fetch(
                        "SELECT c.relname FROM pg_inherits i "
                        "JOIN pg_class c ON c.oid = i.inhrelid "
                        "JOIN pg_class p ON p.oid = i.inhparent "
                        "WHERE p.relname = 'ix_occurrences_queued'"
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
