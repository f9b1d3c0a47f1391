"""The server checks what the form checks, and a job type no worker ever declared (issue 18),
in both modes: embedded (SQLite, the in-process broker and coordination, the embedded worker)
and distributed (PostgreSQL, Redis and RabbitMQ, the workers built as ``rota worker`` builds
them, in this process).

- Job data that does not fit the data schema a worker published for its type is a 422 that
  names the field (``jobData.kind``) on every write path: ``POST /jobs``, ``POST /jobs/job``,
  ``PATCH /jobs/{id}``, ``PUT /jobs/job``, ``POST /jobs/bulk`` and a trigger's own data.
- A job of a type no worker ever declared is accepted with an ``unknown_job_type`` warning
  (the API and the dashboard's job page); its fires are recorded Skipped ``no_worker`` until
  a worker declaring the type registers, and then they run.
- A type declared before, whose workers are merely down, is not skipped: its fires wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from prometheus_client import CollectorRegistry

from rota.api.app import create_app
from rota.app.builtins import load_registry
from rota.app.runtime import Runtime
from rota.app.server import prepare
from rota.app.settings import Settings
from rota.app.wiring import build_executor, build_worker
from rota.core.models import Occurrence, OccurrenceStatus, WorkerInfo
from rota.core.records import OccurrenceQuery
from rota.observability.metrics import RotaMetrics
from rota.observability.tracing import Tracing
from rota.services.workers import WorkerDirectory
from rota.worker.localstore import LocalStore
from rota.worker.presence import WorkerPresence
from tests.api_client import api_client
from tests.contract.rabbitmq_fixtures import rabbitmq_url as rabbitmq_url  # session fixture
from tests.contract.redis_fixtures import REDIS_URL, redis_scope
from tests.helpers import RuntimeFactory, eventually, settings_for
from tests.stores import pg_database

API = "/api/v1/jobs"
WAIT = 15.0
MODES = ["embedded", pytest.param("distributed", marks=pytest.mark.postgres)]
REPORT = {"jobType": "schema.report", "cronExpression": "0 0 1 1 *"}


@dataclass
class Env:
    """A started runtime with a worker of ``schema.report`` (data schema: ``kind`` required,
    ``copies`` an integer), an Admin's API client, and a way to start more workers."""

    runtime: Runtime
    client: httpx.AsyncClient
    settings: Settings
    stack: AsyncExitStack
    tmp_path: Path

    async def start_worker(self, module: str, worker_id: str) -> None:
        """A worker group ``worker_id`` running ``module``, started as ``rota worker``
        starts one (queue bound, then registered); stopped when the test ends."""
        settings, rt = self.settings, self.runtime
        registry = load_registry(settings, [module])
        if settings.is_embedded:  # beside the embedded worker, on the same broker
            metrics = RotaMetrics(CollectorRegistry(), server=False)
            executor = build_executor(
                settings,
                registry,
                broker=rt.broker,
                coordination=rt.coordination,
                worker_id=worker_id,
                metrics=metrics,
                tracing=Tracing(),
            )
            presence = WorkerPresence(
                rt.coordination,
                executor,
                registry,
                worker_id=worker_id,
                concurrency=2,
                heartbeat_seconds=settings.worker.heartbeat_seconds,
            )
        else:
            local = await LocalStore.open(self.tmp_path / f"state-{worker_id}")
            self.stack.push_async_callback(local.close)
            parts = build_worker(settings, registry, local, worker_id=worker_id, concurrency=2)
            self.stack.push_async_callback(parts.coordination.close)
            self.stack.push_async_callback(parts.broker.close)
            await parts.broker.start()
            executor, presence = parts.executor, parts.presence
        await executor.start()
        self.stack.push_async_callback(executor.stop, 1.0)
        await presence.start()
        self.stack.push_async_callback(presence.stop)


