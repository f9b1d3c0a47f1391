"""Missed fires on the embedded runtime: the dispatcher stopped on purpose (the admin switch)
makes every cron job raise a ``fire_overdue`` alert within the grace, naming its first fire
not recorded (API, webhook, metrics); resuming the dispatcher resolves them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.core.cron import parse_cached
from rota.core.models import Job
from rota.core.records import OccurrenceQuery
from rota.services.silence import FIRE_OVERDUE, Alert
from tests.api_client import api_client
from tests.helpers import RuntimeFactory, eventually
from tests.integration.test_silence import Receiver

GRACE = 3.0
INTERVAL = 0.2


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.close()


def overdue(rt: Runtime) -> dict[object, Alert]:
    return {a.job_id: a for a in rt.silence.active if a.kind == FIRE_OVERDUE}


async def fires(rt: Runtime, job: Job) -> list[datetime]:
    page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=500))
    return sorted(o.scheduled_for for o in page.items)


async def test_a_stopped_dispatcher_is_reported_per_job_within_the_grace(
    receiver: Receiver,  # set up first, torn down after the runtime (its webhook target)
    runtime_factory: RuntimeFactory,
) -> None:
    rt = await runtime_factory(
        {
            "silence.fire_check_interval_seconds": INTERVAL,
            "silence.fire_grace_seconds": GRACE,
            "alert_webhook_url": receiver.url,
        },
        ["tests.integration.ops_jobs"],
        grace=1,
    )
    crons = ["* * * * * *", "* * * * * *", "* * * * * *", "*/3 * * * * *"]
    jobs = [await rt.jobs.create_job({"job_type": "ops.fast", "cron_expression": c}) for c in crons]
    app = create_app(rt)

    async def all_fired() -> bool:
        return all([len(await fires(rt, j)) >= 2 for j in jobs])

    await eventually(all_fired, 30, "each job firing")
    assert overdue(rt) == {}  # fires recorded on time raise nothing

    async with api_client(app, role="operator") as http:
        stopped = await http.post("/api/v1/admin/dispatcher/stop", json={"reason": "drill"})
    assert stopped.status_code == 200

    async def all_alerted() -> bool:
        return len(overdue(rt)) == len(jobs)

    await eventually(all_alerted, 30, "a fire_overdue alert per job")
    alerts = overdue(rt)
    for job in jobs:
        alert = alerts[job.id]
        assert alert.expected_at is not None
        recorded = await fires(rt, job)
        # it names the first fire not recorded: the one after the last recorded fire
        assert alert.expected_at not in recorded
        assert recorded[-1] < alert.expected_at
        cron = parse_cached(job.cron_expression or "", job.time_zone)
        assert cron.next_after(recorded[-1]) == alert.expected_at
        # raised once the grace had passed, and within a check (generous: loaded machines)
        late = alert.raised_at - alert.expected_at
        assert timedelta(seconds=GRACE) <= late <= timedelta(seconds=GRACE + 3.0)
        assert "(the dispatcher is paused: drill)" in alert.message
        assert alert.instance_id == rt.instance_id
    async with api_client(app, role="viewer") as http:
        body = (await http.get("/api/v1/admin/alerts")).json()
    listed = {a["jobId"]: a for a in body["active"] if a["kind"] == "fire_overdue"}
    assert set(listed) == {str(j.id) for j in jobs}
    assert listed[str(jobs[0].id)]["key"] == f"fire:{jobs[0].id}"
    hooks = [await asyncio.wait_for(receiver.bodies.get(), 10) for _ in jobs]
    hooked = {h["alert"]["jobId"] for h in hooks if h["alert"]["kind"] == "fire_overdue"}  # type: ignore[index]
    assert hooked == {str(j.id) for j in jobs}
    text = rt.metrics.exposition().decode()
    assert f'rota_silence_alerts_active{{kind="fire_overdue"}} {len(jobs)}.0' in text
    assert f"rota_fires_overdue {len(jobs)}.0" in text

    async with api_client(app, role="operator") as http:
        resumed = await http.post("/api/v1/admin/dispatcher/resume")
    assert resumed.status_code == 200

    async def all_resolved() -> bool:
        return not overdue(rt)

    await eventually(all_resolved, 30, "the alerts resolved once the jobs fire again")
    resolved = {a.job_id for a in rt.silence.recent if a.kind == FIRE_OVERDUE}
    assert resolved == {j.id for j in jobs}
    text = rt.metrics.exposition().decode()
    assert 'rota_silence_alerts_active{kind="fire_overdue"} 0.0' in text
    assert "rota_fires_overdue 0.0" in text
