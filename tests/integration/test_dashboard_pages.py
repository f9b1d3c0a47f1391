"""The dashboard's pages and fragments over a real SQLite store, through ASGI (no browser)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest
from fastapi import FastAPI

from rota.api.app import create_app
from rota.core.models import LogRecord, OccurrenceStatus, StatusRecord, WorkerInfo
from rota.core.planning import PlanSettings, new_occurrence
from rota.dashboard.pages import redact
from rota.dashboard.session import Role, safe_next
from tests.api_client import PASSWORD, api_client, ensure_user, username_of
from tests.api_runtime import MiniRuntime


async def make_job(client: httpx.AsyncClient, **fields: object) -> dict[str, object]:
    body = {"jobType": "report", "cronExpression": "0 0 1 1 *", "displayName": "Yearly"} | fields
    answer = await client.post("/api/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job: dict[str, object] = answer.json()
    return job


async def finished_occurrence(runtime: MiniRuntime, job_id: UUID, **final: Any) -> UUID:
    """An occurrence of the job that ran and ended (Completed with a result unless ``final``
    says otherwise: ``status``, ``exception`` … of its last status record), with 3 log lines."""
    job = await runtime.store.get_job(job_id)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    occurrence = new_occurrence(job, t0, t0, PlanSettings())
    await runtime.store.insert_occurrences([occurrence])
    await runtime.store.apply_status(
        [
            StatusRecord(
                occurrence_id=occurrence.id, status=OccurrenceStatus.RUNNING, timestamp=t0
            ),
            StatusRecord(
                **{
                    "occurrence_id": occurrence.id,
                    "status": OccurrenceStatus.COMPLETED,
                    "timestamp": t0 + timedelta(seconds=2),
                    "result": {"rows": 7},
                    "duration_ms": 2000,
                    **final,
                }
            ),
        ]
    )
    await runtime.store.append_logs(
        [
            LogRecord(
                occurrence_id=occurrence.id,
                timestamp=t0 + timedelta(milliseconds=i),
                level="INFO",
                message=f"line <{i}>",
            )
            for i in range(3)
        ]
    )
    return occurrence.id


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/", "Overview"),
        ("/jobs", "Jobs"),
        ("/jobs/new", "New job"),
        ("/executions", "Executions"),
        ("/failed", "Failed executions"),
        ("/workers", "Workers"),
        ("/admin", "Admin"),
        ("/users", "Users"),
        ("/notifications", "Notifications"),
        ("/audit", "Audit log"),
        ("/graph-runs", "Graph runs"),
    ],
)
async def test_every_page_renders(client: httpx.AsyncClient, path: str, heading: str) -> None:
    answer = await client.get(path)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert f"<h1>{heading}</h1>" in answer.text
    assert 'hx-headers=\'{"X-Rota-CSRF": "1"}\'' in answer.text
    assert '<main id="main"' in answer.text
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


async def test_the_pages_are_not_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert all(path.startswith("/api/v1/") for path in paths)


async def test_the_front_end_libraries_are_served(client: httpx.AsyncClient) -> None:
    for name in ("htmx.min.js", "sse.min.js", "uPlot.iife.min.js", "uPlot.min.css"):
        answer = await client.get(f"/static/vendor/{name}")
        assert answer.status_code == 200, f"{name} missing: run make install"
    assert (await client.get("/static/rota.js")).status_code == 200
    # the API docs' libraries, from the package too (tests/browser renders the pages)
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        answer = await client.get(f"/docs/assets/{name}")
        assert answer.status_code == 200, f"{name} missing: run make install"
    for page, script in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        html = (await client.get(page)).text
        assert f'src="/docs/assets/{script}"' in html
        assert "https://" not in html, f"{page} names another host"


async def test_jobs_filter_and_page_on_the_server(client: httpx.AsyncClient) -> None:
    for i in range(30):
        await make_job(client, displayName=f"Job {i:02d}", tags=["even" if i % 2 else "odd"])
    first = await client.get("/jobs")
    assert first.text.count('<tr data-testid="job-row"') == 25
    assert "Next page" in first.text
    assert '<option value="even">15 jobs</option>' in first.text  # the tags in use
    evens = await client.get("/jobs", params={"tag": "even"})
    assert evens.text.count('href="/jobs?tag=even"') == 15
    assert "Next page" not in evens.text
    found = await client.get("/jobs", params={"search": "Job 07"})
    assert "Job 07" in found.text
    assert "Job 08" not in found.text
    fragment = await client.get("/jobs", params={"fragment": "jobs_table", "search": "Job 07"})
    assert "<html" not in fragment.text
    assert 'id="jobs-table"' not in fragment.text  # the region's content, not the region
    assert "Job 07" in fragment.text


async def test_job_page_shows_stats_and_version_diff(client: httpx.AsyncClient) -> None:
    job = await make_job(client)
    changed = await client.patch(f"/api/v1/jobs/{job['id']}", json={"cronExpression": "0 5 * * *"})
    assert changed.status_code == 200, changed.text
    page = await client.get(f"/jobs/{job['id']}")
    assert page.status_code == 200
    assert "<h1>Yearly</h1>" in page.text
    assert "version 1 → 2" in page.text
    assert "&#34;0 0 1 1 *&#34;" in page.text
    assert "&#34;0 5 * * *&#34;" in page.text
    missing = await client.get("/jobs/01900000-0000-7000-8000-000000000000")
    assert missing.status_code == 404


async def test_execution_page_and_log_tail(client: httpx.AsyncClient, runtime: MiniRuntime) -> None:
    job = await make_job(client)
    occurrence_id = await finished_occurrence(runtime, UUID(str(job["id"])))
    page = await client.get(f"/executions/{occurrence_id}")
    assert page.status_code == 200
    assert "Completed" in page.text
    assert "&#34;rows&#34;: 7" in page.text
    assert "line &lt;2&gt;" in page.text  # escaped
    assert 'data-testid="cancel"' not in page.text  # finished: nothing to cancel
    tail = await client.get(f"/ui/occurrences/{occurrence_id}/logs", params={"after": 2})
    assert tail.text.count("<li") == 1
    assert "line &lt;2&gt;" in tail.text
    listed = await client.get("/executions", params={"status": "Completed"})
    assert str(occurrence_id) in listed.text
    none = await client.get("/executions", params={"status": "Failed"})
    assert str(occurrence_id) not in none.text
    window = {"after": "2025-12-31T23:59", "before": "2026-01-01T00:01"}
    inside = await client.get("/executions", params=window)
    assert f"/executions/{occurrence_id}" in inside.text
    later = await client.get("/executions", params={"after": "2026-01-01T00:00:01"})
    assert f"/executions/{occurrence_id}" not in later.text
    bad = await client.get("/executions", params={"status": "nonsense"})
    assert bad.status_code == 200
    assert "Unknown status" in bad.text
    odd = await client.get("/executions", params={"after": "soon"})
    assert odd.status_code == 200
    assert "Unknown status or time" in odd.text


async def test_cron_preview_fragment(client: httpx.AsyncClient) -> None:
    answer = await client.get(
        "/ui/preview", params={"cronExpression": "0 30 2 * * *", "timeZone": "Europe/Berlin"}
    )
    assert answer.text.count("<li>") == 8
    assert "02:30:00" in answer.text
    wrong = await client.get("/ui/preview", params={"cronExpression": "61 * * * *"})
    assert 'data-testid="preview-error"' in wrong.text
    zone = await client.get(
        "/ui/preview", params={"cronExpression": "* * * * *", "timeZone": "Mars/Olympus"}
    )
    assert 'data-testid="preview-error"' in zone.text


async def test_series_counts_finished_executions_per_minute(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    for key, points, bucket in (("1h", 60, 60), ("24h", 96, 900), ("7d", 168, 3600)):
        series = (await client.get("/ui/series.json", params={"range": key})).json()
        assert len(series["x"]) == len(series["completed"]) == len(series["failed"]) == points
        assert series["bucket"] == bucket
        assert series["x"][1] - series["x"][0] == bucket
        assert sum(series["completed"]) == 0
    default = (await client.get("/ui/series.json", params={"range": "nonsense"})).json()
    assert default["bucket"] == 900


def cookies_of(answer: httpx.Response) -> dict[str, str]:
    """The cookies an answer sets (name -> value; empty for a cleared one: a value set at one
    path wins over the same name cleared at another)."""
    found: dict[str, str] = {}
    for name, value, _ in set_cookies(answer):
        if value or name not in found:
            found[name] = value
    return found


def set_cookies(answer: httpx.Response) -> list[tuple[str, str, dict[str, str]]]:
    """Each Set-Cookie of an answer: name, value and attributes (lowercase names; ``""`` for
    a flag such as HttpOnly)."""
    found = []
    for header in answer.headers.get_list("set-cookie"):
        first, *rest = header.split(";")
        name, _, value = first.partition("=")
        attrs = {}
        for part in rest:
            key, _, val = part.strip().partition("=")
            attrs[key.lower()] = val
        found.append((name.strip(), value.strip('"'), attrs))
    return found


def jar(cookies: dict[str, str]) -> dict[str, str]:
    """A Cookie header (the client keeps no cookies between these requests)."""
    return {"Cookie": "; ".join(f"{name}={value}" for name, value in cookies.items())}


CSRF = {"X-Rota-CSRF": "1"}
PAGE = {"Accept": "text/html,application/xhtml+xml"}
"""What a browser's navigation asks for."""


