"""Names where ids stood: the job's display name in the lists of occurrences, failures and
graph runs (one read per page), the resource's name in the audit log, the jobs waiting for a
limit by name; a taken name warned of; and the ids a shown fragment stands for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx

from rota.core.ids import new_id
from rota.core.limits import LimitRequest
from tests.api_runtime import MiniRuntime
from tests.integration.test_api import assert_problem, fields
from tests.integration.test_dashboard_names import count_job_reads, failed_run
from tests.integration.test_dashboard_pages import make_job

FAR = "0 0 1 1 *"


def hex_of(value: object) -> str:
    return str(value).replace("-", "")


async def trigger(client: httpx.AsyncClient, job: dict[str, Any]) -> dict[str, Any]:
    answer = await client.post(f"/api/v1/jobs/{job['id']}/trigger")
    assert answer.status_code in (200, 201, 202), answer.text
    run: dict[str, Any] = answer.json()
    return run


async def test_lists_name_the_job_in_one_read_and_null_once_deleted(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    nightly = await make_job(client, displayName="Nightly report", jobType="report.build")
    gone = await make_job(client, displayName="Short-lived", jobType="gone.soon")
    for job in (nightly, gone, nightly):
        await failed_run(runtime, UUID(str(job["id"])))
    assert (await client.delete(f"/api/v1/jobs/{gone['id']}")).status_code == 204

    reads = count_job_reads(runtime)
    runs = (await client.get("/api/v1/occurrences")).json()["items"]
    assert len(reads) == 1  # one batched read for the page
    assert [(r["jobDisplayName"], r["jobName"]) for r in runs] == [
        ("Nightly report", "report.build"),
        (None, "gone.soon"),
        ("Nightly report", "report.build"),
    ]
    failed = (await client.get("/api/v1/failed-occurrences")).json()["items"]
    assert [f["jobDisplayName"] for f in failed] == ["Nightly report", None, "Nightly report"]
    one = (await client.get(f"/api/v1/occurrences/{runs[0]['id']}")).json()
    assert one["jobDisplayName"] == "Nightly report"
    one = (await client.get(f"/api/v1/failed-occurrences/{failed[1]['id']}")).json()
    assert one["jobDisplayName"] is None


async def test_graph_runs_name_their_root_job(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    await runtime.declare("etl.extract")
    root = await make_job(client, displayName="Extract", jobType="etl.extract")
    run = await trigger(client, root)
    graph_id = await runtime.store.start_graph_run(
        new_id(), UUID(run["id"]), UUID(root["id"]), datetime.now(UTC)
    )
    listed = (await client.get("/api/v1/graph-runs")).json()["items"]
    assert [(r["id"], r["rootJobDisplayName"]) for r in listed] == [(str(graph_id), "Extract")]
    detail = (await client.get(f"/api/v1/graph-runs/{graph_id}")).json()
    assert detail["rootJobDisplayName"] == "Extract"
    assert (await client.delete(f"/api/v1/jobs/{root['id']}")).status_code == 204
    listed = (await client.get("/api/v1/graph-runs")).json()["items"]
    assert [r["rootJobDisplayName"] for r in listed] == [None]


async def test_audit_entries_name_their_resource(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    await runtime.declare("sync")
    job = await make_job(client, displayName="Sync customers", jobType="sync")
    run = await trigger(client, job)
    cancelled = await client.post(f"/api/v1/occurrences/{run['id']}/cancel", json={})
    assert cancelled.status_code in (200, 202), cancelled.text
    user = await client.post(
        "/api/v1/users",
        json={"username": "olga", "password": "correct horse battery", "role": "Viewer"},
    )
    assert user.status_code == 201, user.text
    assert (await client.delete(f"/api/v1/jobs/{job['id']}")).status_code == 204

    entries = (await client.get("/api/v1/audit?limit=20")).json()["items"]
    named = {(e["action"], e["resourceName"]) for e in entries}
    # the deleted job is named by the state its entries kept or by the one read of the page
    assert ("job.deleted", "Sync customers") in named
    assert ("occurrence.cancelled", "Sync customers") in named
    assert ("user.created", "olga") in named
    assert ("job.triggered", "Sync customers") in named
    [created] = [e for e in entries if e["action"] == "job.created"]
    assert (created["resourceId"], created["resourceName"]) == (job["id"], "Sync customers")


async def test_the_waiting_list_names_the_jobs(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    await runtime.declare("sync")
    job = await make_job(client, displayName="Sync customers", jobType="sync")
    run = await trigger(client, job)
    full = [LimitRequest("other", "sync", 1, label="sync")]
    await runtime.coordination.acquire_limits("w", full, 60.0, 10)
    asked = [LimitRequest(run["id"], "sync", 1, label="sync")]
    [grant] = await runtime.coordination.acquire_limits("w", asked, 60.0, 10)
    assert not grant.granted
    await runtime.coordination.acquire_limits(
        "w", [LimitRequest("not-an-occurrence", "sync", 1, label="sync")], 60.0, 10
    )
    waiting = (await client.get("/api/v1/limits")).json()["waiting"]
    assert [(w["occurrenceId"], w["jobId"], w["jobDisplayName"]) for w in waiting] == [
        (run["id"], job["id"], "Sync customers"),
        ("not-an-occurrence", None, None),
    ]


async def test_a_taken_name_is_warned_of_on_create_and_rename(
    client: httpx.AsyncClient,
) -> None:
    first = await make_job(client, displayName="Nightly report")
    assert [w["code"] for w in first["warnings"]] == ["unknown_job_type"]
    second = await make_job(client, displayName="nightly REPORT")
    [taken] = [w for w in second["warnings"] if w["code"] == "name_taken"]
    assert taken["jobIds"] == [first["id"]]
    assert first["id"] in taken["message"]
    other = await make_job(client, displayName="Weekly report")
    assert "name_taken" not in [w["code"] for w in other["warnings"]]
    renamed = await client.patch(
        f"/api/v1/jobs/{other['id']}", json={"displayName": "Nightly report"}
    )
    assert renamed.status_code == 200, renamed.text
    [taken] = [w for w in renamed.json()["warnings"] if w["code"] == "name_taken"]
    assert set(taken["jobIds"]) == {first["id"], second["id"]}
    # an edit that keeps the name says nothing of it
    kept = await client.patch(f"/api/v1/jobs/{other['id']}", json={"description": "x"})
    assert "name_taken" not in [w["code"] for w in kept.json()["warnings"]]


async def test_ids_turns_a_shown_fragment_into_the_whole_id(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await make_job(client, displayName="Nightly report")
    run_id = await failed_run(runtime, UUID(str(job["id"])))
    suffix = hex_of(run_id)[-12:]
    for shown in (f"…{suffix}", suffix, f"...{suffix.upper()}"):
        answer = await client.get("/api/v1/ids", params={"kind": "occurrence", "id": shown})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["ids"], body["fragment"]) == ([str(run_id)], suffix)
        assert body["window"] == 100_000
    prefix = str(job["id"])[:13]  # with its hyphen, as a person copies it
    found = (await client.get("/api/v1/ids", params={"kind": "job", "id": f"{prefix}…"})).json()
    assert found["ids"] == [job["id"]]
    failed = (await client.get("/api/v1/failed-occurrences")).json()["items"][0]
    found = (
        await client.get("/api/v1/ids", params={"kind": "failed", "id": hex_of(failed["id"])[-12:]})
    ).json()
    assert found["ids"] == [failed["id"]]
    none = (await client.get("/api/v1/ids", params={"kind": "job", "id": "ffffffffffff"})).json()
    assert none["ids"] == []
    for bad in ("abc", "…xyz123", "0" * 33):
        problem = assert_problem(
            await client.get("/api/v1/ids", params={"kind": "job", "id": bad}), 422
        )
        assert "id" in fields(problem)
    problem = assert_problem(
        await client.get("/api/v1/ids", params={"kind": "jobs", "id": suffix}), 422
    )
    assert "kind" in fields(problem)
