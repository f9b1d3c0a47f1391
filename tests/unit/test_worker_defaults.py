"""`rota worker`'s defaults: a group, the same concurrency as `rota dev`, a health endpoint
for an orchestrator's probes, and an absolute state directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from rota.app.settings import DEFAULT_HEALTH_PORT, Settings
from rota.app.worker_process import health_endpoint
from rota.core.errors import ConfigurationError
from rota.worker.metrics_server import MetricsServer


def test_a_worker_has_a_group_and_the_embedded_workers_concurrency() -> None:
    ws = Settings(environment="test").worker
    assert (ws.group, ws.concurrency, ws.health, ws.health_port) == ("default", 32, True, None)
    assert DEFAULT_HEALTH_PORT == 8081


def test_the_state_dir_is_absolute_and_not_the_working_directorys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("ROTA_DATA_DIR", raising=False)
    unset = Settings(environment="test")
    assert unset.worker_state_path("mail/x") == tmp_path / "state" / "rota" / "workers" / "mail_x"
    monkeypatch.setenv("ROTA_DATA_DIR", "data")  # set, even relative: under it, made absolute
    assert Settings(environment="test").worker_state_path("mail") == (
        tmp_path / "data" / "workers" / "mail"
    )
    monkeypatch.setenv("ROTA_WORKER__STATE_DIR", "mine")
    assert Settings(environment="test").worker_state_path("mail") == tmp_path / "mine"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.delenv("ROTA_DATA_DIR")
    monkeypatch.delenv("ROTA_WORKER__STATE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Settings(environment="test").worker_state_path("mail") == (
        tmp_path / "home" / ".local" / "state" / "rota" / "workers" / "mail"
    )


async def test_the_health_endpoint_answers_the_probes_and_serves_no_metrics() -> None:
    settings = Settings(environment="test")
    settings.worker.health_host, settings.worker.health_port = "127.0.0.1", 0
    ready = asyncio.Event()
    endpoint = await health_endpoint(settings, lambda: (ready.is_set(), {"state": "x"}))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{endpoint.port}") as http:
            assert (await http.get("/health/live")).status_code == 200
            starting = await http.get("/health/ready")
            assert (starting.status_code, starting.json()["status"]) == (503, "unavailable")
            ready.set()
            assert (await http.get("/health/ready")).status_code == 200
            assert (await http.get("/health")).json() == {"status": "ok", "state": "x"}
            assert (await http.get("/metrics")).status_code == 404
    finally:
        await endpoint.close()


async def test_a_taken_default_port_moves_to_a_free_one_a_chosen_port_does_not() -> None:
    settings = Settings(environment="test")
    settings.worker.health_host = "127.0.0.1"
    first = MetricsServer(None, lambda: (True, {}), host="127.0.0.1", port=0)
    await first.start()
    try:
        moved = await health_endpoint(settings, lambda: (True, {}), default_port=first.port)
        try:
            assert moved.port not in (0, first.port)
            async with httpx.AsyncClient() as http:
                answer = await http.get(f"http://127.0.0.1:{moved.port}/health/ready")
                assert answer.status_code == 200
        finally:
            await moved.close()
        settings.worker.health_port = first.port
        with pytest.raises(ConfigurationError, match="ROTA_WORKER__HEALTH_PORT"):
            await health_endpoint(settings, lambda: (True, {}))
    finally:
        await first.close()
