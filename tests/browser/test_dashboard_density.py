"""A denser, calmer dashboard in Chromium at 1440×900: one line a row with compact times,
counts on the status chips, readable chart axes, Graph runs in the navigation, row actions on
Jobs, role and password on Users, a generated webhook secret shown once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import ADMIN, OPERATOR, Server, sign_in

SCREEN = {"width": 1440, "height": 900}
RUNS = 26
PAGE = 25
"""Rows of a page of executions."""


@pytest.fixture
def wide_admin(browser: Browser, admin_state: Any) -> Iterator[Page]:
    context = browser.new_context(viewport=SCREEN, storage_state=admin_state)
    opened = context.new_page()
    yield opened
    context.close()


def _job(server: Server, **fields: Any) -> dict[str, Any]:
    with server.api() as api:
        created = api.post("/jobs", json=fields)
        assert created.status_code == 201, created.text
        job: dict[str, Any] = created.json()
        return job


def _ran(server: Server, name: str, times: int) -> dict[str, Any]:
    """A job triggered ``times`` times, once all its runs completed."""
    job = _job(server, jobType="browser.tick", displayName=name)
    with server.api() as api:
        for _ in range(times):
            answer = api.post(f"/jobs/{job['id']}/trigger", json={"force": True})
            assert answer.status_code in (200, 201, 202), answer.text

        def done() -> bool:
            page = api.get("/occurrences", params={"jobId": job["id"], "limit": 100}).json()
            items = page["items"]
            return len(items) == times and all(o["statusName"] == "Completed" for o in items)

        server.wait_for(f"{times} completed runs of {name}", done, timeout=60)
    return job


def test_a_screen_holds_25_executions_one_line_each_with_counted_chips(
    wide_admin: Page, server: Server, artifacts: Path
) -> None:
    page = wide_admin
    job = _ran(server, "Dense ticks", RUNS)
    page.goto(f"{server.url}/executions?jobId={job['id']}")
    rows = page.locator("[data-testid=occurrence-row]")
    expect(rows).to_have_count(PAGE)
    # one line a row: every row as tall as the first, and short
    heights = rows.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)")
    assert max(heights) <= 30, f"a row wraps: {max(heights)} px"
    page.screenshot(path=artifacts / "density-executions.png")
    visible = rows.evaluate_all(
        "rs => rs.filter(r => r.getBoundingClientRect().bottom <= window.innerHeight).length"
    )
    assert visible >= 22, f"only {visible} executions on a 1440x900 screen"
    row = rows.first
    scheduled = row.locator("time[data-fmt=iso]")
    expect(scheduled).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"))
    expect(scheduled).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    expect(row.locator("time.ago.bare")).to_have_text(re.compile(r"^(just now|\d+ (s|min) ago)$"))
    # the chips count the executions of the job picked: all of them completed
    chips = page.get_by_test_id("status-filter")
    expect(chips.locator("[data-status=any]")).to_have_text(str(RUNS))
    expect(chips.locator("[data-status=Completed]")).to_have_text(str(RUNS))
    expect(chips.locator("[data-status=Failed]")).to_have_text("0")
    page.screenshot(path=artifacts / "density-executions.png")
    # Graph runs is in the navigation; its table keeps one line a row too
    upstream = _job(server, jobType="browser.tick", displayName="Dense upstream")
    _job(server, jobType="browser.tick", displayName="Dense downstream", dependsOn=[
        {"jobId": upstream["id"]}
    ])  # fmt: skip
    with server.api() as api:
        assert api.post(f"/jobs/{upstream['id']}/trigger", json={}).status_code == 202

        def finished() -> bool:
            found = api.get("/graph-runs", params={"jobId": upstream["id"], "status": "finished"})
            return bool(found.json()["items"])

        server.wait_for("the graph run to finish", finished)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Graph runs").click()
    expect(page).to_have_url(f"{server.url}/graph-runs")
    current = page.locator("nav[aria-label=Main] [aria-current=page]")
    expect(current).to_have_text("Graph runs")
    run_row = page.get_by_test_id("graph-runs").locator("tbody tr", has_text="Dense upstream")
    expect(run_row.locator("time[data-fmt=iso]")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d "))
    expect(run_row.locator("time.ago.bare")).to_have_text(re.compile(r"ago$|^just now$"))
    page.screenshot(path=artifacts / "density-graph-runs.png")


def _axis_fits(chart: Any, index: int) -> dict[str, Any]:
    """Of a chart's axis: its labels, whether the widest fits (y) and whether neighbours keep
    apart (x)."""
    found: dict[str, Any] = chart.evaluate(
        """(el, i) => {
            const u = el._plot, axis = u.axes[i];
            const ctx = document.createElement("canvas").getContext("2d");
            ctx.font = "12px system-ui, sans-serif";
            const labels = axis._values.map(String);
            const widths = labels.map(v => ctx.measureText(v).width);
            const pos = axis._splits.map(v => u.valToPos(v, i === 0 ? "x" : "y"));
            let apart = true;
            for (let k = 1; k < pos.length; k++) {
                const room = (widths[k] + widths[k - 1]) / 2 + 4;
                if (i === 0 && pos[k] - pos[k - 1] < room) apart = false;
            }
            return {labels: labels, fits: axis._size >= Math.max(...widths) + axis.ticks.size
                    + axis.gap, apart: apart, width: u.width};
        }""",
        index,
    )
    return found


def test_charts_have_readable_axes(wide_admin: Page, server: Server, artifacts: Path) -> None:
    page = wide_admin
    job = _ran(server, "Charted ticks", 3)
    page.goto(f"{server.url}/")
    chart = page.locator(".chart[data-series=completed]")
    expect(chart.locator("canvas")).to_have_count(1)
    x, y = _axis_fits(chart, 0), _axis_fits(chart, 1)
    assert 2 <= len(x["labels"]) <= x["width"] / 60, x
    assert all(re.fullmatch(r"\d\d:\d\d|\d\d-\d\d", v) for v in x["labels"]), x
    assert x["apart"], f"time labels overlap: {x}"
    assert y["fits"], f"a count is cut: {y}"
    assert all(re.fullmatch(r"\d+(\.\d)?k?", v) for v in y["labels"]), y  # whole counts
    assert 2 <= len(y["labels"]) <= 8, y
    page.screenshot(path=artifacts / "density-overview.png")

    page.goto(f"{server.url}/jobs/{job['id']}")
    chart = page.locator("#job-occurrences .chart")
    expect(chart.locator("canvas")).to_have_count(1)
    y = _axis_fits(chart, 1)
    assert y["fits"], f"a duration is cut: {y}"
    assert all(re.fullmatch(r"[\d.]+ (ms|s|min|h)", v) for v in y["labels"]), y
    page.screenshot(path=artifacts / "density-job.png", full_page=True)


def test_an_operator_runs_pauses_and_disables_a_job_from_its_row(
    browser: Browser, server: Server, artifacts: Path
) -> None:
    job = _job(
        server, jobType="browser.tick", displayName="Row actions", cronExpression="0 0 1 1 *"
    )
    context = browser.new_context(viewport=SCREEN)
    page = context.new_page()
    try:
        sign_in(page, server, OPERATOR)
        page.goto(f"{server.url}/jobs?search=Row+actions")
        row = page.locator(f"[data-testid=job-row][data-job='{job['id']}']")
        page.screenshot(path=artifacts / "density-jobs.png")

        row.get_by_test_id("row-pause").click()
        expect(row.get_by_test_id("row-resume")).to_be_visible()
        expect(row).to_contain_text("paused")
        row.get_by_test_id("row-resume").click()
        expect(row.get_by_test_id("row-pause")).to_be_visible()

        row.get_by_test_id("row-disable").click()
        expect(row.get_by_test_id("row-enable")).to_be_visible()
        expect(row).to_contain_text("inactive")
        row.get_by_test_id("row-enable").click()
        expect(row.get_by_test_id("row-disable")).to_be_visible()

        row.get_by_test_id("row-run").click()
        expect(page.get_by_test_id("flash-link")).to_have_text("Open the execution")
        with server.api() as api:
            stored = api.get(f"/jobs/{job['id']}").json()
            assert stored["isActive"] is True, stored
            assert stored.get("pausedAt") is None, stored
            runs = api.get("/occurrences", params={"jobId": job["id"]}).json()["items"]
            assert len(runs) == 1, runs
    finally:
        context.close()


def test_an_admin_changes_a_role_and_resets_a_password(
    wide_admin: Page, server: Server, artifacts: Path
) -> None:
    page = wide_admin
    with server.api() as api:
        made = api.post(
            "/users",
            json={"username": "rowena", "password": "first-pass-of-rowena-26", "role": "Viewer"},
        )
        assert made.status_code == 201, made.text
        rowena = made.json()["id"]
    page.goto(f"{server.url}/users")
    row = page.locator("[data-testid=user-row][data-user=rowena]")
    row.get_by_test_id("user-edit").locator("summary").click()
    page.screenshot(path=artifacts / "density-users.png", full_page=True)
    row.get_by_test_id("user-role").select_option("Operator")
    row.get_by_test_id("user-set-role").click()
    row = page.locator("[data-testid=user-row][data-user=rowena]")
    expect(row.locator("td").nth(1)).to_have_text("Operator")  # the page reloaded
    with server.api() as api:
        assert api.get(f"/users/{rowena}").json()["role"] == "Operator"

    row.get_by_test_id("user-edit").locator("summary").click()
    row.get_by_test_id("user-password").fill("second-pass-of-rowena-26")
    row.get_by_test_id("user-reset-password").click()
    expect(page.locator("#flash")).to_contain_text("Password reset")

    def signs_in(password: str) -> int:
        answer = httpx.post(
            f"{server.url}/api/v1/auth/login",
            json={"username": "rowena", "password": password},
            timeout=10,
        )
        return answer.status_code

    server.wait_for("the new password", lambda: signs_in("second-pass-of-rowena-26") == 200)
    assert signs_in("first-pass-of-rowena-26") == 401


def test_a_generated_webhook_secret_is_shown_once(
    wide_admin: Page, server: Server, artifacts: Path
) -> None:
    page = wide_admin
    page.goto(f"{server.url}/notifications")
    page.get_by_label("Name").fill("Pager hook")
    page.get_by_label("Webhook URL").fill("https://hooks.example.org/rota")
    page.get_by_test_id("create-subscription").click()
    shown = page.get_by_test_id("new-secret-value")
    expect(page.get_by_test_id("new-secret")).to_be_visible()
    expect(shown).to_have_text(re.compile(r"^[A-Za-z0-9_-]{32,}$"))
    expect(page.locator("#flash")).to_contain_text("copy its webhook secret now")
    page.screenshot(path=artifacts / "density-notifications-secret.png", full_page=True)
    secret = shown.inner_text()
    page.get_by_test_id("new-secret-done").click()
    expect(page.locator("[data-testid=subscription][data-name='Pager hook']")).to_be_visible()
    expect(page.get_by_test_id("new-secret")).to_be_hidden()
    assert secret not in page.content()
    with server.api(ADMIN) as api:
        subs = api.get("/notifications/subscriptions").json()
        listed = subs["items"] if isinstance(subs, dict) else subs
        assert any(s["name"] == "Pager hook" and s["hasSecret"] for s in listed)
        assert secret not in str(subs)
