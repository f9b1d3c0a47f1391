"""Code-declared schedules (``@rota.job(…, cron=…)``): the sync of worker declarations into code
jobs, on SQLite and PostgreSQL, with the in-memory (and once the Redis) worker registry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

import rota
from rota.app.configs import jobs_config
from rota.app.settings import SchedulerSettings
from rota.coordination.memory import MemoryCoordination
from rota.coordination.redis import RedisCoordination
from rota.core.errors import ConflictError
from rota.core.ids import new_id
from rota.core.jobspec import JobSpec
from rota.core.models import Job, JobSource, JsonValue, Priority, WorkerInfo
from rota.core.ports import Coordination
from rota.indexes.memory import MemoryScheduleIndex
from rota.sdk.registry import JobRegistry
from rota.services.declared import REMOVED_BY, DeclaredSchedules, SyncResult, declarations
from rota.services.jobs import JobService
from rota.services.workers import WorkerDirectory
from rota.stores.migrate import downgrade, upgrade
from rota.stores.schema import jobs as jobs_table
from rota.stores.sql import SqlStore, create_store_engine
from tests.contract.redis_fixtures import redis_scope
from tests.stores import store as store  # each store kind, over the conftest's SQLite one

T0 = datetime(2030, 1, 7, 12, 0, 30, tzinfo=UTC)  # a Monday, 30 s past noon
ALL_BUCKETS = list(range(16))


def declared(
    name: str = "nightly",
    cron: str | None = None,
    time_zone: str = "UTC",
    priority: int | None = None,
) -> dict[str, Mapping[str, JsonValue]]:
    """What a worker registers for one job type, made by the real SDK."""

    async def handler(ctx: rota.JobContext) -> None:
        return None

    definition = rota.job(name, cron=cron, time_zone=time_zone, priority=priority)(handler)
    return dict(JobRegistry([definition]).describe())


def instance(
    instance_id: str,
    job_types: Mapping[str, Mapping[str, JsonValue]],
    *,
    started: float = 0,
    group: str = "reports",
) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance_id,
        worker_id=group,
        host="h",
        pid=1,
        job_types=job_types,
        concurrency=1,
        started_at=T0 + timedelta(seconds=started),
    )


class Harness:
    def __init__(self, store: SqlStore, coordination: Coordination) -> None:
        self.store = store
        self.coordination = coordination
        self.index = MemoryScheduleIndex()
        self.jobs = JobService(
            store, self.index, coordination, jobs_config(SchedulerSettings()), lambda: T0
        )
        self.sync = self.server()

    def server(self) -> DeclaredSchedules:
        """The sync of one more server sharing the store, registry and index."""
        jobs = JobService(
            self.store, self.index, self.coordination, jobs_config(SchedulerSettings()), lambda: T0
        )
        return DeclaredSchedules(jobs, self.store, WorkerDirectory(self.coordination, max_age=0))

    async def register(self, *workers: WorkerInfo) -> None:
        for worker in workers:
            await self.coordination.register_worker(worker, 60)

    async def replace(self, old: str, new: WorkerInfo) -> None:
        """A worker instance restarted with other code."""
        await self.coordination.unregister_worker(old)
        await self.register(new)

    async def code_job(self) -> Job:
        (job,) = await self.store.code_jobs()
        return job

    async def indexed(self) -> dict[UUID, float]:
        return {e.job_id: e.due for e in await self.index.due(ALL_BUCKETS, float("inf"), 100)}


@pytest.fixture
async def h(store: SqlStore) -> AsyncIterator[Harness]:
    coordination = MemoryCoordination()
    yield Harness(store, coordination)
    await coordination.close()


async def synced(h: Harness) -> SyncResult:
    result = await h.sync.sync_if_changed()
    assert result is not None, "the registry changed: a sync was expected"
    assert result.failed == []
    return result


# --- creating ----------------------------------------------------------------------------------


async def test_a_worker_declaring_a_cron_creates_the_code_job(h: Harness) -> None:
    await h.register(
        instance("w1", declared(cron="* * * * *", time_zone="Europe/Berlin", priority=3))
    )

    result = await synced(h)

    assert result.created == ["nightly"]
    job = await h.code_job()
    assert job.source is JobSource.CODE
    assert (job.job_type, job.display_name) == ("nightly", "nightly")
    assert (job.cron_expression, job.time_zone, job.priority) == (
        "* * * * *",
        "Europe/Berlin",
        Priority.HIGH,
    )
    assert job.worker_id is None  # whichever group declares the type runs it
    assert (job.max_retries, job.timeout_seconds) == (None, None)  # the type's defaults
    assert job.is_active
    assert job.created_by == "code"
    assert job.next_run_at == datetime(2030, 1, 7, 12, 1, tzinfo=UTC)
    assert await h.indexed() == {job.id: job.next_run_at.timestamp()}
    assert job.declared_spec == {
        "cronExpression": "* * * * *",
        "timeZone": "Europe/Berlin",
        "priority": 3,
    }


async def test_types_without_a_cron_and_unchanged_registries_create_nothing(h: Harness) -> None:
    await h.register(instance("w1", declared(cron=None)))
    assert await synced(h) == SyncResult()
    assert await h.store.code_jobs() == []

    await h.register(instance("w1", declared(cron=None)))  # a heartbeat: nothing to do
    assert await h.sync.sync_if_changed() is None


async def test_a_heartbeat_does_not_resync_but_a_new_instance_does(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="* * * * *")))
    await synced(h)
    job = await h.code_job()
    await h.jobs.delete_job(job.id)

    await h.register(instance("w1", declared(cron="* * * * *")))  # heartbeat of the same one
    assert await h.sync.sync_if_changed() is None
    await h.register(instance("w2", declared(cron="* * * * *"), started=5))

    assert (await synced(h)).created == ["nightly"]  # a deleted code job comes back
    assert (await h.code_job()).id != job.id


# --- updating ----------------------------------------------------------------------------------


async def test_a_changed_cron_updates_the_job_with_a_new_version(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="0 3 * * *")))
    await synced(h)
    before = await h.code_job()
    assert await h.indexed() == {}  # 03:00 tomorrow is outside the hot window

    await h.replace("w1", instance("w2", declared(cron="*/30 * * * * *"), started=60))
    result = await synced(h)

    assert result.updated == ["nightly"]
    job = await h.code_job()
    assert job.id == before.id
    assert job.version == before.version + 1
    assert job.cron_expression == "*/30 * * * * *"
    assert job.next_run_at == datetime(2030, 1, 7, 12, 1, tzinfo=UTC)
    assert job.updated_by == "code"
    assert await h.indexed() == {job.id: job.next_run_at.timestamp()}
    (old,) = await h.store.job_versions(job.id)
    assert old.version == 1
    assert old.snapshot["cronExpression"] == "0 3 * * *"


async def test_a_removed_schedule_deactivates_the_job_and_never_deletes_it(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="* * * * *")))
    await synced(h)
    job = await h.code_job()

    await h.replace("w1", instance("w2", declared(cron=None), started=60))
    assert (await synced(h)).deactivated == ["nightly"]

    off = await h.store.get_job(job.id)
    assert not off.is_active
    assert off.next_run_at is None
    assert off.updated_by == REMOVED_BY
    assert off.cron_expression == "* * * * *"  # kept, to switch back on by hand
    assert await h.indexed() == {}

    await h.register(instance("w3", declared(cron=None), started=120))
    assert await synced(h) == SyncResult()  # already applied: no second change
    assert (await h.store.get_job(job.id)).version == off.version

    await h.register(instance("w4", declared(cron="* * * * *"), started=180))
    assert (await synced(h)).updated == ["nightly"]  # back in code: back on
    assert (await h.store.get_job(job.id)).is_active


async def test_no_live_worker_leaves_the_job_alone(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="* * * * *")))
    await synced(h)
    job = await h.code_job()

    await h.coordination.unregister_worker("w1")
    assert await synced(h) == SyncResult()
    await h.register(instance("w2", declared("other", cron=None)))  # another type only
    assert await synced(h) == SyncResult()

    assert await h.store.get_job(job.id) == job


async def test_api_edits_stand_until_the_code_changes(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="* * * * *")))
    await synced(h)
    job = await h.code_job()
    await h.jobs.update_job(job.id, {"cron_expression": "0 * * * *", "is_active": False})

    await h.register(instance("w2", declared(cron="* * * * *"), started=60))  # same code
    assert await synced(h) == SyncResult()
    kept = await h.store.get_job(job.id)
    assert (kept.cron_expression, kept.is_active) == ("0 * * * *", False)

    await h.register(instance("w3", declared(cron="*/5 * * * *"), started=120))  # new code
    assert (await synced(h)).updated == ["nightly"]
    applied = await h.store.get_job(job.id)
    assert (applied.cron_expression, applied.is_active) == ("*/5 * * * *", True)


# --- disagreement and races --------------------------------------------------------------------


async def test_disagreeing_instances_follow_the_most_recently_started(h: Harness) -> None:
    await h.register(
        instance("old", declared(cron="0 3 * * *"), started=0),
        instance("new", declared(cron="0 4 * * *"), started=60),
        instance("plain", declared(cron=None), started=120),  # no cron does not switch it off
    )

    assert (await synced(h)).created == ["nightly"]
    assert (await h.code_job()).cron_expression == "0 4 * * *"

    await h.register(instance("old", declared(cron="0 3 * * *"), started=0))  # heartbeats
    await h.register(instance("new", declared(cron="0 4 * * *"), started=60))
    assert await h.sync.sync_if_changed() is None


def test_declarations_pick_a_cron_then_the_latest_start_then_the_instance_id() -> None:
    wanted = declarations(
        [
            instance("a", declared(cron="0 1 * * *"), started=10),
            instance("b", declared(cron="0 2 * * *"), started=10),
            instance("c", declared(cron=None), started=99),
            instance("d", {"nightly": {"cronExpression": 5}}, started=999),  # malformed: ignored
        ]
    )
    assert wanted["nightly"].cron_expression == "0 2 * * *"
    assert wanted["nightly"].instance_id == "b"


async def test_two_servers_syncing_at_once_make_one_job(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="* * * * *")))
    servers = [h.sync, h.server(), h.server()]

    results = await asyncio.gather(*(s.sync_if_changed() for s in servers))

    jobs = await h.store.code_jobs()
    assert len(jobs) == 1
    assert sum(len(r.created) for r in results if r is not None) == 1
    assert all(r is not None and r.failed == [] for r in results)


async def test_two_servers_applying_a_change_at_once_make_one_version(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="0 3 * * *")))
    await synced(h)
    servers = [h.sync, h.server(), h.server()]
    for server in servers[1:]:
        await server.sync_if_changed()  # each has seen the first registry
    await h.replace("w1", instance("w2", declared(cron="0 5 * * *"), started=60))

    results = await asyncio.gather(*(s.sync_if_changed() for s in servers))

    job = await h.code_job()
    assert (job.cron_expression, job.version) == ("0 5 * * *", 2)
    assert [v.version for v in await h.store.job_versions(job.id)] == [1]
    assert all(r is not None and r.failed == [] for r in results)


async def test_the_store_refuses_a_second_code_job_of_a_type(h: Harness) -> None:
    spec = JobSpec(job_type="nightly", cron_expression="* * * * *", source=JobSource.CODE)
    await h.jobs.create_job(spec)
    with pytest.raises(ConflictError):
        await h.jobs.create_job(spec)
    await h.jobs.create_job(JobSpec(job_type="nightly", cron_expression="* * * * *"))  # API: ok
    assert len(await h.store.code_jobs()) == 1


async def test_a_bad_declaration_from_a_foreign_worker_is_refused_not_fatal(h: Harness) -> None:
    bad: dict[str, Any] = {"cronExpression": "every day", "timeZone": "UTC"}
    await h.register(
        instance("w1", {"broken": bad, **declared(cron="* * * * *")}, group="polyglot")
    )

    result = await synced(h)

    assert (result.refused, result.created) == (["broken"], ["nightly"])
    assert [j.job_type for j in await h.store.code_jobs()] == ["nightly"]
    assert await h.sync.sync_if_changed() is None  # refused for good, not retried in a loop


async def test_a_user_deleting_the_job_during_a_sync_is_survived(h: Harness) -> None:
    await h.register(instance("w1", declared(cron="0 3 * * *")))
    await synced(h)
    job = await h.code_job()
    stale = DeclaredSchedules(h.jobs, h.store, WorkerDirectory(h.coordination, max_age=0))
    await h.store.delete_job(job.id)

    # The sync read the job before the delete: the update fails, it re-reads and creates anew.
    result = SyncResult()
    await stale._sync_type(
        declarations([instance("w2", declared(cron="0 4 * * *"))])["nightly"], job, result
    )

    assert (result.created, result.failed) == (["nightly"], [])
    assert (await h.code_job()).cron_expression == "0 4 * * *"


# --- the Redis registry (distributed mode) -----------------------------------------------------


async def test_declarations_registered_in_redis_create_the_job(store: SqlStore) -> None:
    async with AsyncExitStack() as stack:
        client, prefix = await redis_scope(stack)
        coordination = RedisCoordination(client, prefix=prefix)
        h = Harness(store, coordination)
        await h.register(instance(f"w-{new_id()}", declared(cron="0 3 * * *", priority=4)))

        assert (await synced(h)).created == ["nightly"]
        job = await h.code_job()
        assert (job.cron_expression, job.priority) == ("0 3 * * *", Priority.CRITICAL)


# --- migration 0002 ----------------------------------------------------------------------------


async def test_migration_0002_keeps_existing_jobs_as_api_jobs_both_ways(empty_url: str) -> None:
    await upgrade(empty_url, "0001")
    job_id = new_id()
    engine = create_store_engine(empty_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                jobs_table.insert().values(  # only the columns of 0001
                    id=job_id,
                    job_type="old",
                    display_name="old",
                    description="",
                    tags=[],
                    cron_expression="* * * * *",
                    time_zone="UTC",
                    is_active=True,
                    priority=2,
                    concurrency_policy=0,
                    misfire_policy="fire_once",
                    bucket=0,
                    version=1,
                    created_at=T0,
                    updated_at=T0,
                    total_executions=0,
                    success_count=0,
                    failure_count=0,
                    duration_samples=0,
                )
            )
    finally:
        await engine.dispose()

    await upgrade(empty_url)
    store = SqlStore(empty_url)
    await store.open()
    try:
        job = await store.get_job(job_id)
        assert (job.source, job.declared_spec) == (JobSource.API, None)
        assert await store.code_jobs() == []
    finally:
        await store.close()

    await downgrade(empty_url, "0001")
    await upgrade(empty_url)  # and up again, with the row still there
    store = SqlStore(empty_url)
    await store.open()
    try:
        assert (await store.get_job(job_id)).job_type == "old"
    finally:
        await store.close()
