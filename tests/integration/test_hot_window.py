"""The schedule index holds only the hot window, in both modes: embedded (SQLite, the
in-memory index) and distributed (PostgreSQL, the Redis index, RabbitMQ), each a whole runtime
in this process with a one-second window and a loader syncing every 0.2 s.

- A one-time job created due beyond the window is not indexed; the loader enters it once its
  due time comes within the window, and it fires once, at its due time.
- Jobs changed while outside the window: moved further out, deleted or disabled, they never
  fire; moved into the near future, they fire then. None is indexed before its time nears.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from rota.app.runtime import Runtime
from rota.app.server import prepare
from rota.core.models import Occurrence
from rota.core.records import OccurrenceQuery
from tests.contract.rabbitmq_fixtures import rabbitmq_url as rabbitmq_url  # session fixture
from tests.contract.redis_fixtures import REDIS_URL, redis_scope
from tests.helpers import RuntimeFactory, eventually, settings_for
from tests.stores import pg_database

WINDOW = 1.0
LOADER_INTERVAL = 0.2
OVERRIDES = {
    "scheduler.hot_window_seconds": WINDOW,
    "scheduler.loader_interval_seconds": LOADER_INTERVAL,
    "scheduler.dispatch_lead_seconds": 0.0,
}
WAIT = 15.0
LATE = 2.0
"""How late a fire may be on a loaded CI machine (it is due within a poll of the loader)."""
MODES = ["embedded", pytest.param("distributed", marks=pytest.mark.postgres)]
TYPE = "hot.window"
"""No worker declares it: each fire is recorded (Skipped, no worker) when it is dispatched."""


@pytest.fixture(params=MODES)
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """``None`` for the embedded mode, else a migrated PostgreSQL database."""
    if request.param == "embedded":
        yield None
        return
    with pg_database(request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
async def runtime(
    database_url: str | None,
    request: pytest.FixtureRequest,
    runtime_factory: RuntimeFactory,
    tmp_path: Path,
) -> AsyncIterator[Runtime]:
    if database_url is None:
        yield await runtime_factory(OVERRIDES)
        return
    amqp_url = request.getfixturevalue("rabbitmq_url")
    async with AsyncExitStack() as stack:
        _client, prefix = await redis_scope(stack)  # its keys deleted at the end
        settings = settings_for(
            tmp_path,
            OVERRIDES,
            database_url=database_url,
            redis_url=REDIS_URL,
            amqp_url=amqp_url,
            name_prefix=prefix,
        )
        made = await prepare(settings, [])
        await made.start()
        stack.push_async_callback(made.stop, grace=1.0)
        yield made


async def indexed(rt: Runtime) -> set[UUID]:
    buckets = range(rt.settings.scheduler.bucket_count)
    return {e.job_id for e in await rt.index.due(buckets, float("inf"), 1000)}


async def fires(rt: Runtime, job_id: UUID) -> list[Occurrence]:
    page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=100))
    return list(page.items)


async def one_time(rt: Runtime, at: datetime) -> Any:
    return await rt.jobs.create_job({"job_type": TYPE, "execute_at": at})


async def test_a_job_due_beyond_the_window_is_loaded_as_it_nears_and_fires_once(
    runtime: Runtime,
) -> None:
    due = runtime.jobs.now() + timedelta(seconds=WINDOW + 1.0)
    job = await one_time(runtime, due)
    assert job.id not in await indexed(runtime)

    async def entered() -> bool:
        return job.id in await indexed(runtime)

    await eventually(entered, WAIT, "the loader entering the job")
    assert time.time() >= due.timestamp() - WINDOW  # not before its time came into the window

    async def fired() -> list[Occurrence]:
        return await fires(runtime, job.id)

    await eventually(fired, WAIT, "the job's fire")
    [fire] = await fires(runtime, job.id)
    assert fire.scheduled_for == due
    assert due <= fire.created_at < due + timedelta(seconds=LATE)

    async def done() -> bool:
        return not await entered() and (await runtime.store.get_job(job.id)).next_run_at is None

    await eventually(done, WAIT, "the finished job leaving the index")
    assert len(await fires(runtime, job.id)) == 1


async def test_jobs_changed_outside_the_window_fire_as_they_are_when_their_time_comes(
    runtime: Runtime,
) -> None:
    now = runtime.jobs.now()
    near = now + timedelta(seconds=WINDOW + 1.0)
    moved_out, deleted, disabled = [await one_time(runtime, near) for _ in range(3)]
    moved_in = await one_time(runtime, now + timedelta(hours=1))
    last = await one_time(runtime, near + timedelta(seconds=0.5))
    assert await indexed(runtime) == set()

    await runtime.jobs.update_job(moved_out.id, {"execute_at": now + timedelta(hours=2)})
    await runtime.jobs.delete_job(deleted.id)
    await runtime.jobs.update_job(disabled.id, {"is_active": False})
    await runtime.jobs.update_job(moved_in.id, {"execute_at": near})
    assert await indexed(runtime) == set()  # all of them still beyond the window

    async def both_fired() -> bool:
        return bool(await fires(runtime, moved_in.id)) and bool(await fires(runtime, last.id))

    await eventually(both_fired, WAIT, "the fires of the moved-in and the last job")
    [fire] = await fires(runtime, moved_in.id)
    assert fire.scheduled_for == near
    # Their due time has passed (the last job's too): none of the others fired or is indexed.
    for job in (moved_out, deleted, disabled):
        assert await fires(runtime, job.id) == []

    async def none_indexed() -> bool:  # a fired job leaves the index after its fire's commit
        return await indexed(runtime) == set()

    await eventually(none_indexed, WAIT, "the fired jobs leaving the index")
    for job in (moved_out, deleted, disabled):
        assert await fires(runtime, job.id) == []
    assert (await runtime.store.get_job(moved_out.id)).next_run_at == now + timedelta(hours=2)


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    with pg_database(pg_template) as url:
        yield url


@pytest.mark.postgres
async def test_buckets_changing_hands_fire_each_windowed_job_once(
    pg_url: str, rabbitmq_url: str, tmp_path: Path
) -> None:
    """Two servers on one PostgreSQL, Redis and RabbitMQ. Jobs due beyond the window are
    created while the first owns every bucket; the second joins and takes half of them before
    the jobs are due: each job fires once, those of the second's buckets by the second. Then
    jobs are loaded into the (Redis) index and the second stops gracefully: the first takes its
    buckets over and fires them, each once."""
    database_url, amqp_url = pg_url, rabbitmq_url
    async with AsyncExitStack() as stack:
        _client, prefix = await redis_scope(stack)
        overrides = {**OVERRIDES, "scheduler.lease_seconds": 1.5}
        servers: list[Runtime] = []
        for name in ("a", "b"):
            settings = settings_for(
                tmp_path / name,
                overrides,
                database_url=database_url,
                redis_url=REDIS_URL,
                amqp_url=amqp_url,
                name_prefix=prefix,
            )
            servers.append(await prepare(settings, []))
        a, b = servers
        await a.start()
        stack.push_async_callback(a.stop, grace=1.0)
        count = a.settings.scheduler.bucket_count
        assert sorted(a.owner.buckets) == list(range(count))

        due = a.jobs.now() + timedelta(seconds=WINDOW + 3.0)
        first = [await one_time(a, due) for _ in range(24)]
        assert await indexed(a) == set()
        await b.start()
        b_running = True

        async def stop_b() -> None:
            if b_running:
                await b.stop(grace=1.0)

        stack.push_async_callback(stop_b)

        def split() -> bool:
            return bool(b.owner.buckets) and len(a.owner.buckets + b.owner.buckets) == count

        await eventually(split, WAIT, "the second server taking its share of the buckets")
        # Before they are due (usually before they are near): the second server fires its own.
        assert time.time() < due.timestamp(), "the handover took too long"
        assert set(a.owner.buckets).isdisjoint(b.owner.buckets)

        async def all_fired(jobs: list[Any]) -> bool:
            return all([await fires(a, job.id) for job in jobs])

        await eventually(lambda: all_fired(first), WAIT, "every first job's fire")
        for job in first:
            [fire] = await fires(a, job.id)
            assert fire.scheduled_for == due
        by_b = {j.id for j in first if j.bucket in b.owner.buckets}
        assert by_b, "no first job in the second server's buckets"
        fired_a, fired_b = (s.dispatcher.stats.skipped for s in servers)
        assert (fired_a, fired_b) == (len(first) - len(by_b), len(by_b))

        # Loaded into the shared index by their owners, then the second server leaves.
        due = a.jobs.now() + timedelta(seconds=WINDOW + 2.0)
        second = [await one_time(a, due) for _ in range(24)]
        ids = {j.id for j in second}

        async def loaded() -> bool:
            return ids <= await indexed(a)

        await eventually(loaded, WAIT, "the second jobs in the index")
        assert time.time() < due.timestamp(), "loaded too late to test the handover"
        b_running = False
        await b.stop(grace=1.0)

        await eventually(lambda: all_fired(second), WAIT, "every second job's fire")
        for job in second:
            [fire] = await fires(a, job.id)
            assert fire.scheduled_for == due
        assert sorted(a.owner.buckets) == list(range(count))
        assert a.dispatcher.stats.skipped == fired_a + len(second)
