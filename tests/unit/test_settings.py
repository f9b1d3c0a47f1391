"""Settings: environment over rota.toml over defaults; plain URLs pick the mode."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest
from typer.testing import CliRunner

from rota.app.notify import alert_webhook
from rota.app.server import http_config
from rota.app.settings import Settings
from rota.app.wiring import build_runtime
from rota.cli import app
from rota.core.errors import ConfigurationError
from rota.observability.logs import JsonFormatter, TextFormatter


def test_defaults_are_embedded_sqlite_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.is_embedded
    assert settings.effective_database_url == f"sqlite:///{tmp_path / '.rota' / 'rota.db'}"
    assert settings.scheduler.bucket_count == 16
    assert settings.scheduler.misfire_threshold_seconds == 60


def test_environment_wins_over_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rota.toml").write_text(
        "[scheduler]\nbucket_count = 8\nhot_window_seconds = 30\n[api]\nport = 9000\n"
    )
    monkeypatch.setenv("ROTA_SCHEDULER__BUCKET_COUNT", "32")
    settings = Settings()
    assert settings.scheduler.bucket_count == 32
    assert settings.scheduler.hot_window_seconds == 30
    assert settings.api.port == 9000


def test_database_url_is_taken_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_DATABASE_URL", "postgresql://u:p@db:5432/rota")
    assert Settings().effective_database_url == "postgresql://u:p@db:5432/rota"


def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_SCHEDULER__BUCKET_COUNT", "0")
    with pytest.raises(ValueError, match="bucket_count"):
        Settings()


def test_the_hot_window_must_outlast_the_loader_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job enters the schedule index at the first loader sync that sees it inside the
    window: a window shorter than the sync interval would let fires come late."""
    monkeypatch.setenv("ROTA_SCHEDULER__HOT_WINDOW_SECONDS", "10")
    with pytest.raises(pydantic.ValidationError, match="loader_interval_seconds"):
        Settings()
    monkeypatch.setenv("ROTA_SCHEDULER__LOADER_INTERVAL_SECONDS", "5")
    assert Settings().scheduler.hot_window_seconds == 10


def test_distributed_urls_fail_with_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_REDIS_URL", "redis://127.0.0.1:6379/0")
    with pytest.raises(ConfigurationError, match="ROTA_REDIS_URL"):
        build_runtime(Settings())


def test_the_job_data_limit_reaches_the_job_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings().api.max_job_data_bytes == 256 * 1024
    monkeypatch.setenv("ROTA_API__MAX_JOB_DATA_BYTES", "1000")
    settings = Settings(environment="test", data_dir=tmp_path)
    assert build_runtime(settings).jobs.max_job_data_bytes == 1000
    monkeypatch.setenv("ROTA_API__MAX_JOB_DATA_BYTES", "0")
    with pytest.raises(ValueError, match="max_job_data_bytes"):
        Settings()


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "gopher://example.com/", "ftp://example.com/x", "https://", "x"]
)
def test_webhook_urls_must_be_http_or_https(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("ROTA_ALERT_WEBHOOK_URL", url)
    with pytest.raises(pydantic.ValidationError) as refused:
        Settings()
    assert [e["loc"] for e in refused.value.errors()] == [("alert_webhook_url",)]
    assert "http:// or https://" in str(refused.value)
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        alert_webhook(url, 1.0)


def test_http_and_https_webhooks_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    for url in ("http://alerts.internal:8080/hook", "HTTPS://hooks.example.com/T0/B1"):
        monkeypatch.setenv("ROTA_ALERT_WEBHOOK_URL", url)
        assert Settings().alert_webhook_url == url


def test_a_bad_setting_stops_a_command_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ROTA_ALERT_WEBHOOK_URL", "file:///etc/passwd")
    result = CliRunner().invoke(app, ["user", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "ROTA_ALERT_WEBHOOK_URL: Value error, must be an http:// or https://" in result.output
    assert "Traceback" not in result.output


def test_cookie_security_is_one_rule() -> None:
    assert Settings(environment="production").cookies_secure
    assert Settings(environment="test").cookies_secure
    assert not Settings(environment="development").cookies_secure
    off = Settings(environment="production")
    off.auth.cookie_secure = False
    assert not off.cookies_secure


async def _client_seen(settings: Settings, peer: str, headers: list[tuple[bytes, bytes]]) -> str:
    """What the app sees (scheme and client address) of a request from ``peer`` through the
    middleware uvicorn puts in front of it with these settings."""
    seen: dict[str, object] = {}

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        seen.update(scope)

    config = http_config(app, settings)
    config.load()
    scope = {
        "type": "http",
        "scheme": "http",
        "client": (peer, 1234),
        "headers": headers,
    }
    await config.loaded_app(scope, None, None)
    client = seen["client"]
    assert isinstance(client, tuple)
    return f"{seen['scheme']} {client[0]}"


FORWARDED = [(b"x-forwarded-proto", b"https"), (b"x-forwarded-for", b"203.0.113.9")]


async def test_forwarded_headers_count_only_from_trusted_proxies() -> None:
    none = Settings(environment="test")
    assert await _client_seen(none, "127.0.0.1", FORWARDED) == "http 127.0.0.1"
    local = Settings(environment="test")
    local.api.trusted_proxies = "127.0.0.1, 10.0.0.0/8"
    assert await _client_seen(local, "127.0.0.1", FORWARDED) == "https 203.0.113.9"
    assert await _client_seen(local, "10.1.2.3", FORWARDED) == "https 203.0.113.9"
    assert await _client_seen(local, "192.0.2.7", FORWARDED) == "http 192.0.2.7"


def test_the_json_depth_limit_reaches_the_job_service_within_its_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings().api.max_json_depth == 64
    monkeypatch.setenv("ROTA_API__MAX_JSON_DEPTH", "10")
    settings = Settings(environment="test", data_dir=tmp_path)
    assert build_runtime(settings).jobs.max_json_depth == 10
    for beyond in ("0", "129"):  # 128: what the wire takes (MAX_JSON_DEPTH)
        monkeypatch.setenv("ROTA_API__MAX_JSON_DEPTH", beyond)
        with pytest.raises(ValueError, match="max_json_depth"):
            Settings()


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(("value", "formatter"), [("json", JsonFormatter), ("text", TextFormatter)])
def test_rota_log_format_chooses_the_log_lines(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    root_logging: logging.Logger,
    value: str,
    formatter: type[logging.Formatter],
) -> None:
    monkeypatch.setenv("ROTA_LOG_FORMAT", value)
    assert Settings().log_format == value
    result = CliRunner().invoke(app, ["user", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert isinstance(root_logging.handlers[0].formatter, formatter)


def test_a_bad_log_format_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROTA_LOG_FORMAT", "yaml")
    result = CliRunner().invoke(app, ["user", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "ROTA_LOG_FORMAT: Input should be 'json' or 'text'" in result.output
    monkeypatch.delenv("ROTA_LOG_FORMAT")
    option = CliRunner().invoke(app, ["dev", "--log-format", "yaml"])
    assert option.exit_code == 2
    assert "--log-format" in option.output


def test_the_root_path_is_a_path_without_a_trailing_slash() -> None:
    assert Settings(environment="test", api={"root_path": "/rota"}).api.root_path == "/rota"
    assert Settings(environment="test", api={"root_path": "/a/b"}).api.root_path == "/a/b"
    for bad in ("rota", "/rota/", "/", "/ro ta", "//rota"):
        with pytest.raises(pydantic.ValidationError):
            Settings(environment="test", api={"root_path": bad})
