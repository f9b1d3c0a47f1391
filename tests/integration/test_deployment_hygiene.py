"""Deployment hygiene over HTTP: /metrics behind a token, tracebacks hidden from Viewers."""

from __future__ import annotations

from uuid import UUID

import httpx
import pytest
from pydantic import SecretStr
from rich.console import Console

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.app.server import _metrics_port
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


TOKEN = "scrape-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def test_metrics_are_closed_by_default_outside_development(full_runtime: Runtime) -> None:
    settings = full_runtime.settings
    async with api_client(create_app(full_runtime), role=None) as anonymous:
        for environment in ("production", "test"):
            settings.environment = environment  # type: ignore[assignment]
            refused = await anonymous.get("/metrics")
            assert refused.status_code == 403, refused.text
            detail = refused.json()["detail"]
            assert all(
                name in detail
                for name in ("ROTA_METRICS__TOKEN", "ROTA_METRICS__PORT", "ROTA_METRICS__PUBLIC")
            )
        settings.metrics.public = True  # said so
        assert (await anonymous.get("/metrics")).status_code == 200
        settings.metrics.public = None
        settings.environment = "development"  # rota dev: open unless said otherwise
        assert (await anonymous.get("/metrics")).status_code == 200
        settings.metrics.public = False
        assert (await anonymous.get("/metrics")).status_code == 403
    async with api_client(create_app(full_runtime), role="admin") as admin:
        assert (await admin.get("/metrics")).status_code == 403  # a scrape, not a sign-in


@pytest.mark.parametrize("older_name", [False, True])
async def test_metrics_with_a_token(full_runtime: Runtime, older_name: bool) -> None:
    settings = full_runtime.settings
    if older_name:  # ROTA_API__METRICS_TOKEN, still read
        settings.api.metrics_token = SecretStr(TOKEN)
    else:
        settings.metrics.token = SecretStr(TOKEN)
    settings.metrics.public = True  # the token wins
    async with api_client(create_app(full_runtime), role=None) as anonymous:
        refused = [
            await anonymous.get("/metrics"),
            await anonymous.get("/metrics", headers={"Authorization": "Bearer wrong"}),
            await anonymous.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}),
            await anonymous.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}0"}),
        ]
        assert [r.status_code for r in refused] == [401, 401, 401, 401]
        assert "ROTA_METRICS__TOKEN" in refused[0].json()["detail"]
        allowed = await anonymous.get("/metrics", headers=BEARER)
        assert allowed.status_code == 200
        assert "rota_" in allowed.text


async def test_metrics_on_a_port_of_their_own(full_runtime: Runtime) -> None:
    """ROTA_METRICS__PORT: the API's /metrics is a 404 naming it, and the port serves them
    (open, or with the token when one is set), gauges read at each scrape."""
    settings = full_runtime.settings
    settings.metrics.port = 0
    async with api_client(create_app(full_runtime), role=None) as anonymous:
        moved = await anonymous.get("/metrics", headers=BEARER)
        assert moved.status_code == 404
        assert "ROTA_METRICS__PORT" in moved.json()["detail"]
    for token in (None, TOKEN):
        settings.metrics.token = None if token is None else SecretStr(token)
        scrape = await _metrics_port(settings, full_runtime, Console(quiet=True))
        assert scrape is not None
        try:
            url = f"http://127.0.0.1:{scrape.port}"
            async with httpx.AsyncClient(base_url=url) as http:
                open_scrape = await http.get("/metrics")
                assert open_scrape.status_code == (200 if token is None else 401)
                answer = await http.get("/metrics", headers=BEARER)
                assert answer.status_code == 200
                assert "rota_queue_depth{" in answer.text  # read by the refresh
                assert (await http.get("/health")).status_code == 404  # the API's port has it
        finally:
            await scrape.close()


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
