"""The dashboard in Chromium: sign in, create a job, watch it run, steer executions."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import ADMIN, OPERATOR, VIEWER, VIEWPORT, Server, sign_in

MARK = "window.__rotaNoReload = 42"
STILL_MARKED = "window.__rotaNoReload === 42"


def _one_time_job(server: Server, job_type: str, name: str) -> dict[str, Any]:
    """A one-time job due now; returns its first occurrence once it exists."""
    with server.api() as api:
        created = api.post(
            "/jobs",
            json={
                "jobType": job_type,
                "displayName": name,
                "executeAt": datetime.now(UTC).isoformat(),
            },
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]

        def first() -> dict[str, Any] | None:
            items: list[dict[str, Any]] = api.get("/occurrences", params={"jobId": job_id}).json()[
                "items"
            ]
            return items[0] if items else None

        occurrence: dict[str, Any] = server.wait_for(f"an occurrence of {name}", first)
        return occurrence


def _cron_job(server: Server, name: str, cron: str) -> str:
    """A cron job of ``browser.tick`` made through the API; its id."""
    with server.api() as api:
        created = api.post(
            "/jobs", json={"jobType": "browser.tick", "displayName": name, "cronExpression": cron}
        )
        assert created.status_code == 201, created.text
        job_id: str = created.json()["id"]
        return job_id


def _status_of(server: Server, occurrence_id: str) -> str:
    with server.api() as api:
        name: str = api.get(f"/occurrences/{occurrence_id}").json()["statusName"]
        return name


def test_sign_in_shows_the_overview(page: Page, server: Server, artifacts: Path) -> None:
    sign_in(page, server, ADMIN)
    expect(page.get_by_text("Executions", exact=True).first).to_be_visible()
    expect(page.locator(".health")).to_contain_text("store")
    page.screenshot(path=artifacts / "overview.png", full_page=True)
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{server.url}/login")
    page.goto(f"{server.url}/jobs")
    expect(page).to_have_url(f"{server.url}/login?next=/jobs")


def test_wrong_password_is_refused(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/login")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Wrong username or password")


def test_create_a_cron_job_and_watch_its_executions_arrive(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    page.goto(f"{server.url}/jobs")
    page.get_by_test_id("new-job").click()
    page.get_by_label("Name").fill("Browser tick every second")
    page.get_by_label("Job type").fill("browser.tick")
    page.get_by_label("Cron expression").fill("* * * * * *")
    expect(page.get_by_test_id("preview").locator("li")).to_have_count(8)
    page.get_by_label("Cron expression").fill("0 30 2 * * *")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    expect(page.get_by_test_id("preview")).to_contain_text("CET")
    page.get_by_label("from").fill("2026-03-28")  # across the spring-forward
    expect(page.get_by_test_id("preview")).to_contain_text("Sun 2026-03-29 03:00:00 CEST")
    page.get_by_label("from").fill("")
    page.get_by_label("Cron expression").fill("61 * * * *")
    expect(page.get_by_test_id("preview-error")).to_be_visible()
    page.get_by_label("Cron expression").fill("* * * * * *")
    page.get_by_label("Time zone").fill("UTC")
    page.get_by_label("Job data (JSON)").fill('{"kind": ')
    expect(page.locator("#jobData-check")).to_contain_text("Not valid JSON")
    page.get_by_label("Job type").fill("browser.typed")
    page.get_by_label("Job data (JSON)").fill('{"title": "x", "copies": "two"}')
    expect(page.locator("#jobData-check")).to_contain_text("jobData.copies should be integer")
    page.get_by_label("Job data (JSON)").fill('{"copies": 2}')
    expect(page.locator("#jobData-check")).to_contain_text("jobData.title is required")
    page.get_by_label("Job data (JSON)").fill('{"title": "x", "copies": 2}')
    expect(page.locator("#jobData-check")).to_contain_text("Matches the data schema")
    page.get_by_label("Job type").fill("browser.tick")
    page.get_by_label("Job data (JSON)").fill('{"kind": "browser"}')
    page.screenshot(path=artifacts / "job-form.png", full_page=True)
    page.get_by_test_id("save").click()
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}$"))
    expect(page.get_by_role("heading", name="Browser tick every second")).to_be_visible()
    expect(page.locator("#live-state")).to_have_attribute("data-state", "on")  # events stream
    page.evaluate(MARK)
    rows = page.locator("#job-occurrences [data-testid=occurrence-row]")
    expect(rows.nth(2)).to_be_visible()  # three executions appeared on the open page
    expect(rows.first).to_contain_text("Completed")
    expect(page.locator("#job-occurrences .chart canvas")).to_have_count(1)  # durations drawn
    assert page.evaluate(STILL_MARKED), "the page was reloaded"
    page.screenshot(path=artifacts / "job.png", full_page=True)
    page.goto(f"{server.url}/jobs?search=Browser+tick")
    expect(page.get_by_role("link", name="Browser tick every second")).to_be_visible()
    page.screenshot(path=artifacts / "jobs.png", full_page=True)
    page.get_by_role("link", name="Browser tick every second").click()
    page.get_by_role("button", name="Disable").click()
    expect(page.locator("#job-summary")).to_contain_text("inactive")
    # Nothing fires after the disable: once the runs sent before it have ended, no event
    # refreshes the summary with anything new (an answer the same as what it shows is not
    # swapped in, and none is while a link of it is pressed).
    rows = page.locator("#job-occurrences [data-testid=occurrence-row]")
    expect(rows.filter(has_text=re.compile("Queued|Running"))).to_have_count(0)
    expect(page.locator("#job-summary.htmx-request")).to_have_count(0)
    page.get_by_role("link", name="Edit").click()
    expect(page.get_by_label("Cron expression")).to_have_value("* * * * * *")
    page.get_by_label("Name").fill("Browser tick, edited")
    page.get_by_label("Cron expression").fill("0 0 12 * * MON")
    page.get_by_label("Active").check()
    page.get_by_test_id("save").click()
    expect(page.get_by_role("heading", name="Browser tick, edited")).to_be_visible()
    expect(page.locator("#job-summary")).to_contain_text("0 0 12 * * MON")
    expect(page.locator(".versions")).to_contain_text("version 1 → 2")
    expect(page.locator(".versions")).to_contain_text("cronExpression")
    job_id = page.url.rsplit("/", 1)[1]
    page.get_by_role("link", name="Edit").click()
    with server.api() as api:  # someone else changes the job while the form is open
        assert api.patch(f"/jobs/{job_id}", json={"description": "theirs"}).status_code == 200
    page.get_by_label("Name").fill("Mine, on a stale copy")
    page.get_by_test_id("save").click()
    expect(page.locator("#form-error")).to_contain_text("Someone changed this job")
    with server.api() as api:
        assert api.get(f"/jobs/{job_id}").json()["displayName"] == "Browser tick, edited"


def test_create_an_interval_job_with_bounds_through_the_form(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    page.goto(f"{server.url}/jobs/new")
    page.get_by_label("Name").fill("Browser every 90 minutes")
    page.get_by_label("Job type").fill("browser.tick")
    page.get_by_test_id("kind-every").check()
    expect(page.get_by_label("Cron expression")).to_be_hidden()
    page.get_by_label("Starts at (UTC, optional)").fill("2031-01-01T00:00:00")
    page.get_by_label("Every", exact=True).fill("90m")
    expect(page.locator("#every-preview li").nth(1)).to_contain_text("2031-01-01 01:30:00")
    page.get_by_label("Ends at (UTC, optional)").fill("2031-02-01T00:00:00")
    page.get_by_label("At most runs").fill("5")
    page.get_by_label("Jitter (s, 0–3600)").fill("10")
    page.get_by_label("Misfire window (s)").fill("120")
    page.get_by_test_id("save").click()
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}$"))
    summary = page.locator("#job-summary")
    expect(summary.get_by_test_id("schedule")).to_contain_text("every 1h30m")
    expect(summary.get_by_test_id("window")).to_contain_text("2031-01-01")
    expect(summary.get_by_test_id("window")).to_contain_text("2031-02-01")
    expect(summary.get_by_test_id("runs")).to_have_text("0 of 5")
    expect(summary.get_by_test_id("jitter")).to_contain_text("up to 10")
    expect(summary.get_by_test_id("misfire-window")).to_contain_text("120")
    page.screenshot(path=artifacts / "job-interval.png", full_page=True)
    job_id = page.url.rsplit("/", 1)[1]
    with server.api() as api:
        job = api.get(f"/jobs/{job_id}").json()
    assert (job["intervalSeconds"], job["nextRunAt"]) == (5400, "2031-01-01T00:00:00Z")
    assert (job["maxRuns"], job["jitterSeconds"], job["misfireWindowSeconds"]) == (5, 10.0, 120.0)
    page.get_by_role("link", name="Edit").click()
    expect(page.get_by_label("Every", exact=True)).to_have_value("1h30m")
    page.get_by_label("Every", exact=True).fill("2h")
    page.get_by_test_id("save").click()
    expect(page.locator("#job-summary").get_by_test_id("schedule")).to_contain_text("every 2h")
    page.goto(f"{server.url}/jobs?search=Browser+every")
    expect(page.locator("main table")).to_contain_text("every 2h")


def test_a_double_submitted_creation_makes_one_job_with_its_overlap_policy(
    admin_page: Page, server: Server
) -> None:
    """The create form sends its own Idempotency-Key: two submits before the first answer
    (a double click) make one job; the overlap policy chosen is the job's."""
    page = admin_page
    page.goto(f"{server.url}/jobs/new")
    page.get_by_label("Name").fill("Browser cancel other")
    page.get_by_label("Job type").fill("browser.tick")
    page.get_by_label("Cron expression").fill("0 3 * * *")
    page.get_by_label("While one runs").select_option("4")
    page.locator("#job-form").evaluate("form => { form.requestSubmit(); form.requestSubmit(); }")
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}$"))
    expect(page.locator("#job-summary")).to_contain_text("cancel the running one for the new fire")
    with server.api() as api:
        named = api.get("/jobs", params={"search": "Browser cancel other"}).json()["items"]
    assert [job["concurrentExecutionPolicy"] for job in named] == [4]


