"""Readiness on the embedded runtime: every component named, a broken one answers 503."""

from __future__ import annotations

import pytest

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.core.models import DispatcherState
from tests.api_client import api_client
from tests.helpers import RuntimeFactory


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    return await runtime_factory(None, ["tests.integration.ops_jobs"], grace=1)


async def test_ready_checks_store_index_coordination_and_broker(runtime: Runtime) -> None:
    async with api_client(create_app(runtime), role="viewer") as http:
        ready = await http.get("/api/v1/health/ready")
        assert ready.status_code == 200
        assert ready.json() == {
            "status": "ok",
            "components": {"store": "ok", "index": "ok", "coordination": "ok", "broker": "ok"},
            "warnings": [],
        }
        # an operator's stop is named, and the server stays ready
        await runtime.store.set_dispatcher_state(DispatcherState(paused=True, reason="t", by="a"))
        stopped = await http.get("/api/v1/health/ready")
        assert (stopped.status_code, stopped.json()["warnings"]) == (200, ["dispatching stopped"])
        await runtime.store.close()  # the store goes away under the running server
        not_ready = await http.get("/api/v1/health/ready")
        live = await http.get("/api/v1/health/live")
    assert not_ready.status_code == 503
    body = not_ready.json()
    assert body["status"] == "unavailable"
    assert body["components"]["store"].startswith("error:")
    assert body["components"]["broker"] == "ok"
    assert live.status_code == 200
