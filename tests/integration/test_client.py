"""``rota.Client`` and ``rota.SyncClient`` against the ASGI app (a real SQLite store, the
in-memory adapters), including sign-in and token renewal, typed errors, and events."""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

import rota
from rota.api.app import create_app
from rota.app.configs import auth_config
from rota.client import (
    ApiAuthError,
    ApiConflictError,
    ApiNotFoundError,
    ApiValidationError,
    StreamEvent,
)
from rota.core.events import Event
from rota.core.ids import new_id
from rota.core.models import LogRecord, OccurrenceStatus, StatusRecord, WorkerInfo
from rota.services.auth import AuthService
from rota_bench.signin import SignIn
from tests.api_client import PASSWORD, api_client, ensure_user, username_of
from tests.api_runtime import MiniRuntime, sqlite_runtime
from tests.asgi_stream import StreamingASGITransport

S = OccurrenceStatus
WAIT = 10.0
DOCS = Path(__file__).resolve().parents[2] / "docs" / "client.md"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[MiniRuntime]:
    async with sqlite_runtime(tmp_path, with_events=True) as made:
        yield made


def bearer(http: httpx.AsyncClient) -> str | None:
    """The token the API tests' client signs in with (none before sign-in exists)."""
    value = http.headers.get("authorization", "")
    return value.removeprefix("Bearer ") or None


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[rota.Client]:
    async with (
        api_client(app) as http,
        rota.Client(
            "http://rota", token=bearer(http), transport=StreamingASGITransport(app)
        ) as made,
    ):
        yield made


async def _failed_occurrence(rt: MiniRuntime, client: rota.Client) -> tuple[UUID, UUID]:
    """A job whose triggered occurrence failed for good: (occurrence id, failed record id)."""
    await rt.declare("flaky")
    job = await client.create_job(job_type="flaky", cron_expression="0 0 1 1 *")
    occurrence = await client.trigger(job.id)
    now = datetime.now(UTC)
    await rt.store.apply_status(
        [
            StatusRecord(occurrence_id=occurrence.id, status=S.RUNNING, timestamp=now),
            StatusRecord(
                occurrence_id=occurrence.id, status=S.FAILED, timestamp=now, exception="boom"
            ),
        ]
    )
    page = await client.list_failed(job_id=job.id)
    return occurrence.id, page.items[0].id


# --- jobs and occurrences --------------------------------------------------------------------


FAR = "2031-01-01T00:00:00Z"


async def test_jobs_round_trip(client: rota.Client) -> None:
    job = await client.create_job(
        job_type="GenerateReportJob",
        cron_expression="0 6 * * *",
        job_data={"kind": "sales"},
        tags=["reports"],
    )
    assert job.job_type == "GenerateReportJob"
    assert job.job_data == {"kind": "sales"}
    assert (await client.get_job(job.id)).id == job.id
    changed = await client.update_job(job.id, priority=3, concurrency_policy=1)
    assert (changed.priority, changed.concurrent_execution_policy) == (3, 1)
    assert changed.version == job.version + 1  # settings are versioned
    more = await client.create_jobs(
        [{"job_type": "cleanup", "execute_at": "2031-01-01T00:00:00Z"} for _ in range(4)]
    )
    assert len(more) == 4
    ids = await client.create_jobs_minimal(
        [{"job_type": "cleanup", "execute_at": FAR, "display_name": f"n{n}"} for n in range(3)]
    )
    assert [(await client.get_job(i)).display_name for i in ids] == ["n0", "n1", "n2"]
    for job_id in ids:
        await client.delete_job(job_id)
    # a repeated call with its idempotency key returns what the first created
    again = await client.create_jobs(
        [{"job_type": "cleanup", "execute_at": "2031-01-01T00:00:00Z"}], idempotency_key="k-1"
    )
    repeat = await client.create_jobs(
        [{"job_type": "cleanup", "execute_at": "2031-01-01T00:00:00Z"}], idempotency_key="k-1"
    )
    assert [j.id for j in repeat] == [j.id for j in again]
    once = await client.create_job(job_type="once", execute_at=FAR, idempotency_key="k-1")
    assert (
        await client.create_job(job_type="once", execute_at=FAR, idempotency_key="k-1")
    ).id == once.id
    for created in (*again, once):
        await client.delete_job(created.id)
    page = await client.list_jobs(limit=2)
    assert len(page.items) == 2
    assert page.next_cursor is not None
    assert len([j async for j in client.iter_jobs(limit=2)]) == 5
    assert [j.id async for j in client.iter_jobs(tag="reports")] == [job.id]
    assert await client.tags() == {"reports": 1}
    await client.delete_job(job.id)
    with pytest.raises(ApiNotFoundError) as missing:
        await client.get_job(job.id)
    assert missing.value.status == 404
    assert missing.value.type == "urn:rota:problem:not-found"


