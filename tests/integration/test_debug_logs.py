"""No secret in a log, debug level included (issue 33): the paths that leaked — the SQLite
driver's debug lines (every statement's parameters: password hashes, webhook secrets), a URL
in a message or an exception (a connection error naming its URL), the repr of a user or a
subscription — written through Rota's log configuration, captured, and searched."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from rota.app.startup import wait_for
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.notifications import Channel, NotificationEvent, Subscription
from rota.core.security import Role
from rota.observability.logs import QUIET_LOGGERS, configure
from rota.services.auth import AuthConfig, AuthService
from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore
from rota.stores.sql.engine import create_store_engine

WEBHOOK_SECRET = "whsec-debug-0123456789abcdef"
URL_TOKEN = "tok-debug-abcdef0123456789"
PASSWORD = "a debug passphrase 77"
DB_PASSWORD = "pg-debug-Pa55"


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    """Rota's log configuration at debug level (JSON lines) into a buffer; the logging
    configuration as it was afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    buffer = io.StringIO()
    configure("debug", buffer, fmt="json")
    try:
        yield buffer
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        for name, old in levels.items():
            logging.getLogger(name).setLevel(old)


async def test_store_writes_at_debug_level_log_no_hash_and_no_webhook_secret(
    debug_log: io.StringIO, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'rota.db'}"
    await upgrade(url)
    store = SqlStore(url)
    await store.open()
    hasher = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
    auth = AuthService(
        store, AuthConfig(secret=b"d" * 32), lambda: datetime.now(UTC), hasher=hasher
    )
    try:
        user = await auth.create_user("ada", PASSWORD, Role.ADMIN)
        await auth.login("ada", PASSWORD)
        now = datetime.now(UTC)
        subscription = Subscription(
            id=new_id(),
            name="hook",
            events=frozenset({NotificationEvent.OCCURRENCE_FAILED}),
            channel=Channel.WEBHOOK,
            url=f"https://hooks.example.com/in?token={URL_TOKEN}",
            secret=WEBHOOK_SECRET,
            created_at=now,
            updated_at=now,
        )
        await store.create_subscription(subscription)
        await store.list_subscriptions()
        logging.getLogger("rota.test").debug("user %r, subscription %r", user, subscription)
    finally:
        auth.close()
        await store.close()
    text = debug_log.getvalue()
    assert '"level": "DEBUG"' in text or '"level":"DEBUG"' in text
    for secret in ("$argon2", WEBHOOK_SECRET, URL_TOKEN, PASSWORD):
        assert secret not in text, f"{secret!r} logged"
    assert "token=***" in text  # the subscription's URL, masked


async def test_urls_in_messages_and_exceptions_are_masked(debug_log: io.StringIO) -> None:
    url = f"redis://:{DB_PASSWORD}@127.0.0.1:1/0?token={URL_TOKEN}"
    log = logging.getLogger("redis.test")
    log.debug("connecting to %s", url)
    try:
        raise ConnectionError(f"Error 111 connecting to {url}. Connection refused.")
    except ConnectionError:
        log.exception("the connection failed")

    async def refused() -> None:
        raise BackendUnavailableError(f"could not connect to postgresql://rota:{DB_PASSWORD}@db/x")

    with pytest.raises(BackendUnavailableError) as waited:
        await wait_for("the database", f"postgresql://rota:{DB_PASSWORD}@db/x", refused, within=0)
    assert DB_PASSWORD not in str(waited.value)
    lines = [json.loads(line) for line in debug_log.getvalue().splitlines()]
    text = json.dumps(lines)
    assert DB_PASSWORD not in text
    assert URL_TOKEN not in text
    assert any("redis://:***@127.0.0.1:1/0?token=***" in line["message"] for line in lines)
    assert any(
        "Error 111 connecting to redis://:***@" in line.get("exception", "") for line in lines
    )


async def test_a_driver_error_carries_no_statement_parameters(url: str) -> None:
    """A failed statement's error text (logged, or turned into a problem) names the statement,
    never its parameters: a password hash, a webhook secret, job data."""
    engine = create_store_engine(url)
    try:
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(
                    text("INSERT INTO no_such_table (secret) VALUES (:secret)"),
                    {"secret": "s3cret-parameter-value"},
                )
        assert "s3cret-parameter-value" not in str(caught.value)
        assert "no_such_table" in str(caught.value)
    finally:
        await engine.dispose()
