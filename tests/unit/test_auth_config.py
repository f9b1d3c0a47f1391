"""The token key and auth settings: required in production, generated and kept in development;
``rota user`` commands."""

from __future__ import annotations

import io
import secrets
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr
from rich.console import Console
from typer.testing import CliRunner

from rota.app.configs import auth_config, auth_secret
from rota.app.server import ensure_dev_admin, prepare
from rota.app.settings import Settings
from rota.app.wiring import build_runtime
from rota.cli import app
from rota.core.errors import ConfigurationError
from tests.helpers import settings_for


def test_production_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    settings = Settings(environment="production", data_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="ROTA_AUTH_SECRET is not set"):
        build_runtime(settings)
    assert not (tmp_path / "auth-secret").exists()


def test_a_short_secret_is_refused_everywhere(tmp_path: Path) -> None:
    for environment in ("production", "development"):
        settings = Settings(
            environment=environment, data_dir=tmp_path, auth_secret=SecretStr("x" * 31)
        )
        with pytest.raises(ConfigurationError, match="at least 32"):
            auth_secret(settings)


def test_a_set_secret_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = secrets.token_urlsafe(48)
    monkeypatch.setenv("ROTA_AUTH_SECRET", key)
    settings = Settings(environment="production", data_dir=tmp_path)
    assert auth_secret(settings) == key.encode()


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        ("a" * 40, "repeats a short pattern"),
        ("password" * 5, "repeats a short pattern"),
        ("hunter2-" * 5, "repeats a short pattern"),
        ("abcdefghijklmnopqrstuvwxyz0123456789", "run of neighbouring characters"),
        ("my-super-secret-key-for-rota-prod", "made of common words"),
        ("changeme-changeme-please-rota-secret", "made of common words"),
        ("0110100110010110100101100110100101101001", "bits of entropy"),
    ],
)
def test_production_refuses_a_guessable_secret(tmp_path: Path, secret: str, why: str) -> None:
    settings = Settings(environment="production", data_dir=tmp_path, auth_secret=SecretStr(secret))
    with pytest.raises(ConfigurationError) as refused:
        auth_secret(settings)
    message = refused.value.message
    assert why in message
    assert "ROTA_AUTH_SECRET" in message
    assert "secrets.token_urlsafe(48)" in message
    # where the length is all that is asked (rota dev, tests) it is taken
    for environment in ("development", "test"):
        relaxed = settings.model_copy(update={"environment": environment})
        assert auth_secret(relaxed) == secret.encode()


def test_production_takes_random_secrets_of_the_usual_forms(tmp_path: Path) -> None:
    for _ in range(200):
        for secret in (secrets.token_urlsafe(48), secrets.token_hex(16), secrets.token_hex(32)):
            settings = Settings(
                environment="production", data_dir=tmp_path, auth_secret=SecretStr(secret)
            )
            assert auth_secret(settings) == secret.encode()


