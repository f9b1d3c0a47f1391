"""RabbitMQ for the contract suites: a fresh vhost per test run on the local server
(``ROTA_TEST_AMQP_HOST``/``_PORT``, default 127.0.0.1:5672, user guest/guest), deleted at the
end. The vhost is made through the management HTTP API when it answers (port 15672), else with
``rabbitmqctl``. Each test then uses a name prefix of its own inside the vhost.

Unreachable RabbitMQ skips the tests, or fails them when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

AMQP_HOST = os.environ.get("ROTA_TEST_AMQP_HOST", "127.0.0.1")
AMQP_PORT = int(os.environ.get("ROTA_TEST_AMQP_PORT", "5672"))
MANAGEMENT = f"http://{AMQP_HOST}:15672/api"
USER, PASSWORD = "guest", "guest"


@functools.cache
def _amqp_error() -> str | None:
    """``None`` when the AMQP port answers, else why not (asked once per session)."""
    try:
        with socket.create_connection((AMQP_HOST, AMQP_PORT), timeout=2):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def _unavailable(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _management() -> httpx.Client | None:
    client = httpx.Client(base_url=MANAGEMENT, auth=(USER, PASSWORD), timeout=5)
    try:
        client.get("/overview").raise_for_status()
    except httpx.HTTPError:
        client.close()
        return None
    return client


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


class _Vhosts:
    """Creates and deletes vhosts by whichever means this machine offers."""

    def __init__(self) -> None:
        self.http = _management()
        if self.http is None and shutil.which("rabbitmqctl") is None:
            _unavailable("RabbitMQ: neither the management API nor rabbitmqctl is available")

    def create(self, name: str) -> None:
        permissions = {"configure": ".*", "write": ".*", "read": ".*"}
        if self.http is not None:
            vhost = quote(name, safe="")
            self.http.put(f"/vhosts/{vhost}").raise_for_status()
            self.http.put(f"/permissions/{vhost}/{USER}", json=permissions).raise_for_status()
            return
        _rabbitmqctl("add_vhost", name)
        _rabbitmqctl("set_permissions", "-p", name, USER, ".*", ".*", ".*")

    def delete(self, name: str) -> None:
        if self.http is not None:
            self.http.delete(f"/vhosts/{quote(name, safe='')}").raise_for_status()
            self.http.close()
            return
        _rabbitmqctl("delete_vhost", name)


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """An AMQP URL on a vhost made for this test run (deleted afterwards)."""
    error = _amqp_error()
    if error is not None:
        _unavailable(f"RabbitMQ unreachable at {AMQP_HOST}:{AMQP_PORT}: {error}")
    vhosts = _Vhosts()
    name = f"rota-test-{uuid.uuid4().hex[:12]}"
    try:
        vhosts.create(name)
    except (httpx.HTTPError, subprocess.SubprocessError, OSError) as exc:
        with contextlib.suppress(httpx.HTTPError, subprocess.SubprocessError, OSError):
            vhosts.delete(name)
        _unavailable(f"RabbitMQ: cannot create vhost {name}: {exc}")
    try:
        yield f"amqp://{USER}:{PASSWORD}@{AMQP_HOST}:{AMQP_PORT}/{quote(name, safe='')}"
    finally:
        vhosts.delete(name)
