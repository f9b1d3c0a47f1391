"""``GET /api/v1/events``: server-sent change events over both coordination kinds (memory and
Redis), with replay from ``Last-Event-ID`` / ``?lastEventId=``, filters and keep-alives."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from rota.coordination.memory import MemoryCoordination
from rota.coordination.redis import RedisCoordination
from rota.core.events import Event
from rota.core.ports import Coordination
from tests.api_runtime import MiniRuntime, sqlite_runtime
from tests.asgi_stream import streaming_client
from tests.contract.redis_fixtures import redis_scope

WAIT = 10.0


@pytest.fixture(params=["memory", "redis"])
async def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MiniRuntime]:
    async with AsyncExitStack() as stack:
        coordination: Coordination
        if request.param == "memory":
            coordination = MemoryCoordination()
        else:
            client, prefix = await redis_scope(stack)
            coordination = RedisCoordination(client, prefix=prefix, block_seconds=0.2)
        stack.push_async_callback(coordination.close)  # after the publisher has stopped
        yield await stack.enter_async_context(
            sqlite_runtime(tmp_path, coordination=coordination, with_events=True)
        )
    # The Redis clients of the streams are unreachable now: finalize them here, not at some
    # later garbage collection (under CPython 3.11 one that runs inside ast.parse, e.g. when
    # pytest imports a plugin's module at the end of the session, fails that parse). What
    # the tests before made is frozen (``tests/conftest.py``): this scans this test's only.
    gc.collect()


@dataclass
class Message:
    id: str | None = None
    event: str | None = None
    data: Any = None
    comments: list[str] = field(default_factory=list)
    retry: int | None = None


class EventReader:
    """Reads SSE messages off a streaming response, one at a time, with a deadline."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def aclose(self) -> None:
        """End the line iterator here (left to the garbage collector, its finalizer would run
        at an arbitrary moment, even while the interpreter compiles code)."""
        await self._lines.aclose()  # type: ignore[attr-defined]

    async def next(self, within: float = WAIT) -> Message:
        return await asyncio.wait_for(self._read(), within)

    async def _read(self) -> Message:
        message = Message()
        seen = False
        async for line in self._lines:
            if line == "":
                if seen:
                    return message
                continue
            seen = True
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                message.comments.append(value)
            elif name == "id":
                message.id = value
            elif name == "event":
                message.event = value
            elif name == "data":
                message.data = orjson.loads(value)
            elif name == "retry":
                message.retry = int(value)
        raise AssertionError("the stream ended")

    async def next_event(self, within: float = WAIT) -> Message:
        """The next message that is an event (keep-alive comments skipped)."""
        while True:
            message = await self.next(within)
            if message.event is not None:
                return message


