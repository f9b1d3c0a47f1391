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
from tests.contract.test_store import NOW, T0, make_job, occurrence
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
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        plan = "\n".join(r[0] for r in await driver.fetch(f"EXPLAIN {probe}", *params))
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
