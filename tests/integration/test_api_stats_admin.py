"""``/stats`` (overview, throughput), ``/tags`` and ``/admin`` (queues, the dispatcher switch,
the effective configuration)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import httpx
from msgspec.structs import replace

from rota.app.settings import Settings
from rota.core.ids import new_id
from rota.core.models import Job, OccurrenceStatus, WorkerInfo
from rota.core.planning import PlanSettings, new_occurrence
from tests.api_runtime import MiniRuntime

from .test_api import assert_problem, create, fields

S = OccurrenceStatus


async def _ended(rt: MiniRuntime, status: S, ago: timedelta, duration: float | None) -> datetime:
    """An occurrence that ended ``ago``; returns its end time."""
    owner = Job(id=new_id(), job_type="report", execute_at=datetime(2030, 1, 1, tzinfo=UTC))
    at = datetime.now(UTC) - ago
    occ = new_occurrence(owner, at, at, PlanSettings())
    await rt.store.insert_occurrences(
        [replace(occ, status=status, end_time=at, duration_ms=duration)]
    )
    return at


async def test_overview(runtime: MiniRuntime, client: httpx.AsyncClient) -> None:
    await create(client, tags=["a"])
    await create(client, isActive=False)
    await _ended(runtime, S.COMPLETED, timedelta(minutes=5), 100.0)
    await _ended(runtime, S.COMPLETED, timedelta(hours=1), 300.0)
    await _ended(runtime, S.COMPLETED, timedelta(hours=30), 5000.0)  # before the last 24 h
    await _ended(runtime, S.FAILED, timedelta(minutes=1), None)
    await _ended(runtime, S.CANCELLED, timedelta(minutes=1), None)
    await runtime.coordination.register_worker(
        WorkerInfo(
            instance_id="w-1",
            worker_id="reports",
            host="h",
            pid=1,
            job_types={},
            concurrency=8,
            current_load=3,
        ),
        30,
    )
    response = await client.get("/api/v1/stats/overview")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["occurrences"]["total"] == 5
    assert body["occurrences"]["byStatus"]["Completed"] == 3
    assert body["occurrences"]["byStatus"]["Running"] == 0
    assert body["jobs"] == {"total": 2, "active": 1}
    day = body["last24h"]
    assert (day["executions"], day["completed"], day["failed"], day["cancelled"]) == (4, 2, 1, 1)
    assert day["successRate"] == 66.67
    assert day["averageDurationMs"] == 200.0
    assert body["workers"] == {"groups": 1, "instances": 1, "capacity": 8, "load": 3}


async def test_throughput_windows_and_buckets(
    runtime: MiniRuntime,
    client: httpx.AsyncClient,
) -> None:
    completed = await _ended(runtime, S.COMPLETED, timedelta(seconds=1), 1.0)
    timed_out = await _ended(runtime, S.TIMED_OUT, timedelta(seconds=1), None)
    await _ended(runtime, S.COMPLETED, timedelta(minutes=30), 1.0)
    hour = (await client.get("/api/v1/stats/throughput?window=1h")).json()
    assert (hour["windowSeconds"], hour["bucketSeconds"], len(hour["points"])) == (3600, 60, 60)

    def bucket(at: datetime) -> dict[str, int]:
        """The minute holding ``at`` (the last one, or the one before it at a minute's turn)."""
        for point in hour["points"]:
            start = datetime.fromisoformat(point["start"])
            if start <= at < start + timedelta(minutes=1):
                return dict(point)
        raise AssertionError(f"no minute holds {at}")

    assert bucket(completed)["completed"] == 1
    assert bucket(timed_out)["failed"] == 1
    assert bucket(completed) in [dict(p) for p in hour["points"][-2:]]
    assert sum(p["completed"] for p in hour["points"]) == 2
    starts = [datetime.fromisoformat(p["start"]) for p in hour["points"]]
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(starts))
    assert starts[0] == datetime.fromisoformat(hour["start"])

    day = (await client.get("/api/v1/stats/throughput", params={"window": "24h"})).json()
    assert (day["bucketSeconds"], len(day["points"])) == (900, 96)
    week = (await client.get("/api/v1/stats/throughput?window=7d&bucket=6h")).json()
    assert (week["bucketSeconds"], len(week["points"])) == (21600, 28)
    assert sum(p["completed"] for p in week["points"]) == 2

    for query, field_name in [
        ("window=forever", "window"),
        ("window=0h", "window"),
        ("window=7d&bucket=1s", "bucket"),
        ("window=7d&bucket=10s", "bucket"),  # too many points
        ("window=90d", "window"),
        ("window=1h&bucket=9999999d", "bucket"),
        ("window=1h&bucket=2h", "bucket"),
    ]:
        problem = assert_problem(await client.get(f"/api/v1/stats/throughput?{query}"), 422)
        assert fields(problem) == [field_name], query