@pytest.fixture(params=MODES)
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """``None`` for the embedded mode (SQLite in ``tmp_path``), else a migrated PostgreSQL
    database."""
    if request.param == "embedded":
        yield None
        return
    with pg_database(request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
async def env(
    database_url: str | None,
    request: pytest.FixtureRequest,
    runtime_factory: RuntimeFactory,
    tmp_path: Path,
) -> AsyncIterator[Env]:
    async with AsyncExitStack() as stack:
        if database_url is None:
            runtime = await runtime_factory({}, ["tests.integration.schema_jobs"])
            settings = runtime.settings
        else:
            amqp_url = request.getfixturevalue("rabbitmq_url")
            _client, prefix = await redis_scope(stack)  # its keys deleted at the end
            settings = settings_for(
                tmp_path,
                database_url=database_url,
                redis_url=REDIS_URL,
                amqp_url=amqp_url,
                name_prefix=prefix,
            )
            runtime = await prepare(settings, [])
            await runtime.start()
            stack.push_async_callback(runtime.stop, grace=1.0)
        client = await stack.enter_async_context(api_client(create_app(runtime)))
        made = Env(runtime, client, settings, stack, tmp_path)
        if database_url is not None:
            await made.start_worker("tests.integration.schema_jobs", "reports")
        yield made


def refused(response: httpx.Response) -> list[str]:
    """The fields a 422 problem names."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return [error["field"] for error in response.json()["errors"]]


async def occurrences(env: Env, job_id: UUID) -> list[Occurrence]:
    page = await env.runtime.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=100))
    return page.items


async def test_data_that_does_not_fit_the_schema_is_a_422_naming_the_field(
    env: Env,
) -> None:
    c = env.client
    bad: dict[str, Any] = {**REPORT, "jobData": {"copies": "two"}}
    for path in (API, f"{API}/job"):
        assert sorted(refused(await c.post(path, json=bad))) == [
            "jobData.copies",
            "jobData.kind",
        ]
    answer = await c.post(API, json={**REPORT, "jobData": {"kind": "pdf"}})
    assert answer.status_code == 201, answer.text
    assert answer.json()["warnings"] == []
    job_id = answer.json()["id"]

    assert refused(await c.patch(f"{API}/{job_id}", json={"jobData": {"kind": 3}})) == [
        "jobData.kind"
    ]
    wrapped = {"id": job_id, "jobData": {"value": {"copies": 2}, "isUpdated": True}}
    assert refused(await c.put(f"{API}/job", json=wrapped)) == ["jobData.kind"]
    good = {**REPORT, "jobData": {"kind": "csv", "copies": 2}}
    assert refused(await c.post(f"{API}/bulk", json={"jobs": [good, bad]}))[0] == (
        "jobs[1].jobData.kind"
    )
    trigger = {"jobId": job_id, "jobData": {"kind": ["pdf"]}}  # a run with other data
    assert refused(await c.post(f"{API}/job/trigger", json=trigger)) == ["jobData.kind"]
    assert (await c.get(f"{API}/{job_id}")).json()["jobData"] == {"kind": "pdf"}  # unchanged
    answer = await c.patch(f"{API}/{job_id}", json={"jobData": {"kind": "csv", "copies": 3}})
    assert answer.status_code == 200, answer.text

    # A type with no published schema: no check (here one no worker declares: a warning).
    free = await c.post(API, json={"jobType": "schema.free", **_yearly(), "jobData": [1]})
    assert free.status_code == 201, free.text
    assert [w["code"] for w in free.json()["warnings"]] == ["unknown_job_type"]


def _yearly() -> dict[str, str]:
    return {"cronExpression": REPORT["cronExpression"]}


async def test_an_unknown_type_warns_is_skipped_no_worker_and_runs_once_declared(
    env: Env,
) -> None:
    c = env.client
    answer = await c.post(API, json={"jobType": "schema.late", "cronExpression": "* * * * * *"})
    assert answer.status_code == 201, answer.text
    [warning] = answer.json()["warnings"]
    assert warning["code"] == "unknown_job_type"
    assert "schema.late" in warning["message"]
    job_id = UUID(answer.json()["id"])
    page = await c.get(f"/jobs/{job_id}")  # the dashboard's job page shows it
    assert 'data-testid="job-warning"' in page.text
    assert "no worker has declared job type" in page.text

    async def skipped() -> bool:
        return any(o.skip_reason == "no_worker" for o in await occurrences(env, job_id))

    await eventually(skipped, WAIT, "a fire recorded Skipped no_worker")
    run = (await c.post(f"{API}/{job_id}/trigger", json={"reason": "now"})).json()
    assert (run["statusName"], run["skipReason"]) == ("Skipped", "no_worker")  # a manual run too
    assert all(o.status is OccurrenceStatus.SKIPPED for o in await occurrences(env, job_id))

    await env.start_worker("tests.integration.late_jobs", "late")

    async def completed() -> bool:
        return any(o.status is OccurrenceStatus.COMPLETED for o in await occurrences(env, job_id))

    await eventually(completed, WAIT, "a fire run by the worker declaring the type")
    assert (await c.get(f"{API}/{job_id}")).json()["warnings"] == []
    page = await c.get(f"/jobs/{job_id}")
    assert 'data-testid="job-warning"' not in page.text
    await c.patch(f"{API}/{job_id}", json={"isActive": False})


async def test_a_type_whose_workers_are_down_waits_for_them(env: Env) -> None:
    rt = env.runtime
    gone = WorkerInfo(
        instance_id="gone-1",
        worker_id="gone",
        host="h",
        pid=1,
        job_types={"schema.gone": {"schema": None}},
        concurrency=1,
    )
    await rt.coordination.register_worker(gone, ttl=30)
    await rt.workers.refresh(force=True)  # seen once by the server: kept in the store
    await rt.coordination.unregister_worker("gone-1")
    # A server started now (a new directory on the same store) knows it from the store alone.
    restarted = WorkerDirectory(rt.coordination, history=rt.store)
    await restarted.refresh(force=True)
    assert restarted.declared("schema.gone", "gone")
    assert not restarted.serves("schema.gone", None)

    answer = await env.client.post(
        API, json={"jobType": "schema.gone", "executeAt": rt.jobs.now().isoformat()}
    )
    assert answer.status_code == 201, answer.text
    [warning] = answer.json()["warnings"]  # it waits for a worker, and says so
    assert warning["code"] == "no_live_worker"
    assert "no data schema is known" in warning["message"]  # its handler's data is untyped
    job_id = UUID(answer.json()["id"])
    await eventually(lambda: occurrences(env, job_id), WAIT, "the fire")
    [occurrence] = await occurrences(env, job_id)
    assert (occurrence.status, occurrence.skip_reason) == (OccurrenceStatus.QUEUED, None)


async def test_data_is_checked_against_the_last_schema_published_while_no_worker_is_live(
    env: Env,
) -> None:
    """A deploy window lets no misfit in: the schema a group last published is kept with the
    type in the store, and job data is checked against it while none of the type's workers
    is live; the answer says that no worker is live."""
    rt, c = env.runtime, env.client
    schema = {"type": "object", "required": ["region"], "properties": {"region": {}}}

    def instance(instance_id: str, published: dict[str, Any]) -> WorkerInfo:
        job_types = {"schema.deploy": {"schema": published}}
        return WorkerInfo(
            instance_id=instance_id,
            worker_id="deployers",
            host="h",
            pid=1,
            job_types=job_types,
            concurrency=1,
        )

    await rt.coordination.register_worker(instance("old-1", {"type": "object"}), ttl=30)
    await rt.workers.refresh(force=True)
    await rt.coordination.unregister_worker("old-1")
    await rt.coordination.register_worker(instance("new-1", schema), ttl=30)  # a deploy
    await rt.workers.refresh(force=True)
    await rt.coordination.unregister_worker("new-1")  # and no instance of it live now

    job = {"jobType": "schema.deploy", "cronExpression": REPORT["cronExpression"]}
    assert refused(await c.post(API, json={**job, "jobData": {"zone": 1}})) == ["jobData.region"]
    assert refused(await c.post(API, json=job)) == ["jobData.region"]  # null: {} has no region
    answer = await c.post(API, json={**job, "jobData": {"region": "eu"}})
    assert answer.status_code == 201, answer.text
    [warning] = answer.json()["warnings"]
    assert warning["code"] == "no_live_worker"
    assert (
        "checked against the data schema group 'deployers' last published" in (warning["message"])
    )
    # A server started now knows the last schema from the store alone.
    restarted = WorkerDirectory(rt.coordination, history=rt.store)
    await restarted.refresh(force=True)
    kept = restarted.published_schema("schema.deploy")
    assert kept is not None
    assert (kept.worker_id, kept.schema) == ("deployers", schema)
