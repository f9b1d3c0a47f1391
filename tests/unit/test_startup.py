"""Start-up waits for its backing services, with messages that name them (no password)."""

from __future__ import annotations

import logging
import time

import pytest

from rota.app.startup import redact_url, wait_for
from rota.core.errors import BackendUnavailableError
from rota.stores.sql import SqlStore


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("amqp://guest:secret@mq:5672/vh") == "amqp://guest:***@mq:5672/vh"
    assert (
        redact_url("postgresql+asyncpg://rota:p%40ss@db/rota?ssl=1")
        == "postgresql+asyncpg://rota:***@db/rota?ssl=1"
    )
    assert redact_url("redis://localhost:6379/0") == "redis://localhost:6379/0"
    assert redact_url("sqlite:///x.db") == "sqlite:///x.db"


async def test_wait_for_retries_until_the_service_answers(caplog: pytest.LogCaptureFixture) -> None:
    tries = 0

    async def attempt() -> None:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise BackendUnavailableError("connection refused")

    with caplog.at_level(logging.INFO, logger="rota.app.startup"):
        await wait_for("Redis", "redis://u:pw@cache:6379/0", attempt, within=10)
    assert tries == 3
    waits = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(waits) == 2
    assert "Redis at redis://u:***@cache:6379/0" in waits[0]
    assert "pw" not in "".join(waits)
    assert any("is up" in r.getMessage() for r in caplog.records)


async def test_wait_for_gives_up_naming_the_service() -> None:
    url = "postgresql://postgres:hunter2@127.0.0.1:1/rota_nowhere"
    store = SqlStore(url)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as info:
        await wait_for("the database", url, store.open, within=1.0)
    assert time.monotonic() - started < 10
    text = str(info.value)
    assert "the database at postgresql://postgres:***@127.0.0.1:1/rota_nowhere" in text
    assert "did not answer within 1 s" in text
    assert "hunter2" not in text


async def test_other_errors_are_not_retried() -> None:
    tries = 0

    async def attempt() -> None:
        nonlocal tries
        tries += 1
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError, match="a bug"):
        await wait_for("RabbitMQ", "amqp://localhost", attempt, within=10)
    assert tries == 1