@contextlib.asynccontextmanager
async def subscribe(
    app: FastAPI, client: httpx.AsyncClient, query: str = "", headers: dict[str, str] | None = None
) -> AsyncIterator[EventReader]:
    """An open event stream, once the server has subscribed (its ``connected`` comment)."""
    async with (
        streaming_client(app, client) as http,
        http.stream("GET", f"/api/v1/events{query}", headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = EventReader(response)
        try:
            first = await reader.next()
            assert first.comments == ["connected"]
            assert first.retry == 3000
            yield reader
        finally:
            await reader.aclose()


async def create(client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    body = {"jobType": "report", "cronExpression": "0 0 1 1 *"} | extra
    response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_job_and_occurrence_changes_arrive_live(
    app: FastAPI, client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    await runtime.declare("report")  # a manual run of it is Queued (not Skipped no_worker)
    async with subscribe(app, client) as events:
        job = await create(client)
        created = await events.next_event()
        assert created.event == "job.created"
        assert created.data == {"jobId": job["id"]}
        assert created.id is not None

        response = await client.post(f"/api/v1/jobs/{job['id']}/trigger", json={"reason": "x"})
        assert response.status_code == 202
        fired = await events.next_event()
        assert fired.event == "occurrence.created"
        assert fired.data["occurrenceId"] == response.json()["id"]
        assert fired.data["jobId"] == job["id"]
        assert fired.data["jobType"] == "report"
        assert fired.data["status"] == 0
        assert fired.data["statusName"] == "Queued"

        cancelled = await client.post(f"/api/v1/occurrences/{fired.data['occurrenceId']}/cancel")
        assert cancelled.status_code == 200
        update = await events.next_event()
        assert update.event == "occurrence.updated"
        assert update.data["occurrenceId"] == fired.data["occurrenceId"]
        assert update.data["fromStatus"] == 0
        assert update.data["status"] == 4
        assert update.data["statusName"] == "Cancelled"
        assert update.data["attempt"] == 1

        assert (await client.patch(f"/api/v1/jobs/{job['id']}", json={"priority": 3})).is_success
        assert (await events.next_event()).event == "job.updated"
        assert (await client.delete(f"/api/v1/jobs/{job['id']}")).status_code == 204
        deleted = await events.next_event()
        assert (deleted.event, deleted.data) == ("job.deleted", {"jobId": job["id"]})
        ids = [created.id, fired.id, update.id, deleted.id]
        assert len(set(ids)) == 4


async def test_reconnecting_with_last_event_id_replays_what_was_missed(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    async with subscribe(app, client) as events:
        first = await create(client)
        seen = await events.next_event()
        assert seen.data == {"jobId": first["id"]}
    missed = [await create(client) for _ in range(3)]  # while disconnected
    assert seen.id is not None

    async with subscribe(app, client, headers={"Last-Event-ID": seen.id}) as events:
        replayed = [await events.next_event() for _ in missed]
        assert [m.data["jobId"] for m in replayed] == [j["id"] for j in missed]
        live = await create(client)
        assert (await events.next_event()).data == {"jobId": live["id"]}

    third_id = replayed[1].id
    async with subscribe(app, client, query=f"?lastEventId={third_id}") as events:
        after = [await events.next_event() for _ in range(2)]
        assert [m.data["jobId"] for m in after] == [missed[2]["id"], live["id"]]


async def test_filters_by_type_and_job(app: FastAPI, client: httpx.AsyncClient) -> None:
    other = await create(client)
    mine = await create(client)
    query = f"?types=job.updated,job.deleted&jobId={mine['id']}"
    async with subscribe(app, client, query=query) as events:
        for job in (other, mine):
            assert (
                await client.patch(f"/api/v1/jobs/{job['id']}", json={"priority": 1})
            ).is_success
        await create(client)
        assert (await client.delete(f"/api/v1/jobs/{mine['id']}")).status_code == 204
        got = [await events.next_event() for _ in range(2)]
        assert [(m.event, m.data["jobId"]) for m in got] == [
            ("job.updated", mine["id"]),
            ("job.deleted", mine["id"]),
        ]


async def test_keep_alive_comments_while_idle(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fastapi.routing

    monkeypatch.setattr(fastapi.routing, "_PING_INTERVAL", 0.2)
    async with subscribe(app, client) as events:
        ping = await events.next(within=5)
        assert ping.comments == ["ping"]
        assert ping.event is None


async def test_bad_input_is_a_problem_before_the_stream(client: httpx.AsyncClient) -> None:
    cases = [
        ({"Last-Event-ID": "yesterday"}, "", "Last-Event-ID"),
        ({}, "?lastEventId=1-2", "lastEventId"),
        ({}, "?types=job.created,job.exploded", "types"),
        ({}, "?jobId=not-a-uuid", "jobId"),
    ]
    for headers, query, field_name in cases:
        response = await client.get(f"/api/v1/events{query}", headers=headers)
        assert response.status_code == 422, (query, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        assert field_name in [e["field"] for e in response.json()["errors"]]


async def test_a_failing_feed_never_fails_the_change(
    runtime: MiniRuntime, client: httpx.AsyncClient
) -> None:
    async def broken(events: Any) -> None:
        raise OSError("feed down")

    runtime.coordination.publish_events = broken  # type: ignore[method-assign]
    job = await create(client)
    assert (await client.get(f"/api/v1/jobs/{job['id']}")).status_code == 200
    await runtime.events.flush()
    assert runtime.events.stats.failures >= 1
    assert runtime.events.stats.dropped >= 1


async def test_resuming_after_what_the_feed_dropped_says_gap(
    app: FastAPI, client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await create(client)
    await runtime.events.flush()
    async with subscribe(app, client, headers={"Last-Event-ID": "1-0-0"}) as events:
        replayed = await events.next_event()  # nothing dropped yet: no gap
        assert (replayed.event, replayed.data) == ("job.created", {"jobId": job["id"]})
    assert replayed.id is not None

    # Fill the feed past its cap (memory: 10,000 events; Redis: about 2,000 entries).
    for _ in range(12):
        await runtime.coordination.publish_events(
            [Event("job.updated", {"jobId": "filler"})] * 1000
        )
        for _ in range(200):
            await runtime.coordination.publish_events([Event("job.updated", {"jobId": "f"})])
        if await runtime.coordination.feed_horizon() is not None:
            break
    horizon = await runtime.coordination.feed_horizon()
    assert horizon is not None
    async with subscribe(app, client, headers={"Last-Event-ID": replayed.id}) as events:
        gap = await events.next_event()
        assert gap.event == "gap"
        assert gap.id is None  # not an event of the feed: the client's position stays
        assert gap.data == {"after": replayed.id, "oldest": horizon}


async def test_ready_announces_the_subscription_to_a_browser(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    async with subscribe(app, client, "?ready=true&types=job.created") as reader:
        ready = await reader.next_event()
        assert (ready.event, ready.id, ready.data) == ("ready", None, {})
        job = await create(client)
        created = await reader.next_event()
        assert (created.event, created.data["jobId"]) == ("job.created", job["id"])
    async with subscribe(app, client, "?types=job.created") as reader:  # not asked: none
        job = await create(client)
        assert (await reader.next_event()).event == "job.created"
