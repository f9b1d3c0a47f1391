"""Deployment hygiene over HTTP: /metrics behind a token, tracebacks hidden from Viewers."""

from __future__ import annotations

from uuid import UUID

import httpx
import pytest
from pydantic import SecretStr

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.core.models import OccurrenceStatus
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime
from tests.helpers import RuntimeFactory
from tests.integration.test_dashboard_pages import finished_occurrence, make_job

EXCEPTION = (
    "ValueError: the report's source is gone\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/app/secret_module/reports.py", line 42, in build\n'
    '    raise ValueError("the report\'s source is gone")\n'
)
MESSAGE = "ValueError: the report's source is gone"
FRAME = "/srv/app/secret_module/reports.py"


# --- /metrics ----------------------------------------------------------------------------------


@pytest.fixture
async def full_runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory(grace=1)


async def test_metrics_are_open_unless_a_token_is_set(full_runtime: Runtime) -> None:
    app = create_app(full_runtime)
    async with api_client(app, role=None) as anonymous:
        assert (await anonymous.get("/metrics")).status_code == 200
        full_runtime.settings.api.metrics_token = SecretStr("scrape-token-0123456789")
        refused = [
            await anonymous.get("/metrics"),
            await anonymous.get("/metrics", headers={"Authorization": "Bearer wrong"}),
            await anonymous.get(
                "/metrics", headers={"Authorization": "Basic scrape-token-0123456789"}
            ),
            await anonymous.get(
                "/metrics", headers={"Authorization": "Bearer scrape-token-01234567890"}
            ),
        ]
        assert [r.status_code for r in refused] == [401, 401, 401, 401]
        assert "ROTA_API__METRICS_TOKEN" in refused[0].json()["detail"]
        allowed = await anonymous.get(
            "/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"}
        )
        assert allowed.status_code == 200
        assert "rota_" in allowed.text


# --- tracebacks ---------------------------------------------------------------------------------


async def failed_occurrence(runtime: MiniRuntime, http: httpx.AsyncClient) -> UUID:
    job = await make_job(http)
    final = {"status": OccurrenceStatus.FAILED, "exception": EXCEPTION, "result": None}
    return await finished_occurrence(runtime, UUID(str(job["id"])), **final)


async def shown(app: object, role: str, occurrence_id: UUID) -> list[str]:
    """The exception texts ``role`` gets: the occurrence, the list, the failed records (API),
    and the dashboard's execution and failed pages."""
    async with api_client(app, role) as http:  # type: ignore[arg-type]
        detail = (await http.get(f"/api/v1/occurrences/{occurrence_id}")).json()
        listed = (await http.get("/api/v1/occurrences")).json()["items"]
        failed = (await http.get("/api/v1/failed-occurrences")).json()["items"]
        record = (await http.get(f"/api/v1/failed-occurrences/{failed[0]['id']}")).json()
        page = await http.get(f"/executions/{occurrence_id}")
        failed_page = await http.get("/failed")
    assert page.status_code == 200
    assert failed_page.status_code == 200
    return [
        detail["exception"],
        listed[0]["exception"],
        failed[0]["exception"],
        record["exception"],
        page.text,
        failed_page.text,
    ]


async def test_viewers_see_no_traceback_when_turned_off(runtime: MiniRuntime) -> None:
    app = create_app(runtime)
    async with api_client(app, "operator") as operator:
        occurrence_id = await failed_occurrence(runtime, operator)
    # on by default: everyone sees the whole text
    for text in await shown(app, "viewer", occurrence_id):
        assert FRAME in text
    runtime.settings.api.viewer_tracebacks = False
    viewer = await shown(app, "viewer", occurrence_id)
    assert viewer[:4] == [MESSAGE] * 4
    for text in viewer[4:]:
        assert MESSAGE.replace("'", "&#39;") in text
        assert FRAME not in text
    for role in ("operator", "admin"):
        for text in await shown(app, role, occurrence_id):
            assert FRAME in text