async def test_tags_with_counts_and_the_tag_filter(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/v1/tags")).json() == {"items": []}
    first = await create(client, tags=["billing", "nightly"])
    await create(client, tags="nightly")
    await create(client)
    body = (await client.get("/api/v1/tags")).json()
    assert body == {"items": [{"tag": "billing", "jobs": 1}, {"tag": "nightly", "jobs": 2}]}
    billing = (await client.get("/api/v1/jobs?tag=billing")).json()
    assert [j["id"] for j in billing["items"]] == [first["id"]]
    assert len((await client.get("/api/v1/jobs?tag=nightly")).json()["items"]) == 2


async def test_queue_depths(runtime: MiniRuntime, client: httpx.AsyncClient) -> None:
    await runtime.broker.start()
    body = (await client.get("/api/v1/admin/queues")).json()
    names = [q["name"] for q in body["items"]]
    assert {"rota.status", "rota.logs", "rota.dlq"} <= set(names)
    assert all(q["messages"] == 0 for q in body["items"])
    await runtime.broker.close()


async def test_dispatcher_stop_and_resume(
    runtime: MiniRuntime,
    client: httpx.AsyncClient,
) -> None:
    state = (await client.get("/api/v1/admin/dispatcher")).json()
    assert state["paused"] is False
    assert state["thisServerPaused"] is None  # this runtime has no dispatcher

    problem = assert_problem(await client.post("/api/v1/admin/dispatcher/stop", json={}), 422)
    assert fields(problem) == ["reason"]
    stopped = await client.post("/api/v1/admin/dispatcher/stop", json={"reason": "db upgrade"})
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["paused"] is True
    assert stopped.json()["reason"] == "db upgrade"
    assert stopped.json()["changedAt"] is not None
    assert stopped.json()["by"] == "test-admin"
    assert (await runtime.store.dispatcher_state()).paused
    audit = (await client.get("/api/v1/audit")).json()["items"]
    entry = next(e for e in audit if e["action"] == "dispatcher.stopped")
    assert entry["after"] == {"paused": True, "reason": "db upgrade"}
    assert entry["before"] == {"paused": False, "reason": None}
    assert (await client.get("/api/v1/admin/dispatcher")).json()["reason"] == "db upgrade"

    resumed = await client.post("/api/v1/admin/dispatcher/resume")
    assert resumed.status_code == 200
    assert resumed.json()["paused"] is False
    assert not (await runtime.store.dispatcher_state()).paused


async def test_config_masks_secrets(runtime: MiniRuntime, client: httpx.AsyncClient) -> None:
    runtime.settings = Settings(
        environment="test",
        data_dir=runtime.settings.data_dir,
        database_url="postgresql://rota:s3cret-pw@db.internal:5432/rota",
        redis_url="redis://:redis-pw@cache:6379/0",
        amqp_url="amqp://guest:guest-pw@mq:5672/%2F",
        alert_webhook_url="https://hooks.example.com/in?channel=ops&token=hook-token",
        auth={"previous_secrets": "an-old-signing-secret-that-was-rotated-out-0123"},
    )
    response = await client.get("/api/v1/admin/config")
    assert response.status_code == 200
    text = response.text
    for secret in ("s3cret-pw", "redis-pw", "guest-pw", "hook-token", "an-old-signing-secret"):
        assert secret not in text
    body = response.json()
    assert body["alertWebhookUrl"] == "https://hooks.example.com/in?channel=ops&token=********"
    assert body["databaseUrl"] == "postgresql://rota:********@db.internal:5432/rota"
    assert body["redisUrl"] == "redis://:********@cache:6379/0"
    assert body["effectiveDatabaseUrl"] == body["databaseUrl"]
    assert body["mode"] == "distributed"
    assert body["scheduler"]["bucketCount"] == 16


async def test_odd_input_is_never_a_server_error(client: httpx.AsyncClient) -> None:
    odd = ["", "0", "-1", "1e9", "9" * 30, "%00", "\u00e9", "1h1h", " 1 h ", "null", "[]"]
    for value in odd:
        for path, name in [
            ("/api/v1/stats/throughput", "window"),
            ("/api/v1/stats/throughput", "bucket"),
            ("/api/v1/events", "lastEventId"),
            ("/api/v1/events", "types"),
            ("/api/v1/events", "jobId"),
        ]:
            if path.endswith("/events") and value in ("",):
                continue  # no filter: an endless stream, covered elsewhere
            response = await client.get(path, params={name: value})
            assert response.status_code < 500, (path, name, value, response.text)
        for body in ({"reason": value}, {"reason": None}, {"reason": 5}, [], value):
            response = await client.post("/api/v1/admin/dispatcher/stop", json=body)
            assert response.status_code < 500, (body, response.text)
    for worker in ("%20", "a" * 300, "..", "x/y"):
        assert (await client.get(f"/api/v1/workers/{worker}")).status_code < 500
