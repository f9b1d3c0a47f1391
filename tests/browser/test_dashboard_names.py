"""The dashboard speaks in job names, in Chromium: rows name their job, the job picker, the
status chips, relative times, flash links, the overview's ranges and charts, the workers page
with a schema open, an auto-disabled job edited, and the audit log. One ``rota dev`` for the
module (the conftest's ``server``); screenshots in the browser tests' artifacts."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.conftest import Server


def _job(server: Server, **fields: Any) -> dict[str, Any]:
    with server.api() as api:
        created = api.post("/jobs", json=fields)
        assert created.status_code == 201, created.text
        job: dict[str, Any] = created.json()
        return job


def _once(server: Server, job_type: str, name: str) -> dict[str, Any]:
    """A one-time job due now, once its execution has finished."""
    job = _job(server, jobType=job_type, displayName=name, executeAt=datetime.now(UTC).isoformat())

    def finished() -> bool:
        with server.api() as api:
            items = api.get("/occurrences", params={"jobId": job["id"]}).json()["items"]
        return bool(items) and items[0]["statusName"] in ("Completed", "Failed")

    server.wait_for(f"{name} to finish", finished)
    return job


def test_rows_name_their_job_and_the_picker_filters_by_name(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    billing = _once(server, "browser.fail", "Nightly billing")
    other = _once(server, "browser.fail", "Hourly cleanup")
    page.goto(f"{server.url}/executions")
    row = page.locator("[data-testid=occurrence-row]", has_text="Nightly billing").first
    expect(row.get_by_test_id("job-name")).to_have_attribute("href", f"/jobs/{billing['id']}")
    expect(row.locator(".job-type")).to_have_text("browser.fail")  # the type, secondary
    expect(row.locator(".ago").first).to_have_text(re.compile(r"^(just now|\d+ s ago)$"))

    chips = page.get_by_test_id("status-filter")
    chips.get_by_role("link", name=re.compile(r"^Failed \d")).click()  # "Failed", its count
    chosen = page.locator("[data-testid=status-filter] [aria-current=true]")
    expect(chosen).to_have_text(re.compile(r"^Failed\s*\d+$"))
    expect(page.get_by_test_id("filter-summary")).to_contain_text("Showing Failed executions")
    page.screenshot(path=artifacts / "names-executions.png", full_page=True)

    page.goto(f"{server.url}/failed")
    picker = page.get_by_label("Job", exact=True)
    picker.fill("Nightly bil")  # the list offers the jobs named so
    expect(page.locator(f'#job-options option[data-id="{billing["id"]}"]')).to_have_count(1)
    picker.fill("Nightly billing")  # as picking it from the list does
    expect(page.locator("input[name=jobId]")).to_have_value(billing["id"])
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(f"jobId={billing['id']}"))
    expect(page.get_by_label("Job", exact=True)).to_have_value("Nightly billing")
    rows = page.locator("[data-testid=failed-row]")
    expect(rows.first).to_contain_text("Nightly billing")
    expect(rows.filter(has_text="Hourly cleanup")).to_have_count(0)
    page.screenshot(path=artifacts / "names-failed-picker.png", full_page=True)
    page.goto(f"{server.url}/executions?job=hourly+cleanup")  # a name typed, not picked
    expect(page.locator("[data-testid=occurrence-row]")).to_have_count(1)
    expect(page.get_by_test_id("filter-summary")).to_contain_text("of Hourly cleanup")
    summary_link = page.get_by_test_id("filter-summary").get_by_role("link", name="Hourly cleanup")
    expect(summary_link).to_have_attribute("href", f"/jobs/{other['id']}")


def test_one_run_charts_and_a_flash_links_to_the_run_it_queued(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    job = _once(server, "browser.tick", "Tick once")
    page.goto(f"{server.url}/jobs/{job['id']}")
    low, high, run, fits = _plotted(page, "#job-occurrences .chart")
    assert low < run < high, "the one run is not inside the time axis"
    assert high - low <= 3600, f"one run on a time axis of {high - low} s"
    assert fits, "a y-axis label is cut"
    page.screenshot(path=artifacts / "names-one-point.png", full_page=True)

    page.get_by_test_id("trigger").click()
    link = page.get_by_test_id("flash-link")
    expect(link).to_have_text("Open the execution")
    link.click()
    expect(page).to_have_url(re.compile(r"/executions/[0-9a-f-]{36}$"))
    expect(page.locator(".crumbs")).to_contain_text("Tick once")
    expect(page.locator("#occurrence-summary")).to_contain_text("Tick once")


def _plotted(page: Page, selector: str) -> list[Any]:
    """The first chart ``selector`` finds, once it is drawn: its time axis' min and max, its
    first point's time, and whether every y-axis label fits in the axis' width (tick and gap
    included). Read in one evaluation of one element: a live part refreshed meanwhile (the
    event stream's "ready") brings a new chart element, drawn only when its data arrives."""
    found = page.wait_for_function(
        """selector => {
            const el = document.querySelector(selector), u = el && el._plot;
            if (!u) return null;
            const axis = u.axes[1];
            const ctx = document.createElement("canvas").getContext("2d");
            ctx.font = "12px system-ui, sans-serif";
            const widest = Math.max(...axis._values.map(v => ctx.measureText(String(v)).width));
            const fits = axis._size >= widest + axis.ticks.size + axis.gap;
            return [u.scales.x.min, u.scales.x.max, u.data[0][0], fits];
        }""",
        arg=selector,
    )
    facts: list[Any] = found.json_value()
    return facts


def test_overview_ranges_and_charts(admin_page: Page, server: Server, artifacts: Path) -> None:
    page = admin_page
    _once(server, "browser.fail", "Failing for the overview")
    page.goto(f"{server.url}/")
    ranges = page.get_by_test_id("ranges")
    expect(ranges.locator("[aria-current=true]")).to_have_text("24 h")
    with page.expect_response(lambda r: "series.json?range=7d" in r.url):
        ranges.get_by_role("link", name="7 d").click()
    expect(page).to_have_url(re.compile(r"range=7d"))
    expect(ranges.locator("[aria-current=true]")).to_have_text("7 d")
    expect(page.get_by_text("Completed per hour")).to_be_visible()
    *_, fits = _plotted(page, ".chart[data-series-url]")
    assert fits, "a y-axis label is cut"
    expect(page.get_by_test_id("latest-failures")).to_contain_text("Failing for the overview")
    page.screenshot(path=artifacts / "names-overview-7d.png", full_page=True)


def test_the_workers_page_keeps_its_layout_with_a_schema_open(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    # the live part is fetched again once the event stream is in place: measured after that
    with page.expect_response(lambda r: "fragment=workers_table" in r.url):
        page.goto(f"{server.url}/workers")
    card = page.locator("#workers-table section.card").first
    expect(card).to_contain_text("browser.typed")
    width = "e => e.getBoundingClientRect().width"
    before = card.evaluate(width)
    card.locator("li", has_text="browser.typed").get_by_text("data schema").click()
    expect(card.locator("details[open] pre")).to_be_visible()
    after = card.evaluate(width)  # an open schema keeps the part from being replaced
    assert abs(before - after) < 1
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
    page.screenshot(path=artifacts / "names-workers-schema.png", full_page=True)


def test_an_auto_disabled_job_keeps_its_reason_through_an_edit(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    job = _job(
        server,
        jobType="browser.fail",
        displayName="Flaky feed",
        cronExpression="* * * * * *",
        autoDisableThreshold=1,
        autoDisableCooldownSeconds=3600,
    )

    def reason() -> str | None:
        with server.api() as api:
            found: str | None = api.get(f"/jobs/{job['id']}").json()["autoDisable"][
                "disabledReason"
            ]
            return found

    first = server.wait_for("the job to disable itself", reason)
    page.goto(f"{server.url}/jobs/{job['id']}/edit")
    expect(page.get_by_test_id("auto-disabled")).to_contain_text(first)
    page.get_by_label("Name").fill("Flaky feed, renamed")
    page.get_by_label("Priority").select_option("High")
    page.get_by_label("Missed fires").select_option(label="skip missed fires")
    page.get_by_test_id("save").click()
    expect(page.get_by_role("heading", name="Flaky feed, renamed")).to_be_visible()
    expect(page.locator("#job-summary")).to_contain_text("Disabled automatically")
    expect(page.locator("#job-summary")).to_contain_text("skip missed fires")  # not "skip"
    expect(page.locator(".versions")).to_contain_text("priority")  # a setting: a version
    expect(page.get_by_test_id("flash-link")).to_have_count(0)  # saved: nothing created
    assert reason() == first
    page.screenshot(path=artifacts / "names-auto-disabled-edited.png", full_page=True)
    page.get_by_role("link", name="Edit").click()
    page.get_by_label("Cron expression").fill("0 0 1 1 *")  # not due again during the test
    page.get_by_label("Active").check()
    page.get_by_test_id("save").click()
    expect(page.locator("#job-summary")).not_to_contain_text("Disabled automatically")
    expect(page.locator("#job-summary")).to_contain_text("active")
    assert reason() is None


def test_the_audit_log(admin_page: Page, server: Server, artifacts: Path) -> None:
    page = admin_page
    job = _job(server, jobType="browser.tick", displayName="Audited", cronExpression="0 0 1 1 *")
    page.goto(f"{server.url}/audit")
    expect(page.get_by_role("heading", name="Audit log")).to_be_visible()
    page.get_by_label("Action").fill("job.created")
    page.get_by_role("button", name="Filter").click()
    row = page.locator("[data-testid=audit-row]", has=page.locator(f'a[href="/jobs/{job["id"]}"]'))
    expect(row).to_contain_text("job created")
    expect(row).to_contain_text("admin")
    expect(row.get_by_test_id("audit-name")).to_have_text("Audited")  # the name by the id
    row.get_by_text("before / after").click()
    expect(row.locator("pre")).to_contain_text("Audited")
    expect(page.locator("[data-testid=audit-row]").filter(has_text="job updated")).to_have_count(0)
    page.screenshot(path=artifacts / "names-audit.png", full_page=True)
