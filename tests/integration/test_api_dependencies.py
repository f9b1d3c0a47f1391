"""Job dependencies through the API: dependsOn on create and update, a cycle or an unknown
upstream refused with 422 naming the field, a job's upstreams and dependents, and a graph run
resolved by the engine (on the API's small runtime: the engine's steps are run by the test)."""

from __future__ import annotations

from uuid import UUID

import httpx

from rota.core.ids import new_id
from rota.core.models import OccurrenceStatus, StatusRecord, utcnow
from tests.api_runtime import MiniRuntime
from tests.integration.test_api import assert_problem, create, fields


async def test_depends_on_is_set_shown_and_checked(client: httpx.AsyncClient) -> None:
    a = await create(client, displayName="A")
    b = await create(client, displayName="B", dependsOn=[{"jobId": a["id"]}])
    c = await create(client, displayName="C", dependsOn=[{"jobId": b["id"], "on": "completion"}])
    shown = (await client.get(f"/api/v1/jobs/{b['id']}/dependencies")).json()
    assert shown["dependsOn"] == [{"jobId": a["id"], "on": "success", "name": "A"}]
    assert shown["dependents"] == [{"jobId": c["id"], "on": "completion", "name": "C"}]
    job = (await client.get(f"/api/v1/jobs/{b['id']}")).json()
    assert (job["dependsOn"], job["dependents"]) == (shown["dependsOn"], shown["dependents"])
    assert (await client.get("/api/v1/jobs")).json()["items"][0]["dependsOn"] is None

    # A after C closes A -> C -> B -> A: refused, naming the field and the jobs.
    cycle = await client.patch(f"/api/v1/jobs/{a['id']}", json={"dependsOn": [{"jobId": c["id"]}]})
    problem = assert_problem(cycle, 422)
    assert fields(problem) == ["dependsOn"]
    assert a["id"] in problem["detail"]
    assert c["id"] in problem["detail"]
    put = await client.put(
        f"/api/v1/jobs/{a['id']}/dependencies", json={"dependsOn": [{"jobId": a["id"]}]}
    )
    assert fields(assert_problem(put, 422)) == ["dependsOn[0]"]

    unknown = await client.post(
        "/api/v1/jobs",
        json={
            "jobType": "x",
            "cronExpression": "0 0 1 1 *",
            "dependsOn": [{"jobId": str(new_id())}],
        },
    )
    assert fields(assert_problem(unknown, 422)) == ["dependsOn[0].jobId"]
    assert len((await client.get("/api/v1/jobs")).json()["items"]) == 3  # nothing created
    bad_rule = await client.post(
        "/api/v1/jobs",
        json={
            "jobType": "x",
            "cronExpression": "0 0 1 1 *",
            "dependsOn": [{"jobId": a["id"], "on": "maybe"}],
        },
    )
    assert assert_problem(bad_rule, 422)["errors"][0]["field"].startswith("dependsOn")
    bulk = await client.post(
        "/api/v1/jobs/bulk",
        json={
            "jobs": [
                {"jobType": "x", "cronExpression": "0 0 1 1 *", "dependsOn": [{"jobId": a["id"]}]}
            ]
        },
    )
    assert fields(assert_problem(bulk, 422)) == ["jobs[0].dependsOn"]

    patched = await client.patch(
        f"/api/v1/jobs/{c['id']}", json={"dependsOn": [{"jobId": a["id"], "on": "failure"}]}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["version"] == c["version"]  # the edges are not versioned
    assert patched.json()["dependsOn"] == [{"jobId": a["id"], "on": "failure", "name": "A"}]
    cleared = await client.put(f"/api/v1/jobs/{b['id']}/dependencies", json={"dependsOn": []})
    assert cleared.json()["dependsOn"] == []
    assert_problem(await client.get(f"/api/v1/jobs/{new_id()}/dependencies"), 404)
    assert_problem(await client.get(f"/api/v1/graph-runs/{new_id()}"), 404)


async def finish(runtime: MiniRuntime, occurrence_id: str, status: OccurrenceStatus) -> None:
    """A worker's final report, applied as the tracker applies it, and the engine's reaction."""
    records = [
        StatusRecord(
            occurrence_id=UUID(occurrence_id), status=status, timestamp=utcnow(), attempt=1
        )
    ]
    result = await runtime.store.apply_status(records)
    runtime.dependencies.status_applied(result)
    await runtime.dependencies.step()


async def test_a_graph_run_follows_the_rules(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    """A -> B on success, A -> C on failure, D after B and C on completion (fan-in): A
    completes, B runs, C is skipped with its reason; D runs once both are final; one graph
    run links the four occurrences."""
    await runtime.declare("report")
    a = await create(client, displayName="A")
    b = await create(client, displayName="B", dependsOn=[{"jobId": a["id"]}])
    c = await create(client, displayName="C", dependsOn=[{"jobId": a["id"], "on": "failure"}])
    d = await create(
        client,
        displayName="D",
        dependsOn=[{"jobId": b["id"], "on": "completion"}, {"jobId": c["id"], "on": "completion"}],
    )
    await runtime.dependencies.refresh()
    root = (await client.post(f"/api/v1/jobs/{a['id']}/trigger", json={})).json()
    await finish(runtime, root["id"], OccurrenceStatus.COMPLETED)

    run_id = (await client.get(f"/api/v1/occurrences/{root['id']}")).json()["graphRunId"]
    assert run_id is not None
    run = (await client.get(f"/api/v1/graph-runs/{run_id}")).json()
    nodes = {n["name"]: n for n in run["nodes"]}
    assert run["status"] == "running"
    assert nodes["A"]["statusName"] == "Completed"
    assert nodes["B"]["statusName"] == "Queued"
    assert nodes["C"]["statusName"] == "Skipped"
    assert nodes["C"]["reason"] == "upstream A Completed; needs failure"
    assert nodes["D"]["statusName"] == "Pending"
    assert [n["level"] for n in run["nodes"]] == [0, 1, 1, 2]
    assert len(run["edges"]) == 4
    skipped = (await client.get(f"/api/v1/occurrences/{nodes['C']['occurrenceId']}")).json()
    assert skipped["skipReason"] == "upstream"
    assert skipped["graphRunId"] == run_id

    await finish(runtime, nodes["B"]["occurrenceId"], OccurrenceStatus.COMPLETED)
    await finish(runtime, nodes["B"]["occurrenceId"], OccurrenceStatus.COMPLETED)  # twice
    run = (await client.get(f"/api/v1/graph-runs/{run_id}")).json()
    d_node = next(n for n in run["nodes"] if n["name"] == "D")
    assert d_node["statusName"] == "Queued"
    d_runs = (await client.get("/api/v1/occurrences", params={"jobId": d["id"]})).json()
    assert len(d_runs["items"]) == 1  # created once

    await finish(runtime, d_node["occurrenceId"], OccurrenceStatus.FAILED)
    run = (await client.get(f"/api/v1/graph-runs/{run_id}")).json()
    assert run["status"] == "finished"
    listed = (await client.get("/api/v1/graph-runs", params={"jobId": a["id"]})).json()
    assert [r["id"] for r in listed["items"]] == [run_id]
