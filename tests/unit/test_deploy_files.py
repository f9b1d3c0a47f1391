"""The compose file and Dockerfile describe a deployment Rota can actually run: its settings are
real settings, its commands real commands, its worker module has job handlers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rota.app.settings import Settings
from rota.cli import app
from rota.sdk.registry import load_jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def rota_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose["services"].items() if s.get("image") == "rota:local"}


def test_two_servers_a_worker_and_the_three_backends(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "rabbitmq"} <= set(services)
    commands = {n: s.get("command", ["server"])[0] for n, s in rota_services(compose).items()}
    assert sorted(commands.values()) == ["migrate", "server", "server", "worker"]


def test_every_rota_process_gets_settings_rota_reads(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, service in rota_services(compose).items():
        env = service["environment"]
        for key in list(env):
            monkeypatch.setenv(key, env[key])
        settings = Settings()
        assert settings.effective_database_url.startswith("postgresql://rota:"), name
        if service.get("command", ["server"])[0] != "migrate":
            assert not settings.is_embedded, f"{name} would run embedded"
        for key in list(env):
            monkeypatch.delenv(key)


def test_every_command_is_a_rota_command(compose: dict[str, Any]) -> None:
    runner = CliRunner()
    for name, service in rota_services(compose).items():
        command = service.get("command", ["server", "--host", "0.0.0.0", "--port", "8000"])
        result = runner.invoke(app, [command[0], "--help"])
        assert result.exit_code == 0, f"{name}: {result.output}"
        options = [arg for arg in command if arg.startswith("--")]
        for option in options:
            assert option in result.output, f"{name}: rota {command[0]} has no {option}"


def test_the_worker_module_has_job_handlers(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]["command"]
    module = worker[1]
    assert len(load_jobs([module])) >= 1


def test_the_image_runs_rota_with_the_distributed_extras() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "'.[postgres,redis,rabbitmq,encryption]'" in dockerfile  # encryption at rest
    assert 'ENTRYPOINT ["rota"]' in dockerfile


DASHBOARD_FILES = ("htmx.min.js", "sse.min.js", "uPlot.iife.min.js", "uPlot.min.css")
DOCS_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "redoc.standalone.js")


def test_the_image_carries_the_dashboards_front_end_libraries() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "npm ci" in dockerfile
    for name in (*DASHBOARD_FILES, *DOCS_FILES):
        assert name in dockerfile, f"the image lacks {name}"
        assert name in makefile, f"the Makefile does not copy {name}"
    assert "COPY --from=assets /assets/vendor ./src/rota/dashboard/static/vendor" in dockerfile