async def sign_in(client: httpx.AsyncClient, role: str) -> dict[str, str]:
    answer = await client.post(
        "/login",
        data={"username": username_of(role), "password": PASSWORD, "next": "/jobs"},
        headers=CSRF,
    )
    assert answer.status_code == 204, answer.text
    assert answer.headers["X-Rota-Redirect"] == "/jobs"
    for _name, _value, attrs in set_cookies(answer):
        assert "httponly" in attrs
        assert attrs["samesite"].lower() == "strict"
    return cookies_of(answer)


@pytest.fixture
async def anonymous(runtime: MiniRuntime) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime)
    for role in ("viewer", "operator"):
        await ensure_user(runtime.auth, role)
    async with api_client(app, role=None) as http:
        yield http


async def test_a_viewer_sees_no_actions_and_the_api_refuses_them(
    anonymous: httpx.AsyncClient,
) -> None:
    operator = await sign_in(anonymous, "operator")
    assert 'data-testid="new-job"' in (await anonymous.get("/jobs", headers=jar(operator))).text
    created = await anonymous.post(
        "/api/v1/jobs",
        json={"jobType": "report", "cronExpression": "0 0 1 1 *"},
        headers={"X-Rota-CSRF": "1", **jar(operator)},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    viewer = await sign_in(anonymous, "viewer")
    listing = await anonymous.get("/jobs", headers=jar(viewer))
    assert 'data-testid="new-job"' not in listing.text
    detail = await anonymous.get(f"/jobs/{job_id}", headers=jar(viewer))
    assert "data-api=" not in detail.text
    forged = await anonymous.post(
        f"/api/v1/jobs/{job_id}/trigger", json={}, headers={"X-Rota-CSRF": "1", **jar(viewer)}
    )
    assert forged.status_code == 403
    cross_site = await anonymous.post(
        f"/api/v1/jobs/{job_id}/trigger", json={}, headers=jar(operator)
    )
    assert cross_site.status_code == 403


def test_redirects_after_sign_in_stay_on_this_site() -> None:
    assert safe_next("/jobs?x=1") == "/jobs?x=1"
    for outside in ("//evil.example", "https://evil.example", "/\\evil", None, ""):
        assert safe_next(outside) == "/"


def test_configuration_is_shown_without_secrets() -> None:
    shown = redact(
        {
            "database_url": "postgresql://rota:hunter2@db/rota",
            "auth": {"jwt_secret": "s" * 40, "access_token_minutes": 15},
            "redis_url": None,
            "alert_webhook_url": "https://hooks.example/x?channel=ops&token=hunter3",
        }
    )
    assert shown == {
        "alert_webhook_url": "https://hooks.example/x?channel=ops&token=***",
        "database_url": "postgresql://rota:***@db/rota",
        "auth": {"jwt_secret": "***", "access_token_minutes": 15},
        "redis_url": None,
    }


def test_roles_parse_case_insensitively() -> None:
    assert Role.parse("admin") is Role.ADMIN
    assert Role.parse("Operator") is Role.OPERATOR
    assert Role.parse("something else") is Role.VIEWER


async def test_job_form_lists_declared_types_and_embeds_their_schemas_safely(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    hostile = {"type": "object", "description": "</script><script>alert(1)</script>"}
    await runtime.coordination.register_worker(
        WorkerInfo(
            instance_id="w-1",
            worker_id="reports",
            host="h",
            pid=1,
            job_types={"report.build": {"schema": hostile}},
            concurrency=2,
        ),
        ttl=30,
    )
    form = await client.get("/jobs/new")
    assert '<option value="report.build">reports</option>' in form.text
    assert "</script><script>alert(1)" not in form.text
    assert "<\\/script><script>alert(1)<\\/script>" in form.text
    workers = await client.get("/workers")
    assert "report.build" in workers.text
    assert "0 / 2" in workers.text


async def test_cron_preview_from_a_date_shows_a_dst_change(client: httpx.AsyncClient) -> None:
    """2026-03-29: Berlin skips 02:00-03:00; a 02:30 fire runs at the end of the gap."""
    answer = await client.get(
        "/ui/preview",
        params={
            "cronExpression": "0 30 2 * * *",
            "timeZone": "Europe/Berlin",
            "previewFrom": "2026-03-28",
        },
    )
    fires = answer.text
    assert 'Sat 2026-03-28 02:30:00 <span class="muted">CET (UTC+0100)' in fires
    assert 'Sun 2026-03-29 03:00:00 <span class="muted">CEST (UTC+0200)' in fires
    assert 'Mon 2026-03-30 02:30:00 <span class="muted">CEST (UTC+0200)' in fires
    bad = await client.get(
        "/ui/preview", params={"cronExpression": "* * * * *", "previewFrom": "yesterday"}
    )
    assert 'data-testid="preview-error"' in bad.text


async def test_version_diff_compares_times_as_times(client: httpx.AsyncClient) -> None:
    job = await make_job(client, cronExpression=None, executeAt="2030-01-01T00:00:00Z")
    moved = await client.patch(
        f"/api/v1/jobs/{job['id']}", json={"executeAt": "2030-01-02T00:00:00+00:00"}
    )
    assert moved.status_code == 200, moved.text
    page = (await client.get(f"/jobs/{job['id']}")).text
    assert "2030-01-01T00:00:00Z" in page
    assert "2030-01-02T00:00:00Z" in page
    assert page.count('<th scope="row">') == 1  # only executeAt changed


async def test_the_users_page_lists_api_keys_for_admins_only(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    created = await client.post(
        "/api/v1/api-keys",
        json={"name": "page-svc", "role": "operator", "jobTypes": ["billing.sync"]},
    )
    assert created.status_code == 201, created.text
    key = created.json()
    page = await client.get("/users")
    assert page.status_code == 200
    assert 'data-key="page-svc"' in page.text
    assert key["prefix"] in page.text
    assert "types: billing.sync" in page.text
    assert f"DELETE /api/v1/api-keys/{key['id']}" in page.text
    assert 'data-api-form="POST /api/v1/api-keys"' in page.text
    assert key["key"] not in page.text  # the secret is never shown again
    async with api_client(app, "operator") as operator:
        other = await operator.get("/users")
        assert "page-svc" not in other.text
        assert "Admins only." in other.text
