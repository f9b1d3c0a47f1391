"""The data schema each worker group last published, kept by the worker directory: written
to the store once per change (a deploy), not on every reading of the registry, and used for
job data while none of the type's workers is live."""

from __future__ import annotations

from typing import Any

from rota.coordination.memory import MemoryCoordination
from rota.core.models import WorkerInfo
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore

OLD = {"type": "object", "properties": {"kind": {}}}
NEW = {"type": "object", "required": ["kind"], "properties": {"kind": {}}}


def instance(instance_id: str, group: str, schema: Any) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance_id,
        worker_id=group,
        host="h",
        pid=1,
        job_types={"report": {"schema": schema}},
        concurrency=1,
    )


async def test_a_schema_is_written_once_per_change_and_outlives_its_workers(
    store: SqlStore, coordination: MemoryCoordination
) -> None:
    directory = WorkerDirectory(coordination, history=store)
    await coordination.register_worker(instance("a-1", "reports", OLD), 60)
    await directory.refresh(force=True)
    [first] = await store.published_schemas()
    assert (first.worker_id, first.schema) == ("reports", OLD)
    for _ in range(3):  # the same schema again: nothing written
        await directory.refresh(force=True)
    assert await store.published_schemas() == [first]

    await coordination.register_worker(instance("a-2", "reports", NEW), 60)  # a deploy
    await coordination.unregister_worker("a-1")
    await directory.refresh(force=True)
    [second] = await store.published_schemas()
    assert second.schema == NEW
    assert second.published_at >= first.published_at

    await coordination.unregister_worker("a-2")
    await directory.refresh(force=True)
    assert directory.type_description("report") is None  # none live ...
    assert directory.data_description("report") == {"schema": NEW}  # ... its schema kept
    assert directory.data_description("report", "other") == {"schema": NEW}  # any group's
    assert directory.data_description("unknown") is None


async def test_a_groups_own_schema_wins_over_another_groups_newer_one(
    store: SqlStore, coordination: MemoryCoordination
) -> None:
    directory = WorkerDirectory(coordination, history=store)
    await coordination.register_worker(instance("a-1", "reports", OLD), 60)
    await coordination.register_worker(instance("b-1", "billing", NEW), 60)
    await directory.refresh(force=True)
    await coordination.unregister_worker("a-1")
    await coordination.unregister_worker("b-1")
    restarted = WorkerDirectory(coordination, history=store)  # from the store alone
    await restarted.refresh(force=True)
    assert restarted.data_description("report", "reports") == {"schema": OLD}
    assert restarted.data_description("report", "billing") == {"schema": NEW}