def test_backfill_the_past_fires_of_a_cron_job(admin_page: Page, server: Server) -> None:
    """The job page's backfill form: one execution per past fire of the window, shown on the
    page as they are created."""
    with server.api() as api:
        created = api.post(
            "/jobs",
            json={
                "jobType": "browser.tick",
                "displayName": "Browser hourly",
                "cronExpression": "0 0 * * * *",
                "isActive": False,
            },
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    page = admin_page
    page.goto(f"{server.url}/jobs/{job_id}")
    page.get_by_test_id("backfill").locator("summary").click()
    page.get_by_label("From (UTC)").fill((top - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_label("To (UTC, not in the future)").fill(top.strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_role("button", name="Backfill", exact=True).click()
    rows = page.locator("#job-occurrences [data-testid=occurrence-row]")
    expect(rows).to_have_count(3)
    with server.api() as api:
        runs = api.get("/occurrences", params={"jobId": job_id}).json()["items"]
    assert sorted(r["scheduledFor"] for r in runs) == [
        (top - timedelta(hours=n)).isoformat().replace("+00:00", "Z") for n in (2, 1, 0)
    ]
    assert {r["triggerReason"] for r in runs} == {"backfill from the dashboard"}


def test_pause_a_job_with_a_note_and_resume_it(admin_page: Page, server: Server) -> None:
    """The job page's pause form: the banner shows the note; Resume ends the pause."""
    job_id = _cron_job(server, "Browser paused", "0 0 * * *")
    page = admin_page
    page.goto(f"{server.url}/jobs/{job_id}")
    expect(page.get_by_test_id("pause-banner")).to_have_count(0)
    # its next fires (daily at midnight UTC), none skipped; the values its runs get, sourced
    fires = page.get_by_test_id("upcoming-fire")
    expect(fires).to_have_count(8)
    expect(fires.first).to_contain_text("00:00:00")
    expect(fires.first).not_to_contain_text("skipped")
    expect(page.get_by_test_id("effective-retries")).to_contain_text("default)")
    expect(page.get_by_test_id("runs")).to_have_count(0)  # no run limit: no "runs planned"
    page.get_by_test_id("pause").locator("summary").click()
    page.get_by_label("Note (why; shown on the job and each fire skipped)").fill(
        "db migration tonight"
    )
    page.get_by_role("button", name="Pause", exact=True).click()
    banner = page.get_by_test_id("pause-banner")
    expect(banner).to_contain_text("db migration tonight")
    expect(banner).to_contain_text("until resumed")
    expect(page.get_by_test_id("paused-badge")).to_be_visible()
    expect(fires.first).to_contain_text("skipped: paused")
    with server.api() as api:
        job = api.get(f"/jobs/{job_id}").json()
    assert (job["paused"], job["pauseNote"], job["isActive"]) == (
        True,
        "db migration tonight",
        True,
    )
    page.get_by_test_id("resume").click()
    expect(page.get_by_test_id("pause-banner")).to_have_count(0)
    with server.api() as api:
        assert api.get(f"/jobs/{job_id}").json()["paused"] is False


def test_log_lines_arrive_live_and_a_running_execution_is_cancelled(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    occurrence = _one_time_job(server, "browser.slow", "Slow browser job")
    server.wait_for("Running", lambda: _status_of(server, occurrence["id"]) == "Running")
    page.goto(f"{server.url}/executions/{occurrence['id']}")
    page.evaluate(MARK)
    lines = page.get_by_test_id("log").locator("li")
    seen = lines.count()
    expect(lines.nth(seen + 2)).to_be_visible()  # three more lines arrived without a reload
    expect(lines.last).to_contain_text("step")
    assert page.evaluate(STILL_MARKED), "the page was reloaded"
    page.screenshot(path=artifacts / "execution-running.png", full_page=True)
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("cancel").click()
    expect(page.locator("#occurrence-summary .status-line")).to_contain_text("Cancelled")
    expect(page.get_by_test_id("cancel")).to_have_count(0)
    assert _status_of(server, occurrence["id"]) == "Cancelled"
    page.goto(f"{server.url}/executions")
    expect(page.locator("[data-testid=occurrence-row]").first).to_be_visible()
    page.screenshot(path=artifacts / "executions.png", full_page=True)


def test_resolve_a_failed_execution(admin_page: Page, server: Server, artifacts: Path) -> None:
    page = admin_page
    occurrence = _one_time_job(server, "browser.fail", "Failing browser job")

    def record() -> dict[str, Any] | None:
        with server.api() as api:
            items = api.get("/failed-occurrences", params={"jobId": occurrence["jobId"]}).json()
        found: list[dict[str, Any]] = items["items"]
        return found[0] if found else None

    failed = server.wait_for("a failed-execution record", record)
    page.goto(f"{server.url}/executions/{occurrence['id']}")
    expect(page.get_by_test_id("exception")).to_contain_text("fails on purpose")
    expect(page.locator("#occurrence-summary")).to_contain_text("Dead-lettered (permanent)")
    expect(page.get_by_test_id("retry-occurrence")).to_be_visible()
    page.goto(f"{server.url}/failed?jobId={occurrence['jobId']}")
    row = page.locator("[data-testid=failed-row]").first
    expect(row).to_contain_text("permanent")
    page.screenshot(path=artifacts / "failed.png", full_page=True)
    row.get_by_label("Action").fill("ignored")
    row.get_by_label("Note").fill("checked in the browser test")
    row.get_by_label("Note").press("Enter")  # submitted from the keyboard
    expect(page.get_by_text("Nothing here.")).to_be_visible()
    with server.api() as api:
        stored = api.get(f"/failed-occurrences/{failed['id']}").json()
    assert stored["resolved"] is True
    assert stored["resolutionAction"] == "ignored"
    assert stored["resolutionNote"] == "checked in the browser test"


def test_bulk_actions_on_failed_executions(admin_page: Page, server: Server) -> None:
    page = admin_page
    jobs = [_one_time_job(server, "browser.fail", f"Failing job {i}")["jobId"] for i in (1, 2)]

    def records(resolved: str) -> list[dict[str, Any]]:
        with server.api() as api:
            items = api.get("/failed-occurrences", params={"resolved": resolved}).json()["items"]
        return [r for r in items if r["jobId"] in jobs]

    server.wait_for("two failed-execution records", lambda: len(records("false")) == 2)
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.goto(f"{server.url}/failed")
    for job_id in jobs:
        row = page.locator(
            "[data-testid=failed-row]", has=page.locator(f'a[href="/jobs/{job_id}"]')
        )
        row.locator("input[name=select]").check()
    bulk = page.get_by_test_id("bulk")
    bulk.get_by_label("Resolution").fill("fixed")
    bulk.get_by_label("Note").fill("both at once")
    bulk.get_by_test_id("bulk-apply").click()
    expect(page.locator("#flash")).to_contain_text("Resolve: 2 done.")
    assert asked == ["Resolve 2 failed executions?"]  # counted and confirmed first
    assert records("false") == []
    assert {(r["resolutionAction"], r["resolutionNote"]) for r in records("true")} == {
        ("fixed", "both at once")
    }
    for job_id in jobs:
        expect(page.locator(f'[data-testid=failed-row] a[href="/jobs/{job_id}"]')).to_have_count(0)

    # everything the filter matches (the resolved records of one job): retried, after a count
    page.goto(f"{server.url}/failed?resolved=yes&jobId={jobs[0]}")
    bulk = page.get_by_test_id("bulk")
    bulk.get_by_test_id("bulk-action").select_option("reopen")
    bulk.get_by_test_id("bulk-all").check()
    bulk.get_by_test_id("bulk-apply").click()
    expect(page.locator("#flash")).to_contain_text("Reopen: 1 done.")
    assert asked[-1] == "Reopen 1 failed executions?"
    assert [r["jobId"] for r in records("false")] == [jobs[0]]


def test_bulk_cancel_of_the_executions_a_filter_matches(admin_page: Page, server: Server) -> None:
    page = admin_page
    runs = [_one_time_job(server, "browser.slow", f"Slow job {i}") for i in (1, 2)]
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.goto(f"{server.url}/executions?jobId={runs[0]['jobId']}")
    bulk = page.get_by_test_id("bulk")
    bulk.get_by_label("Reason").fill("from the browser")
    bulk.get_by_test_id("bulk-all").check()
    bulk.get_by_test_id("bulk-apply").click()
    expect(page.locator("#flash")).to_contain_text("Cancel: 1 done.")
    assert asked == ["Cancel 1 executions?"]

    def status(run: dict[str, Any]) -> str:
        with server.api() as api:
            return str(api.get(f"/occurrences/{run['id']}").json()["statusName"])

    server.wait_for("the filtered run cancelled", lambda: status(runs[0]) == "Cancelled")
    assert status(runs[1]) in ("Queued", "Running")  # not in the filter
    # the other by selection, with the page unfiltered
    page.goto(f"{server.url}/executions")
    page.locator(f'input[name=select][value="{runs[1]["id"]}"]').check()
    page.get_by_test_id("bulk-apply").click()
    expect(page.locator("#flash")).to_contain_text("Cancel: 1 done.")
    server.wait_for("the selected run cancelled", lambda: status(runs[1]) == "Cancelled")


def test_every_page_renders(admin_page: Page, server: Server, artifacts: Path) -> None:
    page = admin_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    for path, heading in (
        ("/", "Overview"),
        ("/jobs", "Jobs"),
        ("/executions", "Executions"),
        ("/failed", "Failed executions"),
        ("/workers", "Workers"),
        ("/admin", "Admin"),
        ("/users", "Users"),
        ("/notifications", "Notifications"),
    ):
        page.goto(f"{server.url}{path}")
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        if path == "/workers":
            expect(page.locator("#workers-table")).to_contain_text("browser.slow")
        name = path.strip("/") or "overview"
        page.screenshot(path=artifacts / f"page-{name}.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server.url}/executions")
    page.screenshot(path=artifacts / "phone-executions.png", full_page=True)
    assert errors == []


def test_a_viewer_sees_no_actions_and_a_forged_action_is_refused(
    page: Page, server: Server, artifacts: Path
) -> None:
    with server.api() as api:
        job = api.post(
            "/jobs", json={"jobType": "browser.tick", "cronExpression": "0 0 1 1 *"}
        ).json()
    sign_in(page, server, VIEWER)
    page.goto(f"{server.url}/jobs/{job['id']}")
    expect(page.get_by_role("heading", name="browser.tick")).to_be_visible()
    expect(page.get_by_test_id("trigger")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.goto(f"{server.url}/jobs")
    expect(page.get_by_test_id("new-job")).to_have_count(0)
    page.screenshot(path=artifacts / "viewer-jobs.png", full_page=True)
    forged = page.evaluate(
        """async (id) => (await fetch(`/api/v1/jobs/${id}/trigger`, {
            method: "POST", headers: {"X-Rota-CSRF": "1", "Content-Type": "application/json"},
            body: "{}"})).status""",
        job["id"],
    )
    assert forged == 403
    with server.api() as api:
        assert api.get("/occurrences", params={"jobId": job["id"]}).json()["items"] == []


def test_a_viewer_sees_no_job_data_and_no_job_form(page: Page, server: Server) -> None:
    with server.api() as api:
        job = api.post(
            "/jobs",
            json={
                "jobType": "browser.tick",
                "cronExpression": "0 0 1 1 *",
                "jobData": {"token": "plain-token-browser-42"},
            },
        ).json()
        occurrence = api.post(f"/jobs/{job['id']}/trigger", json={}).json()
    sign_in(page, server, VIEWER)
    page.goto(f"{server.url}/executions/{occurrence['id']}")
    expect(page.get_by_test_id("job-data-hidden")).to_contain_text("Hidden: your role (Viewer)")
    assert "plain-token-browser-42" not in page.content()
    response = page.goto(f"{server.url}/jobs/{job['id']}/edit")
    assert response is not None
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    assert "plain-token-browser-42" not in page.content()


def test_admin_stops_and_resumes_dispatching(admin_page: Page, server: Server) -> None:
    page = admin_page
    page.goto(f"{server.url}/admin")
    expect(page.get_by_role("heading", name="Buckets (16)")).to_be_visible()
    with server.api() as api:
        has_control = api.get("/admin/dispatcher").status_code == 200
    if not has_control:
        expect(
            page.get_by_text("Not available: this server's API has no dispatcher")
        ).to_be_visible()
        return
    page.get_by_label("Reason").fill("maintenance from the browser test")
    page.get_by_role("button", name="Stop dispatching").click()
    expect(page.get_by_test_id("dispatcher-state")).to_contain_text(
        "stopped — maintenance from the browser test"
    )
    # every page says so, with who and why; the overview's health too
    for path in ("/jobs", "/"):
        page.goto(f"{server.url}{path}")
        banner = page.get_by_test_id("dispatch-stopped")
        expect(banner).to_contain_text("Dispatching is stopped by admin")
        expect(banner).to_contain_text("maintenance from the browser test")
    expect(page.get_by_test_id("health-warning")).to_contain_text("dispatching: stopped by admin")
    with server.api() as api:
        assert api.get("/health/ready").json()["warnings"] == ["dispatching stopped"]
    page.goto(f"{server.url}/admin")
    page.get_by_role("button", name="Resume dispatching").click()
    expect(page.get_by_test_id("dispatcher-state")).to_contain_text("dispatching")
    expect(page.get_by_test_id("dispatch-stopped")).to_have_count(0)
    with server.api() as api:
        assert api.get("/admin/dispatcher").json()["paused"] is False
        assert api.get("/health/ready").json()["warnings"] == []


def test_an_admin_manages_users(admin_page: Page, server: Server, artifacts: Path) -> None:
    page = admin_page
    page.goto(f"{server.url}/users")
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("Password", exact=True).fill("too short")
    page.get_by_test_id("create-user").click()
    expect(page.locator("#form-error")).to_contain_text("password")
    page.get_by_label("Password", exact=True).fill("a-long-enough-password-2026")
    page.get_by_label("Role", exact=True).select_option("Operator")
    page.get_by_test_id("create-user").click()
    row = page.locator('[data-testid=user-row][data-user="newcomer"]')
    expect(row).to_contain_text("Operator")
    expect(row).to_contain_text("active")
    page.screenshot(path=artifacts / "users.png", full_page=True)
    row.get_by_role("button", name="Deactivate").click()
    expect(row).to_contain_text("inactive")
    page.on("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)
    with server.api() as api:
        names = [u["username"] for u in api.get("/users").json()["items"]]
    assert "newcomer" not in names


def test_an_admin_creates_an_api_key_seen_once_and_revokes_it(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    page.goto(f"{server.url}/users")
    page.get_by_label("Key name").fill("browser-svc")
    page.get_by_label("Key role").select_option("Operator")
    page.get_by_label("Tags (scope, optional)").fill("billing, reports")
    page.get_by_test_id("create-key").click()
    shown = page.get_by_test_id("new-key-value")
    expect(shown).to_have_text(re.compile(r"^rota_[0-9a-f]{32}_[A-Za-z0-9_-]{43}$"))
    key = shown.inner_text()
    page.screenshot(path=artifacts / "users-new-key.png", full_page=True)
    # the key works for the API, as its role
    with server.api() as api:
        answer = api.get("/jobs", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
    page.get_by_test_id("new-key-done").click()
    row = page.locator('[data-testid=key-row][data-key="browser-svc"]')
    expect(row).to_contain_text("Operator")
    expect(row).to_contain_text("tags: billing, reports")
    expect(row).to_contain_text("active")
    assert key not in page.content()  # shown once: never again
    page.on("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    expect(row).to_contain_text("revoked")
    with server.api() as api:
        answer = api.get("/jobs", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 401


def test_an_expired_session_is_renewed_once_for_parallel_pages_and_parts(
    browser: Browser, server: Server
) -> None:
    """Two tabs load at once after the access token expired, then a live part of a page asks
    again: each renews the session without a second use of a refresh token (which would end
    the login), and the user stays signed in."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        # Only the pages under test stay open: any other open page's live parts (its poll,
        # the event stream's "ready") could renew the session first, shared by the context.
        signing_in = context.new_page()
        sign_in(signing_in, server, OPERATOR)
        signing_in.close()
        context.clear_cookies(name="rota_access")  # the access token expired
        jobs, failed = context.new_page(), context.new_page()
        jobs.goto(f"{server.url}/jobs", wait_until="commit")
        failed.goto(f"{server.url}/failed", wait_until="commit")
        expect(jobs.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
        expect(failed.get_by_role("heading", name="Failed executions")).to_be_visible()
        expect(jobs).to_have_url(f"{server.url}/jobs")
        expect(failed).to_have_url(f"{server.url}/failed")
        failed.close()

        # on an open page: a live part fetched after the access token expired
        context.clear_cookies(name="rota_access")
        jobs.evaluate(MARK)
        with (
            jobs.expect_response(lambda r: r.url.endswith("/ui/session/refresh")) as renewed,
            jobs.expect_response(lambda r: "fragment=jobs_table" in r.url and r.ok),
        ):
            jobs.evaluate("htmx.trigger(document.querySelector('#jobs-table'), 'rota:refresh')")
        assert renewed.value.status == 204
        assert jobs.evaluate(STILL_MARKED)  # renewed in place: no reload, no sign-in page

        # the login lives on: the refresh token in the browser is the current one
        context.clear_cookies(name="rota_access")
        again = context.new_page()
        again.goto(f"{server.url}/workers")
        expect(again.get_by_test_id("user")).to_contain_text(OPERATOR[0])
        expect(again).to_have_url(f"{server.url}/workers")
    finally:
        context.close()


def test_an_admin_manages_notification_subscriptions(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    page.goto(f"{server.url}/notifications")
    page.get_by_label("Name").fill("browser-hook")
    page.get_by_label("Webhook URL").fill("ftp://nowhere.example/x")
    page.get_by_test_id("create-subscription").click()
    expect(page.locator("#form-error")).to_contain_text("http")
    page.get_by_label("Webhook URL").fill("https://hooks.example.org/rota")
    page.get_by_label("Only jobs tagged").fill("billing")
    page.get_by_test_id("create-subscription").click()
    # no secret given: the one generated is shown once, then the list is reloaded
    expect(page.get_by_test_id("new-secret-value")).not_to_be_empty()
    page.get_by_test_id("new-secret-done").click()
    card = page.locator('[data-testid=subscription][data-name="browser-hook"]')
    expect(card).to_contain_text("tag billing")
    expect(card).to_contain_text("enabled")
    page.screenshot(path=artifacts / "notifications.png", full_page=True)
    card.get_by_role("button", name="Disable").click()
    expect(card).to_contain_text("disabled")
    page.on("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Delete").click()
    expect(card).to_have_count(0)
    with server.api() as api:
        names = [s["name"] for s in api.get("/notifications/subscriptions").json()["items"]]
    assert "browser-hook" not in names


def _offline(page: Page) -> tuple[list[str], list[str]]:
    """Abort every request of ``page`` to a host other than this machine's; returns the lists
    of the aborted URLs and of the page's errors (script errors, console errors such as a
    Content-Security-Policy refusal), filled as the page runs."""
    aborted: list[str] = []
    errors: list[str] = []

    def route(handle: Any) -> None:
        if urlsplit(handle.request.url).hostname in ("127.0.0.1", "localhost", "::1"):
            handle.continue_()
        else:
            aborted.append(handle.request.url)
            handle.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return aborted, errors


def test_the_swagger_ui_renders_from_this_server_alone(
    page: Page, server: Server, artifacts: Path
) -> None:
    aborted, errors = _offline(page)
    page.goto(f"{server.url}/docs")
    jobs = page.locator(
        ".opblock", has=page.locator(".opblock-summary-path[data-path='/api/v1/jobs']")
    )
    expect(jobs.locator(".opblock-summary-method", has_text="POST")).to_be_visible()
    expect(page.get_by_text("Create a job").first).to_be_visible()
    assert page.locator(".opblock").count() > 40  # every operation of the API
    page.screenshot(path=artifacts / "api-docs.png")
    assert aborted == []
    assert errors == []


def test_redoc_renders_from_this_server_alone(page: Page, server: Server, artifacts: Path) -> None:
    aborted, errors = _offline(page)
    page.goto(f"{server.url}/redoc")
    operation = page.get_by_role("heading", name=re.compile(r"create_job_api_v1_jobs_post"))
    expect(operation).to_have_text(re.compile(r"^\s*Create a job\s*$"))
    expect(page.get_by_role("heading", name=re.compile(r"list_jobs_api_v1_jobs_get"))).to_have_text(
        re.compile(r"^\s*List jobs, newest first\s*$")
    )
    assert page.locator("h2").count() > 40  # every operation of the API
    page.screenshot(path=artifacts / "api-redoc.png")
    assert aborted == []
    # ReDoc's footer shows Redocly's logo from their CDN, which no option turns off: the page's
    # Content-Security-Policy refuses it (so it is not even requested) and the image hides.
    assert [e for e in errors if "cdn.redoc.ly/redoc/logo-mini.svg" not in e] == []


def _waiting(server: Server) -> list[str]:
    with server.api() as api:
        return [w["occurrenceId"] for w in api.get("/limits").json()["waiting"]]


def test_an_admin_sets_a_limit_and_a_waiting_execution_shows_it(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    page.goto(f"{server.url}/admin")
    expect(page.get_by_test_id("no-limits")).to_be_visible()
    page.get_by_label("Job type").fill("browser.limited")
    page.get_by_label("Max at once").fill("1")
    page.get_by_role("button", name="Set limit").click()
    row = page.get_by_test_id("limit-row")
    expect(row).to_contain_text("browser.limited")
    first = _one_time_job(server, "browser.limited", "Limited one")
    server.wait_for("Running", lambda: _status_of(server, first["id"]) == "Running")
    second = _one_time_job(server, "browser.limited", "Limited two")
    server.wait_for("the second to wait", lambda: second["id"] in _waiting(server))
    assert _status_of(server, second["id"]) == "Queued"
    page.goto(f"{server.url}/executions/{second['id']}")
    expect(page.get_by_test_id("waiting-for-limit")).to_have_text(
        "waiting for limit browser.limited"
    )
    expect(page.get_by_test_id("log")).to_contain_text("waiting for limit browser.limited")
    page.goto(f"{server.url}/executions?status=Queued")
    expect(page.get_by_test_id("row-waiting")).to_have_count(1)
    page.goto(f"{server.url}/admin")
    waiting = page.get_by_test_id("waiting-entry")  # the job's name, the run's shown id
    expect(waiting).to_contain_text("Limited two: run …" + second["id"][-12:])
    expect(waiting.get_by_role("link", name="Limited two")).to_have_attribute(
        "href", f"/jobs/{second['jobId']}"
    )
    expect(row.locator("td").nth(4)).to_have_text("1")  # running
    expect(row.locator("td").nth(5)).to_have_text("1")  # waiting
    page.screenshot(path=artifacts / "admin-limits.png", full_page=True)
    with server.api() as api:
        api.post(f"/occurrences/{first['id']}/cancel", json={})
    server.wait_for("the second to run", lambda: _status_of(server, second["id"]) == "Running")
    with server.api() as api:
        api.post(f"/occurrences/{second['id']}/cancel", json={})
    page.reload()
    page.on("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(page.get_by_test_id("no-limits")).to_be_visible()


def test_a_graph_run_is_drawn_with_its_statuses(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    """A -> B on success, A -> C on failure: triggering A draws one graph run, B Completed,
    C Skipped with its reason; a node links to its execution, which links back to the run."""
    page = admin_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    with server.api() as api:

        def job(name: str, **more: Any) -> str:
            created = api.post(
                "/jobs", json={"jobType": "browser.tick", "displayName": name} | more
            )
            assert created.status_code == 201, created.text
            job_id: str = created.json()["id"]
            return job_id

        a = job("Graph A")
        job("Graph B", dependsOn=[{"jobId": a}])
        job("Graph C", dependsOn=[{"jobId": a, "on": "failure"}])
        assert api.post(f"/jobs/{a}/trigger", json={}).status_code == 202

        def finished() -> dict[str, Any] | None:
            items = api.get("/graph-runs", params={"jobId": a, "status": "finished"}).json()
            runs: list[dict[str, Any]] = items["items"]
            return runs[0] if runs else None

        run = server.wait_for("the graph run to finish", finished)
    page.goto(f"{server.url}/jobs/{a}")
    expect(page.get_by_test_id("dependencies")).to_contain_text("Graph B")
    page.get_by_test_id("dependencies").get_by_role("link", name="all").click()
    expect(page.get_by_test_id("graph-runs")).to_contain_text("Graph A")
    page.goto(f"{server.url}/graph-runs/{run['id']}")
    expect(page.get_by_test_id("graph-run-status")).to_contain_text("Finished")
    graph = page.get_by_test_id("graph")
    expect(graph).to_be_visible()
    expect(graph.locator("[data-testid=graph-node]")).to_have_count(3)
    expect(graph.locator("[data-job='Graph B']")).to_have_attribute("data-status", "Completed")
    expect(graph.locator("[data-job='Graph C']")).to_have_attribute("data-status", "Skipped")
    expect(graph.locator(".edge[data-rule=failure]")).to_have_count(1)
    expect(page.get_by_test_id("graph-nodes")).to_contain_text(
        "upstream Graph A Completed; needs failure"
    )
    page.screenshot(path=artifacts / "graph-run.png", full_page=True)
    graph.locator("[data-job='Graph B']").click()
    expect(page).to_have_url(re.compile(r"/executions/"))
    expect(page.get_by_test_id("graph-run-link")).to_have_text(run["id"])

    # The job form: a job without a schedule that runs after Graph A.
    page.goto(f"{server.url}/jobs/new")
    page.get_by_label("Name").fill("Graph D")
    page.get_by_label("Job type").fill("browser.tick")
    page.get_by_label("No schedule").check()
    expect(page.get_by_label("Cron expression")).to_be_hidden()
    page.get_by_label("Runs after (JSON)").fill(f'[{{"jobId": "{a}", "on": "completion"}}]')
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("dependencies")).to_contain_text("Graph A")
    expect(page.get_by_test_id("dependencies")).to_contain_text("on completion")
    expect(page.locator("#job-summary")).to_contain_text("runs when triggered")
    assert errors == []


REFRESH_SUMMARY = """() => new Promise((resolve) => {
  const el = document.querySelector("#job-summary");
  el.addEventListener("htmx:afterRequest", () => resolve(true), { once: true });
  htmx.trigger(el, "rota:refresh");
})"""
HEADING_MARKED = "document.querySelector('#job-summary h1').__rotaMark === 7"


def test_a_live_refresh_that_brings_nothing_new_keeps_the_parts_nodes(
    admin_page: Page, server: Server
) -> None:
    """A live part's refresh whose answer is what it shows is not swapped in: its nodes stay
    (a link pressed meanwhile is not replaced between the press and the release); one that
    brings a change replaces them."""
    job_id = _cron_job(server, "Quiet", "0 0 1 1 *")
    with server.api() as api:
        page = admin_page
        page.goto(f"{server.url}/jobs/{job_id}")
        assert page.evaluate(REFRESH_SUMMARY)  # the first answer is swapped in and kept
        page.evaluate("document.querySelector('#job-summary h1').__rotaMark = 7")
        assert page.evaluate(REFRESH_SUMMARY)
        assert page.evaluate(HEADING_MARKED), "an unchanged answer replaced the part's nodes"
        assert api.patch(f"/jobs/{job_id}", json={"displayName": "Quiet, renamed"}).is_success
        expect(page.locator("#job-summary h1")).to_have_text("Quiet, renamed")
        assert not page.evaluate(HEADING_MARKED)


SWAP_OF_RENAMED = """(name) => new Promise((resolve) => {
  document.addEventListener("htmx:beforeSwap", function check(event) {
    if (event.detail.elt.id !== "job-summary") return;
    if (!event.detail.serverResponse.includes(name)) return;
    document.removeEventListener("htmx:beforeSwap", check);
    resolve(event.detail.shouldSwap);
  });
  htmx.trigger(document.querySelector("#job-summary"), "rota:refresh");
})"""


def test_a_live_part_is_not_replaced_while_a_link_of_it_is_pressed(
    admin_page: Page, server: Server
) -> None:
    """A refresh that lands between the press and the release of a link in a live part is
    held back (the click would be lost with the node it started on); the click goes through."""
    job_id = _cron_job(server, "Pressed", "0 0 1 1 *")
    with server.api() as api:
        page = admin_page
        page.goto(f"{server.url}/jobs/{job_id}")
        page.get_by_role("link", name="Edit").hover()  # the pointer on it, once it is stable
        page.mouse.down()
        assert api.patch(f"/jobs/{job_id}", json={"displayName": "Pressed, renamed"}).is_success
        assert page.evaluate(SWAP_OF_RENAMED, "Pressed, renamed") is False
        page.mouse.up()
        expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}/edit$"))
