"""``/limits``: cluster-wide limits of job types (Admins set them, every role reads them);
what the workers hold and who waits comes from the coordination."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from rota.core.limits import JobLimit, LimitRequest
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime
from tests.integration.test_api import assert_problem, fields

LIMITS = "/api/v1/limits"
FAR = "0 0 1 1 *"


async def test_set_read_change_and_delete_limits(
    runtime: MiniRuntime, client: httpx.AsyncClient
) -> None:
    r = await client.get(LIMITS)
    assert r.status_code == 200, r.text
    assert r.json() == {"limits": [], "waiting": []}
    body = {
        "limits": [
            {"type": "sync", "max": 2, "key": "customerId"},
            {"type": "mail", "ratePerSecond": 5},
        ]
    }
    r = await client.put(LIMITS, json=body)
    assert r.status_code == 200, r.text
    assert [(x["type"], x["max"], x["key"], x["ratePerSecond"]) for x in r.json()["limits"]] == [
        ("mail", None, None, 5.0),
        ("sync", 2, "customerId", None),
    ]
    # published for the workers at once
    assert await runtime.coordination.published_limits() == [
        JobLimit("mail", rate=5.0),
        JobLimit("sync", 2, "customerId"),
    ]
    # the slots held and the occurrences waiting, as the workers left them in the coordination
    sync = JobLimit("sync", 2, "customerId")
    slot = sync.slot_key({"customerId": "c1"})
    assert slot == 'sync|customerId="c1"'
    asks = [LimitRequest(f"occ-{i}", slot, 2, label=slot) for i in range(3)]
    await runtime.coordination.acquire_limits("w", asks, 60.0, 10)
    listed = (await client.get(LIMITS)).json()
    [mail, synced] = listed["limits"]
    assert (synced["running"], synced["waiting"]) == (2, 1)
    assert synced["slots"] == [{"key": slot, "running": 2}]
    assert (mail["running"], mail["waiting"]) == (0, 0)
    assert [(w["occurrenceId"], w["limit"]) for w in listed["waiting"]] == [("occ-2", slot)]
    # one type at a time
    r = await client.put(f"{LIMITS}/mail", json={"max": 1, "ratePerSecond": 0.5})
    assert r.status_code == 200, r.text
    assert r.json()["limits"][0] | {"running": 0} == {
        "type": "mail",
        "max": 1,
        "key": None,
        "ratePerSecond": 0.5,
        "running": 0,
        "waiting": 0,
        "slots": [],
    }
    assert (await client.delete(f"{LIMITS}/mail")).status_code == 204
    assert_problem(await client.delete(f"{LIMITS}/mail"), 404)
    assert [x["type"] for x in (await client.get(LIMITS)).json()["limits"]] == ["sync"]
    assert await runtime.coordination.published_limits() == [sync]
    # kept in the store (the source of truth)
    assert await runtime.store.job_limits() == [sync]


async def test_bad_limits_are_refused_naming_the_field(client: httpx.AsyncClient) -> None:
    cases = [
        ({"limits": [{"type": "sync", "max": 0}]}, "limits[0].max"),
        ({"limits": [{"type": "sync", "ratePerSecond": -1}]}, "limits[0].ratePerSecond"),
        ({"limits": [{"type": "", "max": 1}]}, "limits[0].type"),
        ({"limits": [{"type": "sync", "max": 1, "colour": "red"}]}, "limits[0].colour"),
        ({"limits": [{"type": "sync"}]}, "limits[0].max"),
        ({"limits": [{"type": "sync", "key": "customerId", "ratePerSecond": 1}]}, "limits[0].key"),
        ({"limits": [{"type": "a", "max": 1}, {"type": "a", "max": 2}]}, "limits[1].type"),
    ]
    for body, field in cases:
        problem = assert_problem(await client.put(LIMITS, json=body), 422)
        assert field in fields(problem), (body, problem)
    problem = assert_problem(await client.put(f"{LIMITS}/sync", json={"max": "many"}), 422)
    assert "max" in fields(problem)
    assert (await client.get(LIMITS)).json()["limits"] == []


async def test_only_admins_set_limits(app: FastAPI) -> None:
    for role in ("viewer", "operator"):
        async with api_client(app, role) as http:
            assert (await http.get(LIMITS)).status_code == 200
            body = {"limits": [{"type": "sync", "max": 1}]}
            assert_problem(await http.put(LIMITS, json=body), 403)
            assert_problem(await http.put(f"{LIMITS}/sync", json={"max": 1}), 403)
            assert_problem(await http.delete(f"{LIMITS}/sync"), 403)


async def test_a_queued_occurrence_held_back_says_what_it_waits_for(
    runtime: MiniRuntime, client: httpx.AsyncClient
) -> None:
    await runtime.declare("sync")
    job = (
        await client.post("/api/v1/jobs", json={"jobType": "sync", "cronExpression": FAR})
    ).json()
    occurrence = (await client.post(f"/api/v1/jobs/{job['id']}/trigger")).json()
    detail = (await client.get(f"/api/v1/occurrences/{occurrence['id']}")).json()
    assert detail["statusName"] == "Queued"
    assert detail["waitingFor"] is None
    # a worker asks for a slot of a full semaphore for it: it waits
    full = [LimitRequest("other", "sync", 1, label="sync")]
    await runtime.coordination.acquire_limits("w", full, 60.0, 10)
    asked = [LimitRequest(occurrence["id"], "sync", 1, label="sync")]
    [grant] = await runtime.coordination.acquire_limits("w", asked, 60.0, 10)
    assert not grant.granted
    detail = (await client.get(f"/api/v1/occurrences/{occurrence['id']}")).json()
    assert detail["waitingFor"] == "sync"
