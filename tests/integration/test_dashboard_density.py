"""The denser dashboard, server side: compact times, counts on the status chips, row actions
on Jobs, role and password forms on Users, and a test notification that says it is one."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from uuid import UUID

import httpx

from rota.core.models import OccurrenceStatus, StatusRecord
from rota.core.notifications import render_email
from rota.core.planning import PlanSettings, new_occurrence
from rota.dashboard.app import render_time
from tests.api_runtime import MiniRuntime
from tests.integration.test_dashboard_pages import anonymous as anonymous
from tests.integration.test_dashboard_pages import finished_occurrence, jar, make_job, sign_in

SUBS = "/api/v1/notifications/subscriptions"


def test_a_time_is_compact_with_the_full_utc_time_on_hover() -> None:
    when = datetime.now(UTC) - timedelta(minutes=3, seconds=5)
    ago = str(render_time(when, fmt="ago"))
    shape = (
        r'<time datetime="[^"]+Z" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" '
        r'data-fmt="ago" class="ago bare" data-ago="[^"]+">3 min ago</time>'
    )
    assert re.fullmatch(shape, ago), ago
    iso = str(render_time(datetime(2026, 11, 29, 6, 45, tzinfo=UTC), fmt="iso"))
    assert ">2026-11-29 06:45:00</time>" in iso
    assert 'title="2026-11-29 06:45:00 UTC"' in iso
    assert "ago" not in iso
    full = str(render_time(datetime(2026, 11, 29, 6, 45, tzinfo=UTC)))
    assert ">2026-11-29 06:45:00 UTC</time>" in full
    assert 'class="ago"' in full
    assert str(render_time(None)) == "—"


async def test_status_chips_count_the_executions_of_all_jobs_or_of_the_one_picked(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await make_job(client)
    other = await make_job(client, displayName="Other")
    job_id, other_id = UUID(str(job["id"])), UUID(str(other["id"]))
    await finished_occurrence(runtime, job_id)
    await finished_occurrence(runtime, other_id)
    for status, hours in ((OccurrenceStatus.COMPLETED, 1), (OccurrenceStatus.FAILED, 2)):
        stored = await runtime.store.get_job(job_id)
        at = datetime(2026, 1, 1, hours, tzinfo=UTC)
        made = new_occurrence(stored, at, at, PlanSettings())
        await runtime.store.insert_occurrences([made])
        await runtime.store.apply_status(
            [StatusRecord(occurrence_id=made.id, status=status, timestamp=at)]
        )

    def counts(html: str) -> dict[str, str]:
        found = re.findall(r'data-status="([^"]+)"[^>]*>([\d,]+)</span>', html)
        return dict(found)

    every = counts((await client.get("/executions")).text)
    assert every["any"] == "4"
    assert every["Completed"] == "3"
    assert every["Failed"] == "1"
    assert every["Queued"] == "0"
    mine = counts((await client.get("/executions", params={"jobId": str(job_id)})).text)
    assert (mine["any"], mine["Completed"], mine["Failed"]) == ("3", "2", "1")


async def test_rows_of_runs_show_iso_and_relative_times(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await make_job(client)
    await finished_occurrence(runtime, UUID(str(job["id"])))
    html = (await client.get("/executions")).text
    assert '<table class="runs">' in html
    assert ">2026-01-01 00:00:00</time>" in html  # scheduled for: ISO, compared down the column
    assert 'data-fmt="ago" class="ago bare"' in html  # started: how long ago
    assert 'href="/graph-runs"' in html  # Graph runs in the navigation


async def test_operators_get_row_actions_on_jobs_and_viewers_none(
    anonymous: httpx.AsyncClient,
) -> None:
    operator = await sign_in(anonymous, "operator")
    made = await anonymous.post(
        "/api/v1/jobs",
        json={"jobType": "report", "cronExpression": "0 0 1 1 *", "displayName": "Yearly"},
        headers=jar(operator) | {"X-Rota-CSRF": "1"},
    )
    assert made.status_code == 201, made.text
    job_id = made.json()["id"]
    html = (await anonymous.get("/jobs", headers=jar(operator))).text
    for testid, api in (
        ("row-run", f"POST /api/v1/jobs/{job_id}/trigger"),
        ("row-pause", f"POST /api/v1/jobs/{job_id}/pause"),
        ("row-disable", f"PATCH /api/v1/jobs/{job_id}"),
    ):
        assert re.search(f'data-testid="{testid}"[^>]*data-api="{re.escape(api)}"', html), testid
    viewer = await sign_in(anonymous, "viewer")
    html = (await anonymous.get("/jobs", headers=jar(viewer))).text
    assert "Yearly" in html
    assert "row-run" not in html
    assert "row-pause" not in html
    assert "data-api=" not in html


async def test_users_page_offers_role_change_and_password_reset_for_others(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    made = await client.post(
        "/api/v1/users",
        json={"username": "dora", "password": "a-long-enough-pass-2026", "role": "Viewer"},
    )
    assert made.status_code == 201, made.text
    dora = made.json()["id"]
    html = (await client.get("/users")).text
    assert html.count(f'data-api-form="PATCH /api/v1/users/{dora}"') == 2
    assert 'data-testid="user-role"' in html
    assert 'data-testid="user-password"' in html
    # the forms send what the API takes: a role, a password
    changed = await client.patch(f"/api/v1/users/{dora}", json={"role": "Operator"})
    assert changed.status_code == 200
    assert changed.json()["role"] == "Operator"
    reset = await client.patch(f"/api/v1/users/{dora}", json={"password": "another-long-pass-2026"})
    assert reset.status_code == 200, reset.text


async def test_a_generated_secret_has_its_place_on_the_notifications_page(
    client: httpx.AsyncClient,
) -> None:
    html = (await client.get("/notifications")).text
    assert 'data-show-key="#new-secret" data-show-field="secret"' in html
    assert 'id="new-secret"' in html
    assert "shown this once" in html
    created = await client.post(
        SUBS,
        json={"name": "hook", "events": ["occurrence.failed"], "channel": "webhook",
              "url": "https://hooks.example.org/x"},
    )  # fmt: skip
    assert created.status_code == 201
    assert len(created.json()["secret"]) >= 32  # what the page shows once
    listed = (await client.get(SUBS)).text
    assert created.json()["secret"] not in listed


async def test_a_test_notification_says_it_is_a_test(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    created = await client.post(
        SUBS,
        json={"name": "hook", "events": ["occurrence.failed"], "channel": "webhook",
              "url": "https://hooks.example.org/x"},
    )  # fmt: skip
    queued = await client.post(f"{SUBS}/{created.json()['id']}/test")
    assert queued.status_code == 202
    [delivery] = await runtime.store.claim_deliveries("test", runtime.jobs.now(), 30, 10)
    body = delivery.payload
    assert body["test"] is True
    assert body["summary"].startswith("Test notification sent by ")
    assert "not a real occurrence.failed" in body["summary"]
    subject, text = render_email(body)
    assert subject.startswith("[Rota] TEST occurrence.failed: Test notification")
    assert "Test notification" in text


def test_a_real_notice_is_not_marked_as_a_test() -> None:
    subject, _ = render_email({"event": "occurrence.failed", "summary": "x", "test": False})
    assert subject == "[Rota] occurrence.failed: x"
