"""A job created or changed with its upstreams (``dependsOn``) and its audit entry in one
transaction, by the job service: a failure in the middle (an upstream deleted meanwhile, an
entry the store refuses, a refused change) leaves no job, no half-set upstreams and no entry;
success leaves the entry. Through the API and the service, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import httpx
import pytest

from rota.core.dependencies import Dependency
from rota.core.errors import ValidationError
from rota.core.models import Job
from rota.core.security import AuditQuery
from rota.services.audit import AuditNote
from tests.api_runtime import MiniRuntime
from tests.integration.test_api import assert_problem, create, fields
from tests.stores import store as store  # each store kind, over the conftest's SQLite one
from tests.stores import store_runtime as store_runtime  # the API's runtime on it

SPEC = {"job_type": "report", "display_name": "linked", "cron_expression": "0 0 1 1 *"}


async def audit(client: httpx.AsyncClient, action: str) -> list[dict[str, Any]]:
    found = await client.get("/api/v1/audit", params={"action": action})
    assert found.status_code == 200, found.text
    items: list[dict[str, Any]] = found.json()["items"]
    return items


async def names(runtime: MiniRuntime) -> list[str]:
    return [job.display_name for job in (await runtime.jobs.list_jobs(limit=100)).items]


async def test_create_with_upstreams_records_its_entry(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    a = await create(client, displayName="A")
    b = await create(client, displayName="B", dependsOn=[{"jobId": a["id"], "on": "failure"}])
    assert b["dependsOn"] == [{"jobId": a["id"], "on": "failure", "name": "A"}]
    [entry] = [e for e in await audit(client, "job.created") if e["resourceId"] == b["id"]]
    assert entry["after"]["dependsOn"] == b["dependsOn"]
    assert entry["after"]["displayName"] == "B"
    assert "warnings" not in entry["after"]
    edges = await runtime.dependencies.dependencies(UUID(b["id"]))
    assert [str(e.upstream_id) for e in edges.depends_on] == [a["id"]]


async def test_an_upstream_deleted_meanwhile_leaves_no_job(runtime: MiniRuntime) -> None:
    """The upstream goes between the request's arrival and the write (here: while the audit
    view is made, just before the transaction): refused on dependsOn, nothing left."""
    upstream = await runtime.jobs.create_job({**SPEC, "display_name": "upstream"})

    async def view(jobs: Sequence[Job], edges: Sequence[Dependency]) -> Any:
        await runtime.jobs.delete_job(upstream.id)  # another user deletes it meanwhile
        return {"id": str(jobs[0].id)}

    note = AuditNote(actor="alice", action="job.created", after=view)
    with pytest.raises(ValidationError) as refused:
        await runtime.jobs.create_job(SPEC, depends_on=[{"jobId": upstream.id}], audit=note)
    assert refused.value.field == "dependsOn[0].jobId"
    assert str(upstream.id) in refused.value.message
    assert await names(runtime) == []
    assert await runtime.store.dependency_edges() == []
    entries = await runtime.store.list_audit(AuditQuery(action="job.created"))
    assert entries.items == []


async def test_an_entry_that_cannot_be_stored_leaves_no_job(runtime: MiniRuntime) -> None:
    """The last part of the transaction fails (an audit value that is not JSON): the job and
    its upstreams written before it in the same transaction are gone with it."""
    upstream = await runtime.jobs.create_job({**SPEC, "display_name": "upstream"})

    async def view(jobs: Sequence[Job], edges: Sequence[Dependency]) -> Any:
        return {"not json": object()}

    note = AuditNote(actor="alice", action="job.created", after=view)
    with pytest.raises(Exception, match="not JSON serializable"):  # as the driver says
        await runtime.jobs.create_job(SPEC, depends_on=[{"jobId": upstream.id}], audit=note)
    assert await names(runtime) == ["upstream"]
    assert await runtime.store.dependency_edges() == []


async def test_a_refused_change_sets_no_upstreams(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    a = await create(client, displayName="A")
    b = await create(client, displayName="B")
    job = await create(client, displayName="J", dependsOn=[{"jobId": a["id"]}])
    before = await runtime.dependencies.dependencies(UUID(job["id"]))

    # valid upstreams with a refused field: nothing of it is applied (the upstreams used to
    # be set before the change was refused)
    bad = {"dependsOn": [{"jobId": b["id"]}], "cronExpression": "not a cron"}
    refused = await client.patch(f"/api/v1/jobs/{job['id']}", json=bad)
    assert fields(assert_problem(refused, 422)) == ["cronExpression"]
    # a stale If-Match: the same
    stale = await client.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"dependsOn": [{"jobId": b["id"]}]},
        headers={"If-Match": '"not-the-etag"'},
    )
    assert_problem(stale, 412)
    # a cycle with another change: refused on dependsOn, the other change not made
    cycle = await client.patch(
        f"/api/v1/jobs/{a['id']}",
        json={"displayName": "A2", "dependsOn": [{"jobId": job["id"]}]},
    )
    assert fields(assert_problem(cycle, 422)) == ["dependsOn"]
    assert (await client.get(f"/api/v1/jobs/{a['id']}")).json()["displayName"] == "A"
    assert await runtime.dependencies.dependencies(UUID(job["id"])) == before
    assert await audit(client, "job.updated") == []

    # the reference's PUT /jobs/job takes the same path: applied with its entry
    put = await client.put(
        "/api/v1/jobs/job",
        json={"id": job["id"], "dependsOn": {"value": [{"jobId": b["id"]}], "isUpdated": True}},
    )
    assert put.status_code == 200, put.text
    assert put.json()["dependsOn"] == [{"jobId": b["id"], "on": "success", "name": "B"}]
    [entry] = await audit(client, "job.updated")
    assert entry["before"]["dependsOn"] == [{"jobId": a["id"], "on": "success", "name": "A"}]
    assert entry["after"]["dependsOn"] == put.json()["dependsOn"]
    assert entry["after"]["version"] == put.json()["version"]

    # a change without dependsOn keeps the upstreams, and its entry shows them
    renamed = await client.patch(f"/api/v1/jobs/{job['id']}", json={"displayName": "J2"})
    assert renamed.json()["dependsOn"] == put.json()["dependsOn"]
    latest = (await audit(client, "job.updated"))[0]
    assert latest["after"]["displayName"] == "J2"
    assert latest["after"]["dependsOn"] == put.json()["dependsOn"]


async def test_a_bulk_create_records_its_entry_with_it(client: httpx.AsyncClient) -> None:
    body = {"jobs": [{"jobType": "report", "cronExpression": "0 0 1 1 *"} for _ in range(3)]}
    made = await client.post("/api/v1/jobs/bulk", json=body)
    assert made.status_code == 201, made.text
    [entry] = await audit(client, "job.bulk_created")
    assert entry["after"] == {"count": 3, "ids": [j["id"] for j in made.json()["items"]]}


async def test_setting_upstreams_records_its_entry_with_them(client: httpx.AsyncClient) -> None:
    a = await create(client, displayName="A")
    b = await create(client, displayName="B")
    job = await create(client, displayName="C", dependsOn=[{"jobId": a["id"]}])
    changed = await client.put(
        f"/api/v1/jobs/{job['id']}/dependencies",
        json={"dependsOn": [{"jobId": b["id"], "on": "completion"}]},
    )
    assert changed.status_code == 200, changed.text
    [entry] = await audit(client, "job.dependencies")
    assert entry["resourceId"] == job["id"]
    assert entry["before"] == {"dependsOn": [{"jobId": a["id"], "on": "success"}]}
    assert entry["after"] == {"dependsOn": [{"jobId": b["id"], "on": "completion"}]}
    refused = await client.put(
        f"/api/v1/jobs/{job['id']}/dependencies", json={"dependsOn": [{"jobId": job["id"]}]}
    )
    assert refused.status_code == 422
    assert len(await audit(client, "job.dependencies")) == 1  # a refused change writes none