async def test_occurrences_trigger_logs_and_cancel(
    runtime: MiniRuntime, client: rota.Client
) -> None:
    await runtime.declare("report")
    job = await client.create_job(job_type="report", cron_expression="0 0 1 1 *")
    occurrence = await client.trigger(job.id, reason="by hand", job_data={"x": 1})
    assert occurrence.status == S.QUEUED
    assert occurrence.job_data == {"x": 1}
    assert occurrence.trigger_reason == "by hand"
    with pytest.raises(ApiConflictError):
        await client.trigger(job.id)  # Skip policy, one is queued
    forced = await client.trigger(job.id, force=True)
    page = await client.list_occurrences(job_id=job.id, status="Queued")
    assert {o.id for o in page.items} == {occurrence.id, forced.id}
    now = datetime.now(UTC)
    await runtime.store.append_logs(
        [
            LogRecord(occurrence_id=occurrence.id, timestamp=now, level="INFO", message=m)
            for m in ("one", "two", "three")
        ]
    )
    first = await client.logs(occurrence.id, limit=2)
    assert [line.message for line in first.items] == ["one", "two"]
    rest = await client.logs(occurrence.id, after=first.next_after)
    assert [line.message for line in rest.items] == ["three"]
    cancelled = await client.cancel(occurrence.id, reason="not needed")
    assert cancelled.status == S.CANCELLED
    detail = await client.get_occurrence(occurrence.id)
    assert [c.to for c in detail.status_change_logs] == [S.QUEUED, S.CANCELLED]
    with pytest.raises(ApiConflictError):
        await client.cancel(occurrence.id)


async def test_failed_occurrences(runtime: MiniRuntime, client: rota.Client) -> None:
    occurrence_id, failed_id = await _failed_occurrence(runtime, client)
    record = await client.get_failed(failed_id)
    assert (record.occurrence_id, record.exception) == (occurrence_id, "boom")
    resolved = await client.resolve_failed(failed_id, note="looked at it", action="ignored")
    assert resolved.resolved
    assert resolved.resolution_note == "looked at it"
    assert (await client.list_failed(resolved=False)).items == []
    reopened = await client.resolve_failed(failed_id, resolved=False)
    assert not reopened.resolved
    retried = await client.retry_failed(failed_id)
    assert (retried.id, retried.status, retried.attempt) == (occurrence_id, S.QUEUED, 2)
    await client.delete_failed(failed_id)
    with pytest.raises(ApiNotFoundError):
        await client.get_failed(failed_id)


async def test_workers_and_stats(runtime: MiniRuntime, client: rota.Client) -> None:
    await runtime.coordination.register_worker(
        WorkerInfo(
            instance_id="reports-1",
            worker_id="reports",
            host="h",
            pid=1,
            job_types={"Report": {"schema": {"type": "object"}}},
            concurrency=4,
        ),
        30,
    )
    groups = (await client.workers()).items
    assert [g.worker_id for g in groups] == ["reports"]
    assert groups[0].job_types == {"Report": {"schema": {"type": "object"}}}
    overview = await client.overview()
    assert overview.workers.capacity == 4
    assert overview.jobs.total == 0
    series = await client.throughput("1h")
    assert (series.bucket_seconds, len(series.points)) == (60, 60)


