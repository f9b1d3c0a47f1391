"""The query field of the list pages in Chromium: Executions, Failed and Jobs filtered by
``type:``, ``data.<field>:`` and ``job:`` with the qualifiers suggested under the field, and a
misspelt qualifier shown as the page's error. One ``rota dev`` for the module (the
conftest's ``server``); screenshots in the browser tests' artifacts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.conftest import Server


def _once(server: Server, job_type: str, name: str, data: dict[str, Any]) -> dict[str, Any]:
    """A one-time job due now, once its execution has finished."""
    with server.api() as api:
        created = api.post(
            "/jobs",
            json={
                "jobType": job_type,
                "displayName": name,
                "jobData": data,
                "executeAt": datetime.now(UTC).isoformat(),
            },
        )
        assert created.status_code == 201, created.text
        job: dict[str, Any] = created.json()

    def finished() -> bool:
        with server.api() as api:
            items = api.get("/occurrences", params={"jobId": job["id"]}).json()["items"]
        return bool(items) and items[0]["statusName"] in ("Completed", "Failed")

    server.wait_for(f"{name} to finish", finished)
    return job


def test_the_query_field_filters_the_three_lists(
    admin_page: Page, server: Server, artifacts: Path
) -> None:
    page = admin_page
    _once(server, "browser.fail", "Query customer 42", {"customer": 42})
    _once(server, "browser.fail", "Query customer 7", {"customer": 7})

    page.goto(f"{server.url}/executions")
    field = page.get_by_test_id("query")
    expect(page.get_by_test_id("query-help")).to_contain_text("data.customer:")
    suggestions = page.locator("#query-occurrences-qualifiers option")
    expect(suggestions.first).to_have_attribute("value", "type:")
    field.fill("type:browser.fail data.customer:42")
    field.press("Enter")
    rows = page.get_by_test_id("occurrence-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Query customer 42")
    expect(page.get_by_test_id("query")).to_have_value("type:browser.fail data.customer:42")
    page.screenshot(path=artifacts / "query-executions.png", full_page=True)

    page.goto(f"{server.url}/failed")
    field = page.get_by_test_id("query")
    field.fill('job:"Query customer 7"')
    field.press("Enter")
    rows = page.get_by_test_id("failed-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Query customer 7")

    page.goto(f"{server.url}/jobs")
    field = page.get_by_test_id("query")
    field.fill("data.customer:7")
    field.press("Enter")
    expect(page.get_by_test_id("job-row")).to_have_count(1)
    expect(page.get_by_test_id("job-row").first).to_contain_text("Query customer 7")
    page.screenshot(path=artifacts / "query-jobs.png", full_page=True)

    field = page.get_by_test_id("query")
    field.fill("stauts:active")
    field.press("Enter")
    expect(page.get_by_test_id("query-error")).to_contain_text(
        'unknown qualifier "stauts" (did you mean status?)'
    )
    expect(page.get_by_test_id("job-row")).to_have_count(0)

    page.goto(f"{server.url}/executions?q=attempt:x")
    expect(page.get_by_role("alert")).to_contain_text("Query not applied")
    expect(page.get_by_test_id("occurrence-row")).to_have_count(0)
