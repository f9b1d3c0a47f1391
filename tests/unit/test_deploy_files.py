"""The compose file and Dockerfile describe a deployment Rota can actually run: its settings are
real settings, its commands real commands, its worker module has job handlers."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rota.api.vendor import DASHBOARD_FILES, DOCS_FILES, vendor_dir
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


def test_the_image_carries_the_dashboards_front_end_libraries() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "npm ci" in dockerfile
    for name in (*DASHBOARD_FILES, *DOCS_FILES):
        assert name in dockerfile, f"the image lacks {name}"
    assert "COPY --from=assets /assets/vendor ./src/rota/dashboard/static/vendor" in dockerfile


VENDOR_PARTS = ("rota", "dashboard", "static", "vendor")


def test_the_package_build_copies_every_file_the_server_serves() -> None:
    """``hatch_build.py`` (the build's hook, and ``make install``'s copy step) fetches exactly
    the files the dashboard and the docs load, into the folder they are served from."""
    hook = runpy.run_path(str(ROOT / "hatch_build.py"))
    assert set(hook["FILES"]) == {*DASHBOARD_FILES, *DOCS_FILES}
    assert hook["VENDOR"].parts[-4:] == vendor_dir().parts[-4:] == VENDOR_PARTS
    assert "hatch_build.py" in (ROOT / "Makefile").read_text()


def test_a_build_without_npm_fails_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source tree without the files and a machine without npm: the build stops, saying so
    (pip shows the message), rather than making a package whose dashboard does not load."""
    hook = runpy.run_path(str(ROOT / "hatch_build.py"))
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(hook["AssetsError"], match=r"npm is not on PATH\. .*install npm"):
        hook["ensure"](tmp_path)
    assert hook["missing"](tmp_path) == [*hook["FILES"]]
