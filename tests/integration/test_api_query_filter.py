"""The query filter through the REST API (``?q=`` on ``GET /occurrences``,
``/failed-occurrences`` and ``/jobs``), its errors, and unknown query parameters refused
with a 400 that names them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx

from rota.core.ids import new_id
from rota.core.models import FailedOccurrence, FailureType, utcnow
from tests.api_runtime import MiniRuntime
from tests.integration.test_api import assert_problem, create, fields, seed_occurrences

LISTS = ("/api/v1/occurrences", "/api/v1/failed-occurrences", "/api/v1/jobs")


async def items(client: httpx.AsyncClient, path: str, **params: Any) -> list[dict[str, Any]]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["items"]
    return found


async def test_the_three_lists_take_a_query(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    sales = await create(
        client,
        displayName="nightly sales",
        workerId="reports",
        tags="billing",
        jobData='{"customer": 42}',
    )
    mail = await create(
        client, displayName="mailer", jobType="send-email", jobData='{"customer": 7}'
    )
    await seed_occurrences(runtime, UUID(sales["id"]))
    await seed_occurrences(runtime, UUID(mail["id"]))
    await runtime.store.record_dead_letters(
        [
            FailedOccurrence(
                id=new_id(),
                occurrence_id=None,
                job_id=UUID(sales["id"]),
                job_type="report",
                failure_type=FailureType.TIMED_OUT,
                exception="slow",
                job_data={"customer": 42},
                attempts=3,
                failed_at=utcnow(),
            )
        ]
    )

    runs = await items(
        client,
        LISTS[0],
        q="type:report status:completed,running data.customer:42 worker:reports attempt:1 "
        'job:"nightly sales" tag:billing after:2025-12-31',
    )
    assert [(r["jobId"], r["statusName"]) for r in runs] == [
        (sales["id"], "Running"),
        (sales["id"], "Completed"),
    ]
    # the query AND the list's own parameters
    assert await items(client, LISTS[0], q="type:report", status="queued", jobId=mail["id"]) == []
    assert len(await items(client, LISTS[0], q="data.customer:7")) == 3

    failed = await items(client, LISTS[1], q="attempt:>1 failure:timed_out data.customer:42")
    assert [r["jobId"] for r in failed] == [sales["id"]]
    assert await items(client, LISTS[1], q="status:resolved") == []

    # a bulk action on what a filter matches takes the same query
    body = {"action": "resolve", "filter": {"q": "type:send-email"}, "dryRun": True}
    counted = await client.post("/api/v1/failed-occurrences/bulk", json=body)
    assert counted.status_code == 200, counted.text
    assert counted.json()["matched"] == 0
    body["filter"] = {"q": "data.customer:42 attempt:3"}
    assert (await client.post("/api/v1/failed-occurrences/bulk", json=body)).json()["matched"] == 1
    body = {"action": "cancel", "filter": {"q": "type:send-email status:queued"}, "dryRun": True}
    counted = await client.post("/api/v1/occurrences/bulk", json=body)
    assert counted.json()["matched"] == 1
    body["filter"] = {"q": "stauts:x"}
    bad = assert_problem(await client.post("/api/v1/occurrences/bulk", json=body), 422)
    assert fields(bad) == ["filter.q"]

    jobs = await items(client, LISTS[2], q="worker:reports data.customer:42 status:active")
    assert [j["id"] for j in jobs] == [sales["id"]]
    assert [j["id"] for j in await items(client, LISTS[2], q="mailer")] == [mail["id"]]


async def test_query_errors_name_the_qualifier(client: httpx.AsyncClient) -> None:
    for path in LISTS:
        bad = assert_problem(await client.get(path, params={"q": "stauts:failed"}), 422)
        assert fields(bad) == ["q"]
        assert bad["detail"] == 'unknown qualifier "stauts" (did you mean status?)'
    bad = assert_problem(await client.get(LISTS[0], params={"q": "attempt:>x"}), 422)
    assert "attempt" in bad["detail"]
    bad = assert_problem(await client.get(LISTS[0], params={"q": "data.a'b:1"}), 422)
    assert fields(bad) == ["q"]


async def test_unknown_query_parameters_are_refused(client: httpx.AsyncClient) -> None:
    bad = assert_problem(await client.get(LISTS[0], params={"jobType": "report"}), 400)
    assert fields(bad) == ["jobType"]
    assert bad["detail"].startswith('unknown query parameter "jobType"')
    bad = assert_problem(await client.get(LISTS[1], params={"jobid": str(new_id())}), 400)
    assert bad["detail"] == 'unknown query parameter "jobid" (did you mean jobId?)'
    bad = assert_problem(await client.get(LISTS[2], params={"serach": "x"}), 400)
    assert fields(bad) == ["serach"]
    # every declared parameter still passes
    ok = await client.get(
        LISTS[2],
        params={"search": "x", "tag": "t", "jobType": "r", "isActive": "true", "limit": 5, "q": ""},
    )
    assert ok.status_code == 200, ok.text
