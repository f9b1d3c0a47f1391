"""Bulk actions through the REST API on the embedded runtime: failed-run records retried,
resolved, reopened and deleted by ids or by a filter (with a dry run first), runs cancelled
and re-run; one audit entry per call; refusals name their field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from rota.app.runtime import Runtime
from tests.helpers import RuntimeFactory, eventually
from tests.integration.test_api_failed import WITHIN, failed_list, ok, problem, run_failing_job

FAILED = "/api/v1/failed-occurrences/bulk"
RUNS = "/api/v1/occurrences/bulk"
FAR = "2031-01-01T00:00:00Z"


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.sweeper_interval_seconds": 0.5}
    return await runtime_factory(overrides, ["tests.integration.failed_jobs"])


async def _audit(client: httpx.AsyncClient, action: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = ok(await client.get("/api/v1/audit", params={"limit": 100}))[
        "items"
    ]
    return [e for e in entries if e["action"] == action]


async def test_failed_records_retried_by_filter_after_a_dry_run(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    first = await run_failing_job(runtime, client)
    second = await run_failing_job(runtime, client)
    body = {"action": "retry", "filter": {"failureType": ["retries_exhausted"]}, "dryRun": True}
    counted = ok(await client.post(FAILED, json=body))
    assert (counted["matched"], counted["done"], counted["dryRun"]) == (2, 0, True)
    assert len(await failed_list(client, resolved="false")) == 2  # nothing changed

    done = ok(await client.post(FAILED, json={**body, "dryRun": False}))
    assert (done["matched"], done["done"], done["more"], done["errors"]) == (2, 2, False, [])
    assert len(done["created"]) == 2
    assert await failed_list(client, resolved="false") == []  # retried: resolved

    async def completed() -> bool:
        runs = [ok(await client.get(f"/api/v1/occurrences/{i}")) for i in done["created"]]
        return all(r["statusName"] == "Completed" for r in runs)

    await eventually(completed, WITHIN, "the retried runs completed")  # the second attempt
    [entry] = await _audit(client, "failed_occurrence.bulk_retry")
    assert entry["after"]["filter"]["failureType"] == ["retries_exhausted"]
    assert (entry["after"]["matched"], entry["after"]["done"]) == (2, 2)

    # reopened by ids, then resolved with a note, then deleted; a missing id is an error
    ids = [first["id"], second["id"]]
    reopened = ok(await client.post(FAILED, json={"action": "reopen", "ids": ids}))
    assert reopened["done"] == 2
    resolved = ok(
        await client.post(
            FAILED, json={"action": "resolve", "filter": {}, "note": "bulk: known outage"}
        )
    )
    assert resolved["done"] == 2
    notes = {r["resolutionNote"] for r in await failed_list(client, resolved="true")}
    assert notes == {"bulk: known outage"}
    gone = ok(
        await client.post(
            FAILED, json={"action": "delete", "ids": [*ids, "01a227c5-0000-7000-8000-00000000beef"]}
        )
    )
    assert gone["done"] == 2
    assert [e["id"] for e in gone["errors"]] == ["01a227c5-0000-7000-8000-00000000beef"]
    assert await failed_list(client) == []


async def test_runs_cancelled_by_filter_and_re_run(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    slow = ok(
        await client.post("/api/v1/jobs", json={"jobType": "it.until_cancelled", "executeAt": FAR}),
        201,
    )
    runs = [
        ok(
            await client.post(
                f"/api/v1/jobs/{slow['id']}/trigger", json={"reason": "bulk test", "force": True}
            ),
            202,
        )
        for _ in range(2)
    ]
    cancel = {"action": "cancel", "filter": {"jobId": slow["id"], "status": ["Queued", "Running"]}}
    counted = ok(await client.post(RUNS, json={**cancel, "dryRun": True}))
    assert (counted["matched"], counted["done"]) == (2, 0)
    done = ok(await client.post(RUNS, json={**cancel, "reason": "bulk stop"}))
    assert (done["matched"], done["done"], done["errors"]) == (2, 2, [])

    async def cancelled() -> bool:
        ended = [ok(await client.get(f"/api/v1/occurrences/{r['id']}")) for r in runs]
        return all(r["statusName"] == "Cancelled" for r in ended)

    await eventually(cancelled, WITHIN, "both runs cancelled")
    # a run that has ended cannot be cancelled: reported, the others go on
    again = ok(await client.post(RUNS, json={"action": "cancel", "ids": [runs[0]["id"]]}))
    assert (again["done"], [e["id"] for e in again["errors"]]) == (0, [runs[0]["id"]])

    rerun = ok(await client.post(RUNS, json={"action": "rerun", "ids": [runs[1]["id"]]}))
    assert (rerun["done"], len(rerun["created"])) == (1, 1)
    fresh = ok(await client.get(f"/api/v1/occurrences/{rerun['created'][0]}"))
    assert fresh["jobId"] == slow["id"]
    assert fresh["triggerReason"] == f"re-run of {runs[1]['id']}"
    [entry] = await _audit(client, "occurrence.bulk_rerun")
    assert entry["after"]["ids"] == [runs[1]["id"]]
    by_filter, by_ids = sorted(
        await _audit(client, "occurrence.bulk_cancel"), key=lambda e: e["after"]["ids"] is not None
    )
    assert by_filter["after"]["filter"]["status"] == ["Queued", "Running"]
    assert (by_filter["after"]["done"], by_ids["after"]["errors"]) == (2, 1)
    ok(await client.post(RUNS, json={"action": "cancel", "ids": rerun["created"]}))

    async def rerun_cancelled() -> bool:
        run = ok(await client.get(f"/api/v1/occurrences/{rerun['created'][0]}"))
        return bool(run["statusName"] == "Cancelled")

    await eventually(rerun_cancelled, WITHIN, "the re-run cancelled")


async def test_refusals_name_their_field(client: httpx.AsyncClient) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        (FAILED, {"action": "retry"}, "ids or filter"),
        (FAILED, {"action": "retry", "ids": [], "filter": {}}, "ids"),
        (FAILED, {"action": "explode", "filter": {}}, "action"),
        (FAILED, {"action": "retry", "filter": {"failureType": ["nope"]}}, "failureType"),
        (RUNS, {"action": "cancel", "filter": {"status": ["Sleeping"]}}, "status"),
        (RUNS, {"action": "cancel", "filter": {"jobs": "x"}}, "jobs"),
        (RUNS, {"action": "rerun", "ids": ["not-a-uuid"]}, "ids"),
    ]
    for path, body, named in cases:
        answer = problem(await client.post(path, json=body), 422)
        assert named in str(answer), (body, answer)


async def test_a_paced_rerun_schedules_each_new_run_in_turn(
    runtime: Runtime, client: httpx.AsyncClient
) -> None:
    first, second = [await run_failing_job(runtime, client) for _ in range(2)]
    base = {"action": "rerun", "perSecond": 2}
    created: list[str] = []
    expected: list[tuple[datetime, datetime]] = []  # each new run's window of scheduled times
    # two in one call (the second half a second after the first), then one more as the CLI
    # goes on where the last call ended
    calls = [([first, second], 60.0), ([first], 61.0)]
    for records, start in calls:
        ids = [r["occurrenceId"] for r in records]
        before = datetime.now(UTC)
        answer = ok(await client.post(RUNS, json={**base, "ids": ids, "startAfterSeconds": start}))
        after = datetime.now(UTC)
        created += answer["created"]
        for n in range(len(ids)):
            offset = timedelta(seconds=start + n / 2)
            expected.append((before + offset, after + offset))
    runs = [ok(await client.get(f"/api/v1/occurrences/{i}")) for i in created]
    for run, (earliest, latest) in zip(runs, expected, strict=True):
        assert earliest <= datetime.fromisoformat(run["scheduledFor"]) <= latest, run
    assert {r["statusName"] for r in runs} == {"Queued"}  # scheduled a minute ahead: not sent
    assert all(r["dispatchedAt"] is None for r in runs)
    ok(await client.post(RUNS, json={"action": "cancel", "ids": created}))
