"""No secret on a console or in a log (issue 33): ``rota server`` on a PostgreSQL URL that
holds a password, at debug level, signed in to, given a user and a webhook subscription:
its console and log name the store with the password masked, and hold neither a password
hash nor the webhook's secret nor its URL's ``?token=``."""

from __future__ import annotations

from pathlib import Path

import httpx

from .conftest import ADMIN_PASSWORD, ADMIN_USER, free_port, wait_until
from .distributed import Proc, Server, distributed_env  # noqa: F401  (fixture)

DB_PASSWORD = "pg-Pa55word-e2e"
"""PostgreSQL's test server trusts local connections: the password is sent and ignored."""
WEBHOOK_SECRET = "whsec-e2e-0123456789abcdef"
URL_TOKEN = "tok-e2e-abcdef0123456789"
USER_PASSWORD = "a user's e2e passphrase"


class DebugServer(Server):
    """``rota server`` at debug level."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/api/v1"
        Proc.__init__(self, ["server", "--port", str(self.port), "--log-level", "debug"], env, log)


def test_the_server_console_and_debug_log_hold_no_secret(
    distributed_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    url = distributed_env["ROTA_DATABASE_URL"].replace(
        "postgresql://postgres@", f"postgresql://postgres:{DB_PASSWORD}@"
    )
    url += f"?password={DB_PASSWORD}"
    env = {**distributed_env, "ROTA_DATABASE_URL": url}
    log = tmp_path / "server.log"
    server = DebugServer(env, log)
    try:
        wait_until(server.ready, 60, f"server not ready: {server.tail()}")
        login = {"username": ADMIN_USER, "password": ADMIN_PASSWORD}
        answer = httpx.post(f"{server.base}/auth/login", json=login, timeout=10)
        assert answer.status_code == 200, answer.text
        headers = {"Authorization": f"Bearer {answer.json()['accessToken']}"}
        user = {"username": "e2e-ada", "password": USER_PASSWORD, "role": "Viewer"}
        made = httpx.post(f"{server.base}/users", json=user, headers=headers, timeout=30)
        assert made.status_code == 201, made.text
        subscription = {
            "name": "e2e hook",
            "events": ["occurrence.failed"],
            "channel": "webhook",
            "url": f"https://hooks.example.com/in?channel=ops&token={URL_TOKEN}",
            "secret": WEBHOOK_SECRET,
        }
        hook = httpx.post(
            f"{server.base}/notifications/subscriptions",
            json=subscription,
            headers=headers,
            timeout=10,
        )
        assert hook.status_code == 201, hook.text
        shown = httpx.get(f"{server.base}/admin/config", headers=headers, timeout=10).text
        assert DB_PASSWORD not in shown
    finally:
        server.stop()
    text = log.read_text(errors="replace")
    assert "store: postgresql://postgres:***@127.0.0.1" in text, text[-3000:]
    assert "DEBUG" in text, "the server did not log at debug level"
    for secret in (DB_PASSWORD, WEBHOOK_SECRET, URL_TOKEN, USER_PASSWORD, "$argon2"):
        assert secret not in text, f"{secret!r} in the server's output"
