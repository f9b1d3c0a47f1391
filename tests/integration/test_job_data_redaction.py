"""Viewers see job data redacted unless ROTA_API__VIEWER_JOB_DATA allows it: every API route
and dashboard page that shows job data (jobs, versions, occurrences, failed occurrences), for
Viewer, Operator and Admin; the job form needs Operator."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
import pytest

from rota.api.app import create_app
from rota.core.models import OccurrenceStatus
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime
from tests.integration.test_dashboard_pages import finished_occurrence, make_job

OLD = "Bearer old-plain-token-3141592653"
NEW = "Bearer new-plain-token-2718281828"


async def job_with_history(runtime: MiniRuntime, http: httpx.AsyncClient) -> tuple[str, UUID]:
    """A job whose data was changed once (a version holds the old data) and a failed
    occurrence of it (with a dead-letter record)."""
    job = await make_job(http, jobData={"headers": {"Authorization": OLD}})
    job_id = str(job["id"])
    changed = await http.patch(
        f"/api/v1/jobs/{job_id}", json={"jobData": {"headers": {"Authorization": NEW}}}
    )
    assert changed.status_code == 200, changed.text
    final = {"status": OccurrenceStatus.FAILED, "exception": "RuntimeError: no", "result": None}
    occurrence_id = await finished_occurrence(runtime, UUID(job_id), **final)
    return job_id, occurrence_id


async def api_answers(
    app: Any, role: str, job_id: str, occurrence_id: UUID
) -> dict[str, dict[str, Any]]:
    """Each route's object that holds job data, as ``role`` gets it."""
    async with api_client(app, role) as http:
        listed = (await http.get("/api/v1/jobs")).json()["items"]
        failed = (await http.get("/api/v1/failed-occurrences")).json()["items"]
        answers = {
            "GET /jobs": next(j for j in listed if j["id"] == job_id),
            "GET /jobs/{id}": (await http.get(f"/api/v1/jobs/{job_id}")).json(),
            "GET /jobs/{id}/versions": (await http.get(f"/api/v1/jobs/{job_id}/versions")).json()[
                "items"
            ][0],
            "GET /occurrences/{id}": (
                await http.get(f"/api/v1/occurrences/{occurrence_id}")
            ).json(),
            "GET /failed-occurrences": failed[0],
            "GET /failed-occurrences/{id}": (
                await http.get(f"/api/v1/failed-occurrences/{failed[0]['id']}")
            ).json(),
        }
    return answers


def data_of(name: str, answer: dict[str, Any]) -> Any:
    return answer["snapshot"]["jobData"] if name.endswith("versions") else answer["jobData"]


async def test_viewers_get_job_data_redacted_on_every_route(runtime: MiniRuntime) -> None:
    app = create_app(runtime)
    async with api_client(app, "operator") as operator:
        job_id, occurrence_id = await job_with_history(runtime, operator)
    viewer = await api_answers(app, "viewer", job_id, occurrence_id)
    assert len(viewer) == 6
    for name, answer in viewer.items():
        assert answer["jobDataRedacted"] is True, name
        assert data_of(name, answer) is None, name
        assert "plain-token" not in str(answer), name
    for role in ("operator", "admin"):
        for name, answer in (await api_answers(app, role, job_id, occurrence_id)).items():
            assert answer["jobDataRedacted"] is False, (role, name)
            expected = OLD if name.endswith("versions") else NEW
            assert data_of(name, answer) == {"headers": {"Authorization": expected}}, name


async def test_an_admin_may_let_viewers_see_job_data(runtime: MiniRuntime) -> None:
    app = create_app(runtime)
    async with api_client(app, "operator") as operator:
        job_id, occurrence_id = await job_with_history(runtime, operator)
    runtime.settings.api.viewer_job_data = True
    for name, answer in (await api_answers(app, "viewer", job_id, occurrence_id)).items():
        assert answer["jobDataRedacted"] is False, name
        assert data_of(name, answer) is not None, name


async def test_the_redaction_is_in_the_openapi_schema(runtime: MiniRuntime) -> None:
    async with api_client(create_app(runtime), None) as anonymous:
        spec = (await anonymous.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for model in ("JobOut", "JobVersionOut", "OccurrenceDetail", "FailedOccurrenceOut"):
        field = schemas[model]["properties"]["jobDataRedacted"]
        assert field["type"] == "boolean", model
        assert "ROTA_API__VIEWER_JOB_DATA" in field["description"], model


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
async def test_dashboard_pages_show_job_data_by_role(runtime: MiniRuntime, role: str) -> None:
    app = create_app(runtime)
    async with api_client(app, "operator") as operator:
        job_id, occurrence_id = await job_with_history(runtime, operator)
    async with api_client(app, role) as http:
        execution = await http.get(f"/executions/{occurrence_id}")
        job_page = await http.get(f"/jobs/{job_id}")
        edit = await http.get(f"/jobs/{job_id}/edit")
    assert execution.status_code == 200
    assert job_page.status_code == 200
    if role == "viewer":
        assert "plain-token" not in execution.text
        assert 'data-testid="job-data-hidden"' in execution.text
        assert "plain-token" not in job_page.text
        assert "jobData" in job_page.text  # the version history says that it changed
        assert "(hidden from Viewers)" in job_page.text
        assert edit.status_code == 403
        assert "plain-token" not in edit.text
        assert "needs the Operator role" in edit.text
    else:
        assert "new-plain-token" in execution.text
        assert "old-plain-token" in job_page.text
        assert "new-plain-token" in job_page.text
        assert edit.status_code == 200
        assert "new-plain-token" in edit.text


async def test_dashboard_shows_viewers_job_data_when_allowed(runtime: MiniRuntime) -> None:
    app = create_app(runtime)
    async with api_client(app, "operator") as operator:
        job_id, occurrence_id = await job_with_history(runtime, operator)
    runtime.settings.api.viewer_job_data = True
    async with api_client(app, "viewer") as viewer:
        execution = await viewer.get(f"/executions/{occurrence_id}")
        job_page = await viewer.get(f"/jobs/{job_id}")
        edit = await viewer.get(f"/jobs/{job_id}/edit")
        new = await viewer.get("/jobs/new")
    assert "new-plain-token" in execution.text
    assert "old-plain-token" in job_page.text
    assert edit.status_code == 403  # the form is for those who may change the job
    assert new.status_code == 403
