"""``POST /jobs/{id}/backfill``: one run per past fire of a cron job in a window, except the
fires it already has a run of; on SQLite and PostgreSQL through the API, and end to end in
the embedded runtime (the runs complete one after another, oldest fire first)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from uuid import UUID

import httpx
from sqlalchemy import select

from rota.app.runtime import Runtime
from rota.core.models import ConcurrencyPolicy, OccurrenceStatus
from rota.core.records import OccurrenceQuery
from rota.stores.schema import occurrences
from rota.stores.sql import SqlStore
from tests.api_runtime import MiniRuntime
from tests.helpers import RuntimeFactory, eventually
from tests.integration.runtime_jobs import BACKFILLED
from tests.stores import store as store  # each store kind, over the conftest's SQLite one
from tests.stores import store_runtime as store_runtime  # the API's runtime on it

HOURLY = {"jobType": "report", "displayName": "hourly report", "cronExpression": "0 * * * *"}


def hour(n: int) -> datetime:
    """The top of the hour ``n`` hours ago."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=n)


async def test_a_window_gets_one_run_per_fire_it_lacks(
    client: httpx.AsyncClient, store: SqlStore, runtime: MiniRuntime
) -> None:
    await runtime.declare("report")
    job = (await client.post("/api/v1/jobs", json=HOURLY)).json()
    window = {"from": hour(5).isoformat(), "to": hour(1).isoformat(), "reason": "rerun"}
    answer = await client.post(f"/api/v1/jobs/{job['id']}/backfill", json=window)
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert (out["fires"], out["created"], out["alreadyRecorded"]) == (5, 5, 0)
    page = await store.list_occurrences(OccurrenceQuery(job_id=UUID(job["id"]), limit=50))
    runs = sorted(page.items, key=lambda o: o.scheduled_for)
    assert [o.scheduled_for for o in runs] == [hour(n) for n in range(5, 0, -1)]
    assert [str(o.id) for o in runs] == out["occurrenceIds"]
    assert {o.status for o in runs} == {OccurrenceStatus.QUEUED}
    assert {o.trigger_reason for o in runs} == {"rerun"}
    assert all(o.due_at > o.scheduled_for for o in runs)  # dispatched now
    # they run one after another whatever the job's policy (Skip here)
    assert job["concurrentExecutionPolicy"] == int(ConcurrencyPolicy.SKIP)
    async with store._read() as conn:  # the policy each occurrence was stored with
        stored = select(occurrences.c.concurrency_policy).where(
            occurrences.c.job_id == UUID(job["id"])
        )
        policies = set((await conn.execute(stored)).scalars())
    assert policies == {int(ConcurrencyPolicy.QUEUE)}

    # the same window again, wider: only the fires without a run get one
    wider = {"from": hour(7).isoformat(), "to": hour(1).isoformat()}
    again = (await client.post(f"/api/v1/jobs/{job['id']}/backfill", json=wider)).json()
    assert (again["fires"], again["created"], again["alreadyRecorded"]) == (7, 2, 5)
    audit = (await client.get("/api/v1/audit", params={"action": "job.backfilled"})).json()
    assert len(audit["items"]) == 2


async def test_what_a_backfill_refuses(client: httpx.AsyncClient) -> None:
    job = (await client.post("/api/v1/jobs", json=HOURLY)).json()
    once = (
        await client.post(
            "/api/v1/jobs", json={"jobType": "report", "executeAt": hour(-2).isoformat()}
        )
    ).json()
    path = f"/api/v1/jobs/{job['id']}/backfill"
    cases = [
        (path, {"from": hour(1).isoformat(), "to": hour(3).isoformat()}, "to"),  # reversed
        (path, {"from": hour(1).isoformat(), "to": hour(-1).isoformat()}, "to"),  # future
        (path, {"from": hour(2000).isoformat(), "to": hour(1).isoformat()}, "to"),  # > 1,000
        (path, {"to": hour(1).isoformat()}, "from"),
        (
            f"/api/v1/jobs/{once['id']}/backfill",
            {"from": hour(3).isoformat(), "to": hour(1).isoformat()},
            "jobId",
        ),
    ]
    for url, body, field in cases:
        answer = await client.post(url, json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["errors"][0]["field"] == field, answer.text
    missing = await client.post(
        "/api/v1/jobs/0190a000-0000-7000-8000-000000000000/backfill",
        json={"from": hour(3).isoformat(), "to": hour(1).isoformat()},
    )
    assert missing.status_code == 404


async def test_a_window_from_year_one_is_refused_naming_from(client: httpx.AsyncClient) -> None:
    """A window starting at 0001-01-01 was a 500 (the schedule stepped out of Python's dates)."""
    for zone in ("UTC", "America/New_York"):
        job = (await client.post("/api/v1/jobs", json=HOURLY | {"timeZone": zone})).json()
        path = f"/api/v1/jobs/{job['id']}/backfill"
        for start, end in [
            ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
            ("0001-01-01T00:00:00Z", hour(1).isoformat()),
            ("0001-01-01T00:00:00.000001Z", "0001-01-03T00:00:00Z"),
            ("1969-12-31T23:00:00Z", "1970-01-01T01:00:00Z"),
        ]:
            answer = await client.post(path, json={"from": start, "to": end})
            assert answer.status_code == 422, (zone, start, answer.text)
            assert answer.json()["errors"][0]["field"] == "from", answer.text
        epoch = {"from": "1970-01-01T00:00:00Z", "to": "1970-01-01T02:00:00Z"}
        answer = await client.post(path, json=epoch)
        assert answer.status_code == 201, answer.text
        assert answer.json()["fires"] == 3


async def test_backfilled_runs_complete_one_after_another_oldest_first(
    runtime_factory: RuntimeFactory,
) -> None:
    rt: Runtime = await runtime_factory({}, ["tests.integration.runtime_jobs"])
    BACKFILLED.clear()
    job = await rt.jobs.create_job(
        {"job_type": "it.backfill", "cron_expression": "*/10 * * * *", "is_active": False}
    )
    now = rt.jobs.now()
    result = await rt.backfill.backfill(job.id, now - timedelta(hours=1), now)
    assert result.fires == 6
    ids = [o.id for o in result.created]

    async def all_done() -> bool:
        page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=50))
        done = [o for o in page.items if o.status is OccurrenceStatus.COMPLETED]
        return len(done) == len(ids)

    await eventually(all_done, 20, "every backfilled run completed")
    fires = [f for f, _, _ in BACKFILLED]
    assert fires == sorted(fires)  # oldest fire first
    for (_, _, ended), (_, started, _) in itertools.pairwise(BACKFILLED):
        assert started >= ended  # never two at once
