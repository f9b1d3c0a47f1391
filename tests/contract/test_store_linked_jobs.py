"""Jobs written with their upstreams and their audit entry in one transaction (the
``DependencyStore`` slice's ``create_linked_jobs`` and ``update_linked_job``): whatever part
fails, nothing of the change is left. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from rota.core.dependencies import Dependency, DependencyRule
from rota.core.errors import ConflictError, NotFoundError
from rota.core.ids import new_id
from rota.core.security import AuditEntry, AuditQuery
from rota.stores.sql import SqlStore
from tests.contract.test_store import NOW, make_job
from tests.contract.test_store_aggregates import assert_matches_a_scan


def entry(resource: object, after: Any = None, entry_id: Any = None) -> AuditEntry:
    return AuditEntry(
        id=entry_id or new_id(),
        at=NOW,
        actor="alice",
        action="job.created",
        resource_type="job",
        resource_id=str(resource),
        after=after,
    )


async def audit_of(store: SqlStore, resource: object) -> list[AuditEntry]:
    return (await store.list_audit(AuditQuery(resource_id=str(resource)))).items


async def test_a_job_its_upstreams_and_its_entry_are_written_together(store: SqlStore) -> None:
    up = make_job()
    await store.create_jobs([up])
    job = make_job()
    edges = [Dependency(job.id, up.id, DependencyRule.COMPLETION)]
    await store.create_linked_jobs([job], edges, [entry(job.id, {"name": "J"})])
    assert (await store.get_job(job.id)).id == job.id
    assert await store.dependency_edges([job.id]) == edges
    [recorded] = await audit_of(store, job.id)
    assert recorded.after == {"name": "J"}
    await assert_matches_a_scan(store)


async def test_a_missing_upstream_leaves_nothing(store: SqlStore) -> None:
    up, gone = make_job(), make_job()
    await store.create_jobs([up, gone])
    await store.delete_job(gone.id)  # deleted after the caller looked
    job = make_job()
    edges = [Dependency(job.id, up.id), Dependency(job.id, gone.id)]
    with pytest.raises(NotFoundError) as missing:
        await store.create_linked_jobs([job], edges, [entry(job.id)])
    assert missing.value.key == gone.id
    with pytest.raises(NotFoundError):
        await store.get_job(job.id)
    assert await store.dependency_edges() == []
    assert await audit_of(store, job.id) == []
    await assert_matches_a_scan(store)  # the statistics did not count it either


async def test_an_audit_entry_refused_by_the_store_leaves_no_job(store: SqlStore) -> None:
    """The last part fails (an entry whose id is taken: the store's key refuses it), after
    the job and its edges were written in the transaction: none of them stays."""
    up, earlier = make_job(), make_job()
    await store.create_jobs([up, earlier])
    taken = entry(earlier.id)
    await store.append_audit([taken])
    job = make_job()
    with pytest.raises(ConflictError):
        await store.create_linked_jobs(
            [job], [Dependency(job.id, up.id)], [entry(job.id, entry_id=taken.id)]
        )
    with pytest.raises(NotFoundError):
        await store.get_job(job.id)
    assert await store.dependency_edges() == []
    assert await audit_of(store, job.id) == []
    await assert_matches_a_scan(store)


async def test_a_change_its_upstreams_and_its_entry_are_written_together(
    store: SqlStore,
) -> None:
    a, b, job = make_job(), make_job(), make_job(display_name="before")
    await store.create_jobs([a, b, job])
    await store.set_dependencies(job.id, [Dependency(job.id, a.id)], NOW)
    changed = replace(job, display_name="after", version=job.version + 1, updated_at=NOW)

    # an upstream deleted meanwhile: the change, the edges and the entry are all refused
    gone = make_job()
    await store.create_jobs([gone])
    await store.delete_job(gone.id)
    with pytest.raises(NotFoundError):
        await store.update_linked_job(
            changed,
            expected_version=job.version,
            edges=[Dependency(job.id, gone.id)],
            audit=[entry(job.id)],
        )
    # a concurrent change (a stale version): the same
    with pytest.raises(ConflictError):
        await store.update_linked_job(
            changed,
            expected_version=job.version + 5,
            edges=[Dependency(job.id, b.id)],
            audit=[entry(job.id)],
        )
    kept = await store.get_job(job.id)
    assert (kept.display_name, kept.version) == ("before", job.version)
    assert await store.dependency_edges([job.id]) == [Dependency(job.id, a.id)]
    assert await store.job_versions(job.id) == []
    assert await audit_of(store, job.id) == []

    stored = await store.update_linked_job(
        changed,
        expected_version=job.version,
        edges=[Dependency(job.id, b.id)],
        audit=[entry(job.id, {"name": "after"})],
    )
    assert (stored.display_name, stored.version) == ("after", job.version + 1)
    assert await store.dependency_edges([job.id]) == [Dependency(job.id, b.id)]
    assert [e.after for e in await audit_of(store, job.id)] == [{"name": "after"}]

    # edges None: the upstreams stay as they are
    again = replace(stored, description="more", updated_at=NOW)
    await store.update_linked_job(again, expected_version=stored.version, edges=None, audit=[])
    assert await store.dependency_edges([job.id]) == [Dependency(job.id, b.id)]
    await assert_matches_a_scan(store)


async def test_new_upstreams_and_their_entry_are_written_together(store: SqlStore) -> None:
    """``PUT /jobs/{id}/dependencies``: the edges and the audit entry, or neither."""
    a, b, job = make_job(), make_job(), make_job()
    await store.create_jobs([a, b, job])
    await store.set_dependencies(job.id, [Dependency(job.id, a.id)], NOW)
    duplicate = entry(job.id)
    await store.append_audit([duplicate])
    with pytest.raises(ConflictError):  # the entry's key is taken: the last write fails
        await store.set_dependencies(
            job.id, [Dependency(job.id, b.id)], NOW, audit=[entry(job.id, entry_id=duplicate.id)]
        )
    assert [
        e.upstream_id for e in await store.dependency_edges([job.id]) if e.job_id == job.id
    ] == [a.id]
    note = entry(job.id, after={"dependsOn": [str(b.id)]})
    await store.set_dependencies(job.id, [Dependency(job.id, b.id)], NOW, audit=[note])
    assert [
        e.upstream_id for e in await store.dependency_edges([job.id]) if e.job_id == job.id
    ] == [b.id]
    assert note.id in {e.id for e in await audit_of(store, job.id)}