async def test_errors_carry_the_problem(client: rota.Client) -> None:
    with pytest.raises(ApiValidationError) as bad:
        await client.create_job(job_type="x", cron_expression="61 * * * *")
    assert bad.value.status == 422
    assert bad.value.fields == ["cronExpression"]
    assert bad.value.errors[0]["part"] == "minute"
    assert "61" in str(bad.value)
    with pytest.raises(ApiValidationError) as bulk:
        await client.create_jobs(
            [
                {"job_type": "x", "cron_expression": "@daily"},
                {"job_type": "x", "cron_expression": "@often"},
            ]
        )
    assert bulk.value.fields == ["jobs[1].cronExpression"]
    with pytest.raises(ApiValidationError):
        await client.throughput("forever")
    assert isinstance(bulk.value, rota.ApiError)
    assert isinstance(bulk.value, rota.RotaError)


async def test_events_replay_and_follow(runtime: MiniRuntime, client: rota.Client) -> None:
    first = await client.create_job(job_type="a", cron_expression="@daily")
    received: list[StreamEvent] = []
    stream = client.events(types=["job.created"], last_event_id="0-0-0", reconnect=False)

    async def collect() -> None:
        async for event in stream:
            received.append(event)
            if len(received) == 2:
                return

    reading = asyncio.create_task(collect())
    second = await client.create_job(job_type="b", cron_expression="@daily")
    await asyncio.wait_for(reading, WAIT)
    await stream.aclose()  # type: ignore[attr-defined]
    assert [e.data["jobId"] for e in received] == [str(first.id), str(second.id)]
    assert all(e.type == "job.created" for e in received)
    assert re.fullmatch(r"\d+-\d+-\d+", received[0].id)

    assert await runtime.coordination.feed_horizon() is None
    runtime.coordination._feed = deque(runtime.coordination._feed, maxlen=2)  # a tiny cap
    await runtime.coordination.publish_events([Event("job.updated", {"jobId": "x"})] * 2)
    resumed = client.events(last_event_id=received[0].id, reconnect=False)
    gap = await asyncio.wait_for(anext(resumed), WAIT)
    assert (gap.type, gap.id, gap.data["after"]) == ("gap", "", received[0].id)
    assert (await asyncio.wait_for(anext(resumed), WAIT)).type == "job.updated"
    await resumed.aclose()  # type: ignore[attr-defined]


# --- signing in ------------------------------------------------------------------------------


class PathCounter:
    """Counts the requests to each path on their way to the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.hits: dict[str, int] = {}

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Any:
        path = str(scope.get("path", ""))
        self.hits[path] = self.hits.get(path, 0) + 1
        return self.app(scope, receive, send)

    def count(self, path: str) -> int:
        return self.hits.get(path, 0)


async def test_sign_in_then_refresh_on_401_then_sign_in_again(
    runtime: MiniRuntime, app: FastAPI
) -> None:
    """Against the API's own sign-in, on a clock the test moves."""
    skew = [timedelta(0)]
    runtime.auth = AuthService(
        runtime.store,
        auth_config(runtime.settings),
        lambda: datetime.now(UTC) + skew[0],
    )
    await ensure_user(runtime.auth, "operator")
    counter = PathCounter(app)
    transport = StreamingASGITransport(counter)
    login, refresh = "/api/v1/auth/login", "/api/v1/auth/refresh"
    async with rota.Client(
        "http://rota", username=username_of("operator"), password=PASSWORD, transport=transport
    ) as client:
        assert client.token is None
        job = await client.create_job(job_type="x", cron_expression="@daily")
        assert (counter.count(login), counter.count(refresh)) == (1, 0)
        assert client.token is not None

        skew[0] += timedelta(hours=1)  # the access token ran out: one refresh, then the call
        assert (await client.get_job(job.id)).id == job.id
        assert (counter.count(login), counter.count(refresh)) == (1, 1)

        skew[0] += timedelta(days=60)  # and the refresh token too: sign in again
        assert (await client.get_job(job.id)).id == job.id
        assert (counter.count(login), counter.count(refresh)) == (2, 2)

        skew[0] += timedelta(hours=1)  # event streams renew the same way
        stream = client.events(last_event_id="0-0-0", reconnect=False)
        event = await asyncio.wait_for(anext(stream), WAIT)
        assert event.type == "job.created"
        await stream.aclose()  # type: ignore[attr-defined]
        assert counter.count(refresh) == 3

    async with rota.Client(
        "http://rota", username=username_of("operator"), password="wrong", transport=transport
    ) as client:
        with pytest.raises(ApiAuthError) as refused:
            await client.list_jobs()
        assert refused.value.status == 401
    async with rota.Client("http://rota", token="stale", transport=transport) as client:
        with pytest.raises(ApiAuthError):
            await client.list_jobs()


