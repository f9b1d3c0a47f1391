"""The store's dependency slice (rota.core.ports.DependencyStore): edges, graph runs and
their nodes, a dependent created once however often it is resolved. On SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from rota.core.dependencies import Dependency, DependencyRule, GraphRunStatus
from rota.core.ids import new_id
from rota.core.models import Occurrence
from rota.core.planning import new_occurrence
from rota.stores.sql import SqlStore
from tests.contract.test_store import NOW, SETTINGS, T0, S, fired, make_job, occurrence, status
from tests.contract.test_store_aggregates import assert_matches_a_scan


async def test_edges_are_replaced_and_go_with_either_job(store: SqlStore) -> None:
    a, b, c = make_job(), make_job(), make_job()
    await store.create_jobs([a, b, c])
    await store.set_dependencies(c.id, [Dependency(c.id, a.id), Dependency(c.id, b.id)], NOW)
    await store.set_dependencies(b.id, [Dependency(b.id, a.id, DependencyRule.FAILURE)], NOW)
    assert len(await store.dependency_edges()) == 3
    assert {e.job_id for e in await store.dependency_edges([b.id])} == {b.id, c.id}
    await store.set_dependencies(c.id, [Dependency(c.id, b.id, DependencyRule.COMPLETION)], NOW)
    assert await store.dependency_edges([c.id]) == [
        Dependency(c.id, b.id, DependencyRule.COMPLETION)
    ]
    await store.delete_job(b.id)
    assert await store.dependency_edges() == []


async def test_a_dependent_is_created_once_even_if_resolved_twice(store: SqlStore) -> None:
    """Two servers (or a status reported twice) resolve the same dependent at once: one
    occurrence, one node; the run links the root and it."""
    a, b = make_job(), make_job()
    root = await fired(store, a)
    await store.create_jobs([b])
    run_id = await store.start_graph_run(new_id(), root.id, a.id, NOW)
    assert await store.start_graph_run(new_id(), root.id, a.id, NOW) == run_id  # idempotent
    await store.apply_status([status(root, S.COMPLETED)])

    def dependent() -> Occurrence:
        return new_occurrence(b, NOW, NOW, SETTINGS, trigger_reason="after A")

    first, second = await asyncio.gather(
        store.add_graph_nodes(run_id, [dependent()]),
        store.add_graph_nodes(run_id, [dependent()]),
    )
    assert len(first) + len(second) == 1
    assert (await store.add_graph_nodes(run_id, [dependent()])) == []
    created = (first or second)[0]
    await assert_matches_a_scan(store)  # the new occurrence is counted in the statistics
    assert (await store.get_occurrence(created)).status is S.QUEUED
    run = await store.get_graph_run(run_id)
    assert [(n.job_id, n.occurrence_id) for n in run.nodes] == [(a.id, root.id), (b.id, created)]
    node = run.node(a.id)
    assert node is not None
    assert node.status is S.COMPLETED
    assert await store.graph_runs_of([root.id, created, new_id()]) == {
        root.id: run_id,
        created: run_id,
    }
    # The dependent's own occurrence belongs to the run: it starts no run of its own.
    assert await store.start_graph_run(new_id(), created, b.id, NOW) == run_id


async def test_runs_are_listed_and_finished(store: SqlStore) -> None:
    a = make_job()
    root = await fired(store, a)
    run_id = await store.start_graph_run(new_id(), root.id, a.id, NOW)
    assert [r.id for r in await store.list_graph_runs(running=True)] == [run_id]
    assert [r.id for r in await store.list_graph_runs(job_id=a.id)] == [run_id]
    await store.finish_graph_run(run_id, NOW)
    assert await store.list_graph_runs(running=True) == []
    run = await store.get_graph_run(run_id)
    assert run.status is GraphRunStatus.FINISHED
    assert run.finished_at == NOW
    assert await store.purge_graph_runs(NOW, 10) == 0  # finished at NOW: not before it
    assert await store.purge_graph_runs(NOW + timedelta(seconds=1), 10) == 1
    assert await store.list_graph_runs() == []
    assert await store.graph_runs_of([root.id]) == {}
    assert (await store.get_occurrence(root.id)).id == root.id  # the occurrence stays


async def test_unrooted_occurrences_are_a_roots_runs_of_no_graph_run(store: SqlStore) -> None:
    """The sweep's catch-up: a job's runs since it has a dependent that started no graph run
    (not those from before its first dependent, nor Skipped ones)."""
    a, b = make_job(), make_job()
    await store.create_jobs([a, b])
    early = occurrence(a, T0)  # created before A had a dependent
    await store.insert_occurrences([early])
    await store.set_dependencies(b.id, [Dependency(b.id, a.id)], T0 + timedelta(seconds=0.5))
    late = occurrence(a, NOW)
    skipped = occurrence(a, NOW + timedelta(seconds=1), status=S.SKIPPED, skip_reason="overlap")
    await store.insert_occurrences([late, skipped])
    since = T0 - timedelta(hours=1)
    assert [o.id for o in await store.unrooted_occurrences(since, 10)] == [late.id]
    assert await store.unrooted_occurrences(NOW + timedelta(seconds=1), 10) == []
    await store.start_graph_run(new_id(), late.id, a.id, NOW)
    assert await store.unrooted_occurrences(since, 10) == []
