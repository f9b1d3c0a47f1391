"""The dashboard speaks in job names: rows name their job, a job is picked by name, versions
show every setting, enum values read as words, the overview's ranges and the audit log
(through ASGI, no browser; the browser side is tests/browser/test_dashboard_names.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import httpx
from sqlalchemy import event

from rota.core.models import FailureType, OccurrenceStatus, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from rota.dashboard.display import human, relative
from tests.api_runtime import MiniRuntime
from tests.integration.test_dashboard_pages import make_job


async def failed_run(runtime: MiniRuntime, job_id: UUID) -> UUID:
    job = await runtime.store.get_job(job_id)
    t0 = datetime.now(UTC) - timedelta(minutes=3)
    occurrence = new_occurrence(job, t0, t0, PlanSettings())
    await runtime.store.insert_occurrences([occurrence])
    record = StatusRecord(
        occurrence_id=occurrence.id,
        status=OccurrenceStatus.FAILED,
        timestamp=t0,
        failure_type=FailureType.PERMANENT,
        exception="boom",
    )
    await runtime.store.apply_status([record])
    return occurrence.id


def count_job_reads(runtime: MiniRuntime) -> list[str]:
    """The SELECTs of the jobs table the store runs from now on (a listener on its engine)."""
    seen: list[str] = []
    engine = runtime.store._reader.sync_engine  # type: ignore[attr-defined]

    @event.listens_for(engine, "before_cursor_execute")
    def record(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            seen.append(statement)

    return seen


async def test_rows_name_their_job_with_one_read_per_page(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    nightly = await make_job(client, displayName="Nightly <report>", jobType="report.build")
    unnamed = await make_job(client, displayName="", jobType="cleanup.tmp")
    for job in (nightly, unnamed, nightly):
        await failed_run(runtime, UUID(str(job["id"])))

    reads = count_job_reads(runtime)
    page = await client.get("/executions")
    assert page.status_code == 200
    assert len(reads) == 1  # one batched lookup for the whole page
    assert 'data-testid="job-name">Nightly &lt;report&gt;</a>' in page.text
    assert '<small class="job-type"><code>report.build</code></small>' in page.text
    assert f'<a href="/jobs/{unnamed["id"]}" class="job-name"' in page.text
    failed = await client.get("/failed")
    assert failed.text.count("Nightly &lt;report&gt;</a>") == 2
    assert "permanent" in failed.text
    assert ">retries_exhausted<" not in failed.text  # the filter's options read as words
    assert ">retries exhausted<" in failed.text
    overview = await client.get("/")
    assert "Nightly &lt;report&gt;</a>" in overview.text  # the latest unresolved failures


async def test_a_deleted_job_keeps_its_type_unlinked(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await make_job(client, displayName="Short-lived", jobType="gone.soon")
    occurrence = await failed_run(runtime, UUID(str(job["id"])))
    assert (await client.delete(f"/api/v1/jobs/{job['id']}")).status_code == 204
    page = await client.get(f"/executions/{occurrence}")
    assert '<code>gone.soon</code> <small class="muted">(job deleted)</small>' in page.text


async def test_the_job_picker_offers_and_resolves_names(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    a = await make_job(client, displayName="Billing sync", jobType="sync")
    b = await make_job(client, displayName="Billing export", jobType="export")
    occurrence = await failed_run(runtime, UUID(str(a["id"])))
    await failed_run(runtime, UUID(str(b["id"])))

    options = await client.get("/ui/jobs/options", params={"job": "billing"})
    assert f'<option value="Billing sync" data-id="{a["id"]}">' in options.text
    assert f'data-id="{b["id"]}"' in options.text

    by_name = await client.get("/executions", params={"job": "billing sync"})
    assert f'name="jobId" value="{a["id"]}"' in by_name.text
    assert f"/executions/{occurrence}" in by_name.text
    assert by_name.text.count('data-testid="occurrence-row"') == 1
    by_id = await client.get("/failed", params={"jobId": a["id"], "resolved": "any"})
    assert 'value="Billing sync"' in by_id.text  # the picker shows the name, not the id
    assert by_id.text.count('data-testid="failed-row"') == 1
    several = await client.get("/executions", params={"job": "billing"})
    assert "2 jobs match" in several.text
    assert several.text.count('data-testid="occurrence-row"') == 2
    none = await client.get("/executions", params={"job": "payroll"})
    assert "No job is named like" in none.text


async def test_the_status_filter_shows_what_it_filters(client: httpx.AsyncClient) -> None:
    page = await client.get("/executions", params={"status": "failed"})
    assert 'class="chip on" aria-current="true"><span class="badge st-bad">Failed</span>' in (
        page.text
    )
    assert 'data-testid="filter-summary">Showing <span class="badge st-bad">Failed</span>' in (
        page.text
    )
    assert page.text.count('aria-current="true"') == 1


async def test_versions_show_every_setting(client: httpx.AsyncClient) -> None:
    job = await make_job(client)
    changed = await client.patch(
        f"/api/v1/jobs/{job['id']}", json={"priority": 4, "timeoutSeconds": 30}
    )
    assert changed.json()["version"] == 2
    page = await client.get(f"/jobs/{job['id']}")
    assert "version 1 → 2" in page.text
    assert '<th scope="row">priority</th><td class="del"><code>medium</code></td>' in page.text
    assert '<td class="ins"><code>critical</code></td>' in page.text
    assert '<th scope="row">timeoutSeconds</th>' in page.text
    assert "critical" in page.text  # the priority in words
    assert ">fire_once<" not in page.text


def test_words_and_relative_times() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert relative(now - timedelta(minutes=3, seconds=20), now) == "3 min ago"
    assert relative(now + timedelta(hours=2), now) == "in 2 h"
    assert relative(now - timedelta(days=3), now) == "3 days ago"
    assert relative(now, now) == "just now"
    assert human(FailureType.UNKNOWN_JOB_TYPE) == "unknown job type"
    assert human("wont_fix", "resolution") == "won't fix"
    assert human("something_new") == "something new"


async def test_times_read_relative_beside_absolute(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    job = await make_job(client)
    occurrence_id = await failed_run(runtime, UUID(str(job["id"])))
    page = await client.get(f"/executions/{occurrence_id}")
    assert '<span class="ago" data-ago="' in page.text
    assert "3 min ago</span>" in page.text
    listed = await client.get("/executions")  # a table: the time compared down the column
    assert 'data-fmt="iso">' in listed.text
    assert "ago</span>" not in listed.text


async def test_overview_ranges(client: httpx.AsyncClient) -> None:
    for key, label in (("1h", "1 h"), ("24h", "24 h"), ("7d", "7 d")):
        page = await client.get("/", params={"range": key})
        assert f'class="chip on" aria-current="true">{label}</a>' in page.text
        assert f"Last {label}" in page.text
        assert f'data-series-url="/ui/series.json?range={key}"' in page.text
    assert "Completed per hour" in (await client.get("/", params={"range": "7d"})).text


async def test_the_audit_log_page(client: httpx.AsyncClient) -> None:
    job = await make_job(client, displayName="Audited")
    await client.patch(f"/api/v1/jobs/{job['id']}", json={"description": "changed"})
    page = await client.get("/audit", params={"action": "job.updated"})
    assert page.status_code == 200
    assert page.text.count('data-testid="audit-row"') == 1
    assert f'<a href="/jobs/{job["id"]}">' in page.text
    everything = await client.get("/audit")
    assert everything.text.count('data-testid="audit-row"') >= 2