async def test_a_viewer_may_read_but_not_change(app: FastAPI) -> None:
    async with (
        api_client(app, role="viewer") as http,
        rota.Client(
            "http://rota", token=bearer(http), transport=StreamingASGITransport(app)
        ) as viewer,
    ):
        assert (await viewer.list_jobs()).items == []
        with pytest.raises(ApiAuthError) as denied:
            await viewer.create_job(job_type="x", cron_expression="@daily")
        assert denied.value.status == 403


def test_credentials_are_one_or_the_other() -> None:
    with pytest.raises(ValueError, match="not both"):
        rota.Client("http://rota", token="t", username="u", password="p")
    with pytest.raises(ValueError, match="both"):
        rota.Client("http://rota", username="u")


# --- the sync facade -------------------------------------------------------------------------


def test_sync_client(tmp_path: Path) -> None:
    holder: dict[str, Any] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await holder["app"](scope, receive, send)

    with rota.SyncClient(
        "http://rota",
        username=username_of("operator"),
        password=PASSWORD,
        transport=StreamingASGITransport(app),
    ) as client:
        # The runtime lives on the facade's own loop, as a server's would on its own; the
        # client signs in on its first call.
        stack = AsyncExitStack()
        rt = client.call(stack.enter_async_context(sqlite_runtime(tmp_path, with_events=True)))
        client.call(ensure_user(rt.auth, "operator"))
        client.call(rt.declare("report"))
        holder["app"] = create_app(rt)
        try:
            job = client.create_job(job_type="report", cron_expression="@hourly")
            assert client.get_job(job.id).job_type == "report"
            occurrence = client.trigger(job.id, reason="sync")
            assert client.get_occurrence(occurrence.id).trigger_reason == "sync"
            assert [o.id for o in client.list_occurrences(job_id=job.id).items] == [occurrence.id]
            assert client.cancel(occurrence.id).status == S.CANCELLED
            assert client.update_job(job.id, is_active=False).is_active is False
            events = client.events(types=["job.created"], last_event_id="0-0-0")
            assert next(events).data == {"jobId": str(job.id)}
            events.close()
            with pytest.raises(ApiNotFoundError):
                client.get_job(new_id())
            client.delete_job(job.id)
            assert client.list_jobs().items == []
        finally:
            client.call(stack.aclose())


# --- the documentation's examples ------------------------------------------------------------


def _examples() -> str:
    """The ```python blocks of docs/client.md, in order (``py`` blocks are not run)."""
    text = DOCS.read_text()
    return "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))


async def test_the_documented_examples_run(runtime: MiniRuntime, client: rota.Client) -> None:
    code = _examples()
    assert "await client." in code
    await runtime.coordination.register_worker(
        WorkerInfo(
            instance_id="reports-host-1",
            worker_id="reports",
            host="host-1",
            pid=1,
            job_types={"GenerateReportJob": {"schema": {"type": "object"}}},
            concurrency=8,
        ),
        30,
    )
    body = "\n".join("    " + line for line in code.splitlines())
    scope: dict[str, Any] = {"rota": rota}
    exec(f"async def _examples(client):\n{body}\n", scope)
    await asyncio.wait_for(scope["_examples"](client), 30)


async def test_limits(client: rota.Client) -> None:
    made = await client.set_limits([{"type": "sync", "max": 2, "key": "customerId"}])
    assert [(x.job_type, x.max_concurrent, x.key) for x in made.limits] == [
        ("sync", 2, "customerId")
    ]
    await client.set_limit("mail", rate_per_second=5)
    listed = await client.limits()
    assert [(x.job_type, x.rate_per_second) for x in listed.limits] == [
        ("mail", 5.0),
        ("sync", None),
    ]
    await client.delete_limit("mail")
    assert [x.job_type for x in (await client.limits()).limits] == ["sync"]
    with pytest.raises(ApiValidationError) as refused:
        await client.set_limit("mail", max=0)
    assert refused.value.status == 422