def test_rota_server_stops_at_start_with_a_weak_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROTA_AUTH_SECRET", "a" * 40)
    monkeypatch.setenv("ROTA_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["server", "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "ROTA_AUTH_SECRET is too weak" in result.output


def test_development_generates_one_secret_per_data_dir(tmp_path: Path) -> None:
    settings = Settings(environment="development", data_dir=tmp_path / "data")
    first = auth_secret(settings)
    assert len(first) >= 32
    path = tmp_path / "data" / "auth-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert auth_secret(settings) == first
    other = Settings(environment="development", data_dir=tmp_path / "other")
    assert auth_secret(other) != first


def test_auth_settings_reach_the_service(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROTA_AUTH__ACCESS_TOKEN_MINUTES", "5")
    monkeypatch.setenv("ROTA_AUTH__MAX_FAILED_LOGINS", "3")
    monkeypatch.setenv("ROTA_AUTH__LOCKOUT_MINUTES", "2")
    config = auth_config(Settings(environment="test", data_dir=tmp_path))
    assert config.access_ttl.total_seconds() == 300
    assert config.max_failed_logins == 3
    assert config.lockout.total_seconds() == 120
    monkeypatch.setenv("ROTA_AUTH__ACCESS_TOKEN_MINUTES", "16")
    with pytest.raises(ValueError, match="access_token_minutes"):
        Settings(environment="test", data_dir=tmp_path)


def test_rota_user_commands(data_dir: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(data_dir)]
    created = runner.invoke(
        app,
        ["user", "create", "Alice", "--role", "admin", "--password-stdin", *data],
        input="alice's long passphrase\n",
    )
    assert created.exit_code == 0, created.output
    weak = runner.invoke(app, ["user", "create", "bob", "--password-stdin", *data], input="short\n")
    assert weak.exit_code == 2
    assert "at least 12" in weak.output
    bad_role = runner.invoke(
        app, ["user", "create", "bob", "--role", "owner", "--password-stdin", *data], input="x\n"
    )
    assert bad_role.exit_code == 2
    reset = runner.invoke(
        app, ["user", "password", "alice", "--password-stdin", *data], input="a new passphrase!\n"
    )
    assert reset.exit_code == 0, reset.output
    missing = runner.invoke(
        app, ["user", "password", "nobody", "--password-stdin", *data], input="a new passphrase!\n"
    )
    assert missing.exit_code == 2
    listed = runner.invoke(app, ["user", "list", *data])
    assert listed.exit_code == 0
    assert listed.stdout.split() == ["alice", "Admin", "active"]


def test_rota_user_commands_apply_the_password_policy(data_dir: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(data_dir)]
    spaces = runner.invoke(
        app, ["user", "create", "bob", "--password-stdin", *data], input=" " * 11 + "a\n"
    )
    assert spaces.exit_code == 2
    assert "at least 12 characters" in spaces.output
    assert "password" in spaces.output
    made = runner.invoke(
        app, ["user", "create", "bob", "--password-stdin", *data], input="bob's long passphrase\n"
    )
    assert made.exit_code == 0, made.output
    common = runner.invoke(
        app, ["user", "password", "bob", "--password-stdin", *data], input="Changeme2024!\n"
    )
    assert common.exit_code == 2
    assert "most common passwords" in common.output


@pytest.mark.parametrize(
    ("password", "why"),
    [(" " * 11 + "a", "at least 12"), ("Password123!", "too easy to guess")],
)
async def test_a_weak_admin_password_from_the_environment_stops_the_start(
    tmp_path: Path, password: str, why: str
) -> None:
    """ROTA_ADMIN_PASSWORD is held to the policy in every environment, development too: a
    weak one ends the start (while no Admin exists), naming the variables and why."""
    for environment in ("production", "development"):
        settings = settings_for(
            tmp_path / environment,
            environment=environment,
            auth_secret=SecretStr(secrets.token_urlsafe(48)),
            admin_user="root",
            admin_password=SecretStr(password),
        )
        runtime = await prepare(settings, [])
        try:
            with pytest.raises(ConfigurationError, match=f"ROTA_ADMIN_PASSWORD: .*{why}"):
                await runtime.start()
        finally:
            await runtime.stop(grace=0)


async def test_rota_dev_prints_a_generated_admin_once(data_dir: Path) -> None:
    settings = Settings(environment="development", data_dir=data_dir)
    runtime = await prepare(settings, [])
    await runtime.store.open()
    try:
        out = io.StringIO()
        await ensure_dev_admin(runtime, Console(file=out, width=120), "http://127.0.0.1:8000")
        text = out.getvalue()
        assert "username: admin" in text
        password = text.split("password: ")[1].split()[0]
        tokens = await runtime.auth.login("admin", password)
        assert (await runtime.auth.authenticate(tokens.access_token)).username == "admin"
        again = io.StringIO()
        await ensure_dev_admin(runtime, Console(file=again, width=200), "http://127.0.0.1:8000")
        assert "password: " not in again.getvalue()
        assert "rota user password" in again.getvalue()
    finally:
        await runtime.store.close()
