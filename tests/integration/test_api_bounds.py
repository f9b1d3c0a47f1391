"""The API of interval schedules and schedule bounds (issue 20): what a job shows, what a
change does, and the 422 problems that name the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.integration.test_api import assert_problem, fields

FUTURE = datetime(2031, 1, 1, tzinfo=UTC)


async def test_an_interval_job_shows_its_schedule_and_bounds(client: httpx.AsyncClient) -> None:
    body = {
        "jobType": "report",
        "every": "1h30m",
        "startAt": FUTURE.isoformat(),
        "endAt": (FUTURE + timedelta(days=1)).isoformat(),
        "maxRuns": 5,
        "jitterSeconds": 30,
        "misfireWindowSeconds": 600,
    }
    response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["every"], job["intervalSeconds"], job["cronExpression"]) == ("1h30m", 5400, None)
    assert job["nextRunAt"] == "2031-01-01T00:00:00Z"  # its start: the first point of its grid
    assert (job["maxRuns"], job["runCount"], job["jitterSeconds"]) == (5, None, 30.0)
    assert job["misfireWindowSeconds"] == 600.0
    assert job["endAt"] == "2031-01-02T00:00:00Z"

    # an interval in seconds, and a later start moves the next fire with it
    changed = await client.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"every": 120, "startAt": (FUTURE + timedelta(hours=1)).isoformat()},
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["every"], changed.json()["nextRunAt"]) == ("2m", "2031-01-01T01:00:00Z")
    # back to a cron: every cleared in the same change
    cron = await client.patch(
        f"/api/v1/jobs/{job['id']}", json={"every": None, "cronExpression": "0 12 * * *"}
    )
    assert cron.status_code == 200, cron.text
    assert (cron.json()["every"], cron.json()["nextRunAt"]) == (None, "2031-01-01T12:00:00Z")
    versions = (await client.get(f"/api/v1/jobs/{job['id']}/versions")).json()["items"]
    assert versions[0]["snapshot"]["every"] == 5400


async def test_refusals_name_their_field(client: httpx.AsyncClient) -> None:
    start = FUTURE.isoformat()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"every": "soon"}, "every"),
        ({"every": "0s"}, "every"),
        ({"every": "400d"}, "every"),
        ({"every": "5m", "cronExpression": "@daily"}, "every"),
        ({"every": "5m", "executeAt": start}, "every"),
        ({"executeAt": start, "maxRuns": 3}, "maxRuns"),
        ({"executeAt": start, "startAt": start}, "startAt"),
        ({"every": "5m", "startAt": start, "endAt": start}, "endAt"),
        ({"every": "5m", "maxRuns": 0}, "maxRuns"),
        ({"every": "5m", "jitterSeconds": 3601}, "jitterSeconds"),
        ({"every": "5m", "jitterSeconds": -1}, "jitterSeconds"),
        ({"every": "5m", "misfireWindowSeconds": 0}, "misfireWindowSeconds"),
        ({"every": "5m", "startAt": "tomorrow"}, "startAt"),
        ({"maxRuns": 3}, "maxRuns"),  # no schedule: runs when triggered, so nothing to bound
    ]
    for extra, field in cases:
        response = await client.post("/api/v1/jobs", json={"jobType": "t"} | extra)
        problem = assert_problem(response, 422)
        assert field in fields(problem), (extra, problem)
    made = await client.post("/api/v1/jobs", json={"jobType": "t", "every": "5m"})
    job_id = made.json()["id"]
    refused = await client.patch(f"/api/v1/jobs/{job_id}", json={"cronExpression": "@daily"})
    assert "every" in fields(assert_problem(refused, 422))
    read_only = await client.patch(f"/api/v1/jobs/{job_id}", json={"runCount": 3})
    assert "runCount" in fields(assert_problem(read_only, 422))


async def test_the_preview_shows_an_intervals_fires(client: httpx.AsyncClient) -> None:
    url = "/api/v1/schedules/preview"
    after = "2031-01-01T00:00:10Z"
    aligned = await client.get(url, params={"every": "90m", "after": after, "count": 2})
    assert aligned.json() == {"fires": ["2031-01-01T01:30:10Z", "2031-01-01T03:00:10Z"]}
    start = {"every": "1h", "startAt": "2031-01-01T00:30:00Z", "after": after, "count": 2}
    assert (await client.get(url, params=start)).json() == {
        "fires": ["2031-01-01T00:30:00Z", "2031-01-01T01:30:00Z"]
    }
    for params, field in (
        ({"every": "soon"}, "every"),
        ({"every": "5m", "cron": "@daily"}, "every"),
        ({}, "cron"),
    ):
        assert field in fields(assert_problem(await client.get(url, params=params), 422))


async def test_upcoming_lists_a_jobs_next_fires_within_its_bounds(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "jobType": "report",
        "every": "1h30m",
        "startAt": FUTURE.isoformat(),
        "maxRuns": 2,
        "timeZone": "Asia/Kolkata",
        "retryDelaySeconds": 7,
    }
    job = (await client.post("/api/v1/jobs", json=body)).json()
    answer = await client.get(f"/api/v1/jobs/{job['id']}/upcoming", params={"count": 5})
    assert answer.status_code == 200, answer.text
    upcoming = answer.json()
    assert upcoming["timeZone"] == "Asia/Kolkata"
    assert upcoming["fires"] == [  # two runs planned: two fires
        {"at": "2031-01-01T00:00:00Z", "local": "2031-01-01T05:30:00+05:30", "skipped": None},
        {"at": "2031-01-01T01:30:00Z", "local": "2031-01-01T07:00:00+05:30", "skipped": None},
    ]
    assert upcoming["effective"]["retryDelaySeconds"] == {"value": 7.0, "source": "job"}
    assert upcoming["effective"]["maxRetries"]["source"] in ("job type", "server default")
    too_many = await client.get(f"/api/v1/jobs/{job['id']}/upcoming", params={"count": 0})
    assert fields(assert_problem(too_many, 422)) == ["count"]
    missing = await client.get("/api/v1/jobs/01a227c5-0000-7000-8000-000000000000/upcoming")
    assert missing.status_code == 404