async def test_the_benches_sign_in_again_when_the_token_runs_out(
    runtime: MiniRuntime, app: FastAPI
) -> None:
    """The benches' auth (a ten-million-job creation outlasts a token): it signs in before
    the first request and again after a 401, and the refused request is sent again."""
    skew = [timedelta(0)]
    runtime.auth = AuthService(
        runtime.store, auth_config(runtime.settings), lambda: datetime.now(UTC) + skew[0]
    )
    await ensure_user(runtime.auth, "operator")
    counter = PathCounter(app)
    auth = SignIn(username_of("operator"), PASSWORD)
    transport = httpx.ASGITransport(app=counter)
    async with httpx.AsyncClient(transport=transport, base_url="http://rota", auth=auth) as http:
        body = {"jobs": [{"jobType": "x", "executeAt": "2031-01-01T00:00:00Z"}]}
        minimal = {"Prefer": "return=minimal"}
        made = await http.post("/api/v1/jobs/bulk", json=body, headers=minimal)
        assert made.status_code == 201
        assert (auth.sign_ins, counter.count("/api/v1/auth/login")) == (1, 1)
        skew[0] += timedelta(hours=1)  # the token ran out: refused, signed in, sent again
        again = await http.post("/api/v1/jobs/bulk", json=body, headers=minimal)
        assert again.status_code == 201
        assert (auth.sign_ins, counter.count("/api/v1/auth/login")) == (2, 2)
        assert counter.count("/api/v1/jobs/bulk") == 3
    assert (await runtime.store.overview(datetime.now(UTC))).jobs == 2


# --- API keys --------------------------------------------------------------------------------


async def test_a_client_with_an_api_key_and_the_key_methods(
    app: FastAPI, client: rota.Client
) -> None:
    created = await client.create_api_key("reports", "operator", tags=["reports"])
    assert created.key.startswith(created.prefix)
    assert [k.name for k in await client.list_api_keys()] == ["reports"]
    async with rota.Client(
        "http://rota", api_key=created.key, transport=StreamingASGITransport(app)
    ) as service:
        job = await service.create_job(job_type="r", cron_expression="@daily", tags=["reports"])
        assert job.created_by == "key:reports"
        assert [j.id for j in (await service.list_jobs()).items] == [job.id]
        with pytest.raises(ApiAuthError) as outside:
            await service.create_job(job_type="r", cron_expression="@daily", tags=["ops"])
        assert outside.value.status == 403
        revoked = await client.revoke_api_key(created.id)
        assert revoked.revoked_at is not None
        with pytest.raises(ApiAuthError) as refused:
            await service.list_jobs()
        assert refused.value.status == 401


def test_an_api_key_is_the_only_credential() -> None:
    with pytest.raises(ValueError, match="one"):
        rota.Client("http://rota", api_key="rota_x", token="t")
    with pytest.raises(ValueError, match="one"):
        rota.Client("http://rota", api_key="rota_x", username="u", password="p")


def test_sync_client_with_an_api_key(tmp_path: Path) -> None:
    holder: dict[str, Any] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await holder["app"](scope, receive, send)

    stack = AsyncExitStack()
    with rota.SyncClient(
        "http://rota",
        username=username_of("admin"),
        password=PASSWORD,
        transport=StreamingASGITransport(app),
    ) as admin:
        rt = admin.call(stack.enter_async_context(sqlite_runtime(tmp_path)))
        admin.call(ensure_user(rt.auth, "admin"))
        holder["app"] = create_app(rt)
        try:
            key = admin.create_api_key("nightly", "viewer")
            with rota.SyncClient(
                "http://rota", api_key=key.key, transport=StreamingASGITransport(app)
            ) as service:
                assert service.list_jobs().items == []
                with pytest.raises(ApiAuthError) as denied:
                    service.create_job(job_type="x", cron_expression="@daily")
                assert denied.value.status == 403
            assert admin.revoke_api_key(key.id).revoked_by == username_of("admin")
            assert [k.name for k in admin.list_api_keys()] == ["nightly"]
        finally:
            admin.call(stack.aclose())
