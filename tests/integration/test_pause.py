"""``POST /jobs/{id}/pause``, ``/resume``, ``/skip`` through the API (fields, audit, refusals,
roles, apart from ``isActive`` and auto-disable), and end to end in the embedded runtime: a
per-second job paused for a few seconds records its fires Skipped with the note, resumes by
itself and runs again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import httpx
from fastapi import FastAPI
from msgspec.structs import replace

from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from rota.core.records import OccurrenceQuery
from rota.core.security import AuditQuery
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime
from tests.helpers import RuntimeFactory, eventually

EVERY_MINUTE = {"jobType": "report", "displayName": "report", "cronExpression": "* * * * *"}
MISSING = "0190a000-0000-7000-8000-000000000000"


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


async def test_pause_resume_and_skip_show_on_the_job_and_in_the_audit(
    client: httpx.AsyncClient,
) -> None:
    job = (await client.post("/api/v1/jobs", json=EVERY_MINUTE)).json()
    assert (job["paused"], job["pauseNote"], job["skipNext"]) == (False, None, 0)
    path = f"/api/v1/jobs/{job['id']}"
    until = soon(3600)
    answer = await client.post(f"{path}/pause", json={"note": "db migration", "until": until})
    assert answer.status_code == 200, answer.text
    paused = answer.json()
    assert paused["paused"] is True
    assert paused["pauseNote"] == "db migration"
    assert datetime.fromisoformat(paused["pausedUntil"]) == datetime.fromisoformat(until)
    assert paused["pausedBy"] == "test-admin"
    assert paused["pausedAt"] is not None
    assert paused["isActive"] is True  # not the on/off switch
    assert (await client.get(path)).json()["pauseNote"] == "db migration"
    # paused again: the new note, no end; no body at all is a pause without a note
    again = (await client.post(f"{path}/pause", json={"note": "longer"})).json()
    assert (again["pauseNote"], again["pausedUntil"]) == ("longer", None)
    bare = await client.post(f"{path}/pause")
    assert bare.status_code == 200
    assert bare.json()["pauseNote"] is None

    skip = await client.post(f"{path}/skip", json={"count": 3, "note": "deploy"})
    assert (skip.json()["skipNext"], skip.json()["skipNote"]) == (3, "deploy")
    cleared = (await client.post(f"{path}/skip", json={"count": 0})).json()
    assert (cleared["skipNext"], cleared["skipNote"]) == (0, None)

    resumed = await client.post(f"{path}/resume")
    assert resumed.status_code == 200
    assert (resumed.json()["paused"], resumed.json()["pausedAt"]) == (False, None)
    not_paused = await client.post(f"{path}/resume")
    assert not_paused.status_code == 409, not_paused.text

    audit = (await client.get("/api/v1/audit", params={"resourceId": job["id"]})).json()
    actions = [e["action"] for e in audit["items"]]
    assert actions.count("job.paused") == 3
    assert actions.count("job.resumed") == 1
    assert actions.count("job.skip_set") == 2


async def test_what_pause_and_skip_refuse(client: httpx.AsyncClient) -> None:
    job = (await client.post("/api/v1/jobs", json=EVERY_MINUTE)).json()
    path = f"/api/v1/jobs/{job['id']}"
    cases = [
        ("pause", {"until": soon(-60)}, "until"),  # past
        ("pause", {"until": "tomorrow"}, "until"),
        ("pause", {"note": "x" * 501}, "note"),
        ("skip", {"count": 1001}, "count"),
        ("skip", {"count": -1}, "count"),
        ("skip", {}, "count"),
        ("skip", {"count": 2, "note": "x" * 501}, "note"),
    ]
    for action, body, field in cases:
        answer = await client.post(f"{path}/{action}", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["errors"][0]["field"] == field, answer.text
    for action, body in (("pause", {}), ("resume", None), ("skip", {"count": 1})):
        missing = await client.post(f"/api/v1/jobs/{MISSING}/{action}", json=body)
        assert missing.status_code == 404, missing.text
    assert (await client.get(path)).json()["paused"] is False


async def test_pausing_takes_the_role_that_edits_jobs(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    job = (await client.post("/api/v1/jobs", json=EVERY_MINUTE)).json()
    path = f"/api/v1/jobs/{job['id']}"
    async with api_client(app, "viewer") as viewer:
        for action, body in (("pause", {}), ("resume", None), ("skip", {"count": 1})):
            assert (await viewer.post(f"{path}/{action}", json=body)).status_code == 403
    async with api_client(app, "operator") as operator:
        answer = await operator.post(f"{path}/pause", json={"note": "ops"})
        assert answer.json()["pausedBy"] == "test-operator"
        assert (await operator.post(f"{path}/resume")).status_code == 200


async def test_pause_is_apart_from_the_switch_and_auto_disable(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = (await client.post("/api/v1/jobs", json=EVERY_MINUTE)).json()
    path = f"/api/v1/jobs/{job['id']}"
    stored = await runtime.store.get_job(UUID(job["id"]))
    failing = replace(
        stored,
        is_active=False,
        disabled_reason="5 failures in a row",
        disabled_at=stored.updated_at,
    )
    await runtime.store.update_job(failing, expected_version=stored.version, with_state=True)
    await client.post(f"{path}/pause", json={"note": "investigating"})
    resumed = (await client.post(f"{path}/resume")).json()
    assert resumed["isActive"] is False  # a resume does not wipe an auto-disable
    assert resumed["autoDisable"]["disabledReason"] == "5 failures in a row"
    await client.post(f"{path}/pause", json={"note": "still"})
    enabled = (await client.patch(path, json={"isActive": True})).json()
    assert enabled["isActive"] is True  # an enable does not end the pause
    assert enabled["autoDisable"]["disabledReason"] is None
    assert (enabled["paused"], enabled["pauseNote"]) == (True, "still")


async def test_a_timed_pause_records_its_fires_and_ends_by_itself(
    runtime_factory: RuntimeFactory,
) -> None:
    rt: Runtime = await runtime_factory({}, ["tests.integration.runtime_jobs"])
    job = await rt.jobs.create_job({"job_type": "it.fast", "cron_expression": "* * * * * *"})

    async def runs(*statuses: OccurrenceStatus) -> list:  # type: ignore[type-arg]
        query = OccurrenceQuery(job_id=job.id, statuses=statuses, limit=500)
        return list((await rt.store.list_occurrences(query)).items)

    await eventually(lambda: runs(OccurrenceStatus.COMPLETED), 20, "a first run")
    until = rt.jobs.now() + timedelta(seconds=3)
    paused = await rt.pausing.pause(job.id, by="ops", note="maintenance", until=until)
    assert paused.is_paused

    async def resumed() -> bool:
        return not (await rt.store.get_job(job.id)).is_paused

    await eventually(resumed, 20, "the pause to end by itself")
    assert rt.jobs.now() >= until

    async def ran_after() -> bool:
        done = await runs(OccurrenceStatus.COMPLETED)
        return any(o.scheduled_for >= until for o in done)

    await eventually(ran_after, 20, "a run after the pause")
    everything = await runs()
    during = [
        o
        for o in everything
        if paused.paused_at + timedelta(seconds=1) <= o.scheduled_for < until  # type: ignore[operator]
    ]
    assert during, "fires came while paused"
    assert {(o.status, o.skip_reason) for o in during} == {(OccurrenceStatus.SKIPPED, "paused")}
    detail = await rt.store.get_occurrence(during[0].id)
    assert detail.status_changes[0].reason == "paused: maintenance"
    entries = await rt.store.list_audit(AuditQuery(action="job.resumed"))
    assert [(e.actor, e.resource_id) for e in entries.items] == [("system", str(job.id))]
