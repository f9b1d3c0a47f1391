"""Typed enqueue and run handles, end to end: a whole embedded runtime (SQLite, the in-process
broker, a worker running ``tests.integration.enqueue_jobs``) behind the API in process,
``rota.Client`` and ``rota.SyncClient`` enqueueing from the job definitions and by name,
waiting for results over the event stream; Python's types in every call."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import types
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import CancelledError, ThreadPoolExecutor
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

import rota
from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.client import ApiValidationError, RunFailedError
from rota.client.encoding import ClientValueError
from tests.api_client import PASSWORD, access_token, ensure_user, username_of
from tests.asgi_stream import StreamingASGITransport
from tests.helpers import RuntimeFactory, settings_for
from tests.integration.enqueue_jobs import (
    Report,
    Summary,
    explode,
    generate_report,
    ping,
    second_time,
)

WITHIN = 20.0
"""Upper bound for a run to end (never reached when it works)."""
JOBS = ["tests.integration.enqueue_jobs"]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "client.md"


class Kind(Enum):
    SALES = "sales"


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory({"scheduler.sweeper_interval_seconds": 0.5}, JOBS)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[rota.Client]:
    token = await access_token(app, "admin")
    async with rota.Client(
        "http://rota", token=token, transport=StreamingASGITransport(app)
    ) as made:
        yield made


def a_report() -> Report:
    return Report(kind="sales", customer=uuid4(), due=datetime.now(UTC))


async def test_a_typed_enqueue_returns_the_typed_result(client: rota.Client) -> None:
    data = a_report()
    handle = await generate_report.now(client, data, display_name="sales", tags=["reports"])
    summary = await handle.result(timeout=WITHIN)
    assert summary == Summary(kind="sales", customer=data.customer, rows=42)
    job = await client.get_job(handle.job_id)
    assert (job.display_name, job.tags, job.job_type) == ("sales", ["reports"], "it.report")
    # the data went as the model's JSON: the UUID and the aware datetime as text
    assert job.job_data["kind"] == "sales"
    assert UUID(job.job_data["customer"]) == data.customer
    assert datetime.fromisoformat(job.job_data["due"]) == data.due


async def test_a_failed_run_raises_with_its_failure(client: rota.Client) -> None:
    handle = await explode.now(client, {"message": "no such customer"})
    with pytest.raises(RunFailedError) as failed:
        await handle.result(timeout=WITHIN)
    assert failed.value.status == "Failed"
    assert failed.value.exception is not None
    assert "ValueError: no such customer" in failed.value.exception
    assert "no such customer" in str(failed.value)
    assert failed.value.occurrence.job_id == handle.job_id


async def test_a_retry_is_not_the_end(client: rota.Client) -> None:
    handle = await second_time.now(client)
    assert await handle.result(timeout=WITHIN) == 2
    run = await handle.wait()
    assert (run.attempt, run.status_name) == (2, "Completed")
    requeued = [c for c in run.status_change_logs if c.to.name == "QUEUED" and c.attempt == 2]
    assert requeued  # the first attempt's failure went back to Queued: not an end


async def test_a_triggered_run_has_a_typed_handle(client: rota.Client) -> None:
    data = a_report()
    job = await client.create_job(job_type="it.report", job_data=data)  # no schedule
    run = await client.trigger(job.id, reason="now")
    summary = await generate_report.handle(client, job.id, run.id).result(timeout=WITHIN)
    assert summary == Summary(kind="sales", customer=data.customer, rows=42)


async def test_a_run_that_ended_before_the_wait_is_found(client: rota.Client) -> None:
    """The race: the run may end before the handle subscribes. It subscribes first, then
    reads the state once, so a run long over is found by that read."""
    first = await ping.now(client)
    ended = await first.wait(timeout=WITHIN)
    assert ended.status_name == "Completed"
    late = client.handle(first.job_id, result_type=str)
    assert await late.result(timeout=WITHIN) == "pong"
    by_run = client.handle(first.job_id, ended.id)
    assert await by_run.result(timeout=WITHIN) == "pong"


async def test_schedule_after_and_by_name_take_pythons_types(client: rota.Client) -> None:
    at = datetime.now(UTC) + timedelta(milliseconds=300)
    scheduled = await generate_report.schedule(client, a_report(), at=at, priority=3)
    job = await client.get_job(scheduled.job_id)
    assert job.execute_at is not None
    assert abs(job.execute_at - at) < timedelta(milliseconds=1)
    assert job.priority == 3
    delayed = await ping.after(client, delay=timedelta(milliseconds=200), timeout=30)
    assert (await client.get_job(delayed.job_id)).timeout_seconds == 30
    customer = uuid4()
    by_name = await client.enqueue(
        "it.report",
        {"kind": Kind.SALES, "customer": customer, "due": datetime.now(UTC)},
        delay=0.1,
        retry_delay=timedelta(seconds=5),
    )
    assert (await client.get_job(by_name.job_id)).retry_delay_seconds == 5
    assert (await scheduled.result(timeout=WITHIN)).rows == 42
    assert await delayed.result(timeout=WITHIN) == "pong"
    assert (await by_name.result(timeout=WITHIN))["customer"] == str(customer)


async def test_a_cron_handle_waits_for_the_first_run(client: rota.Client) -> None:
    handle = await ping.cron(client, expression="* * * * * *", time_zone="Europe/Berlin")
    job = await client.get_job(handle.job_id)
    assert (job.cron_expression, job.time_zone) == ("* * * * * *", "Europe/Berlin")
    assert await handle.result(timeout=WITHIN) == "pong"
    await client.delete_job(handle.job_id)
    # without time_zone=: the job type's (the decorator's), else UTC
    tokyo = await in_tokyo.cron(client, expression="0 9 * * *")
    assert (await client.get_job(tokyo.job_id)).time_zone == "Asia/Tokyo"
    utc = await generate_report.cron(client, a_report(), "0 9 * * *")
    assert (await client.get_job(utc.job_id)).time_zone == "UTC"


@rota.job("it.tokyo", time_zone="Asia/Tokyo")
def in_tokyo(ctx: rota.JobContext) -> None:
    """Never run here: its cron jobs are only created."""


async def test_a_naive_datetime_is_refused_naming_the_parameter(client: rota.Client) -> None:
    naive = datetime(2031, 1, 1, 9, 0)
    with pytest.raises(ClientValueError) as refused:
        await client.create_job(job_type="it.ping", execute_at=naive)
    assert refused.value.field == "execute_at"
    assert isinstance(refused.value, ValueError)
    with pytest.raises(ValueError, match=r"job_data\.due: a naive datetime"):
        await client.create_job(
            job_type="it.report", execute_at=datetime.now(UTC), job_data={"due": naive}
        )
    with pytest.raises(ValueError, match=r"^at: a naive datetime"):
        await generate_report.schedule(client, a_report(), at=naive)
    with pytest.raises(ValueError, match="until"):
        await client.pause(uuid4(), until=naive)
    assert (await client.list_jobs()).items == []  # nothing was sent


async def test_create_job_takes_datetimes_models_and_uuids(client: rota.Client) -> None:
    """What raised TypeError before: a datetime, a ``rota.JobData``, a UUID inside the data."""
    data = a_report()
    job = await client.create_job(
        job_type="it.report",
        execute_at=datetime.now(UTC) + timedelta(days=1),
        job_data=data,
        timeout_seconds=timedelta(minutes=5),
    )
    assert job.timeout_seconds == 300
    assert job.job_data["customer"] == str(data.customer)
    inner = uuid4()
    other = await client.create_job(
        job_type="it.elsewhere", cron_expression="@daily", job_data={"ids": [inner]}
    )
    assert other.job_data == {"ids": [str(inner)]}
    created = await client.create_jobs([{"job_type": "it.ping", "execute_at": datetime.now(UTC)}])
    assert len(created) == 1
    # the server still checks the data against the type's schema
    with pytest.raises(ApiValidationError):
        await client.enqueue("it.report", {"kind": 5})


# --- the sync client, shared by threads ------------------------------------------------------


def test_the_sync_client_from_many_threads(tmp_path: Path) -> None:
    """One ``SyncClient`` (one pool, one sign-in) used by eight threads at once: each enqueues
    and waits for its own typed result; the client signed in once."""
    holder: dict[str, Any] = {}
    logins: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/auth/login"):
            logins.append(threading.current_thread().name)
        await holder["app"](scope, receive, send)

    stack = AsyncExitStack()
    with rota.SyncClient(
        "http://rota",
        username=username_of("operator"),
        password=PASSWORD,
        transport=StreamingASGITransport(app),
    ) as client:
        runtime = client.call(_start(stack, tmp_path))
        client.call(ensure_user(runtime.auth, "operator"))
        holder["app"] = create_app(runtime)
        try:

            def one(n: int) -> tuple[int, Summary]:
                data = Report(kind=f"k{n}", customer=uuid4(), due=datetime.now(UTC))
                handle = generate_report.now(client, data)
                return n, handle.result(timeout=WITHIN)

            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(one, range(16)))
            assert [(n, s.kind, s.rows) for n, s in results] == [
                (n, f"k{n}", 42) for n in range(16)
            ]
            assert len(logins) == 1
            failing = explode.now(client, {"message": "sync"})
            with pytest.raises(RunFailedError, match="sync"):
                failing.result(timeout=WITHIN)
            assert failing.wait(timeout=WITHIN).status_name == "Failed"
        finally:
            client.call(stack.aclose())


async def _start(stack: AsyncExitStack, tmp_path: Path) -> Runtime:
    from rota.app.server import prepare

    runtime = await prepare(settings_for(tmp_path), JOBS, None)
    await runtime.start()
    stack.push_async_callback(runtime.stop, grace=2.0)
    return runtime


def test_closing_the_sync_client_ends_the_calls_still_waiting() -> None:
    client = rota.SyncClient("http://rota.invalid", token="t")
    started = threading.Event()

    async def long_wait() -> None:
        started.set()
        await asyncio.sleep(WITHIN * 10)

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.call, long_wait())
        assert started.wait(WITHIN)
        client.close()
        with pytest.raises(CancelledError):
            waiting.result(timeout=WITHIN)
    client.close()  # a second close is a no-op


def test_an_unreachable_server_is_a_transport_error() -> None:
    with (
        rota.SyncClient("http://127.0.0.1:9", token="t", timeout=2) as client,
        pytest.raises(httpx.TransportError),
    ):
        ping.now(client)


# --- the documentation's typed examples ------------------------------------------------------


def _blocks(tag: str) -> str:
    """The ```python <tag> blocks of docs/client.md, in order."""
    return "\n".join(re.findall(rf"```python {tag}\n(.*?)```", DOCS.read_text(), flags=re.S))


@pytest.fixture
def docs_jobs() -> Iterator[types.ModuleType]:
    """The docs' job module (its ``jobs`` blocks), importable as ``docs_client_jobs``."""
    module = types.ModuleType("docs_client_jobs")
    sys.modules[module.__name__] = module
    try:
        exec(compile(_blocks("jobs"), str(DOCS), "exec"), module.__dict__)
        yield module
    finally:
        del sys.modules[module.__name__]


async def test_the_documented_typed_examples_run(
    runtime_factory: RuntimeFactory, docs_jobs: types.ModuleType
) -> None:
    code = _blocks("enqueue")
    assert "await generate_report.now(client" in code
    runtime = await runtime_factory({}, [docs_jobs.__name__])
    app = create_app(runtime)
    token = await access_token(app, "admin")
    async with rota.Client(
        "http://rota", token=token, transport=StreamingASGITransport(app)
    ) as client:
        body = "\n".join("    " + line for line in code.splitlines())
        scope: dict[str, Any] = dict(vars(docs_jobs))
        exec(f"async def _examples(client):\n{body}\n", scope)
        await asyncio.wait_for(scope["_examples"](client), 60)
