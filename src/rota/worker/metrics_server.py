"""A small HTTP endpoint of its own: ``GET /metrics`` (Prometheus text format) and ``GET
/health`` (JSON; for a worker, 200 while it takes jobs, 503 once it stops), with the probes
``GET /health/ready`` (the same) and ``GET /health/live`` (200 while the process answers):
a worker's (``ROTA_WORKER__HEALTH_PORT``: the health routes only; ``ROTA_WORKER__METRICS_PORT``:
metrics and health) and a server's when its metrics have a port of their own
(``ROTA_METRICS__PORT``). It runs in the process's event loop: a loop too blocked to answer
is also a failed health check."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from rota.core.errors import ConfigurationError
from rota.observability.metrics import CONTENT_TYPE, RotaMetrics, scrape_allowed

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 8192
READ_TIMEOUT = 5.0

Health = Callable[[], tuple[bool, Mapping[str, Any]]]
"""``() -> (healthy, details)``."""


class MetricsServer:
    """Serves ``/metrics`` and ``/health`` on ``host:port`` (port 0: any free port, read
    :attr:`port` after :meth:`start`)."""

    def __init__(
        self,
        metrics: RotaMetrics | None,
        health: Health | None,
        *,
        host: str,
        port: int,
        token: str | None = None,
        refresh: Callable[[], Awaitable[None]] | None = None,
        setting: str = "ROTA_WORKER__METRICS_PORT",
    ) -> None:
        """``metrics``: ``None`` serves no ``/metrics`` (a worker's health endpoint);
        ``health``: ``None`` serves no ``/health`` (a server answers it on the API's
        port); ``refresh()``: brings the gauges up to date before each scrape; ``setting``:
        the port's setting, named when it cannot be served."""
        self._refresh = refresh
        self._setting = setting
        self._metrics = metrics
        self._token = token
        self._health = health
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self.port = port

    async def start(self) -> None:
        """Listen; ``ConfigurationError`` naming the address when it cannot (port taken)."""
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {self._host}:{self._port} "
                f"({self._setting}): {exc.strerror or exc}"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        what = "health" if self._metrics is None else "metrics and health"
        log.info(
            "%s on http://%s:%d", what, self._host, self.port,
            extra={"action": "metrics_server", "port": self.port},
        )  # fmt: skip

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            status, content_type, body = await self._respond(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, content_type, body = "400 Bad Request", "text/plain", b"bad request\n"
        except Exception:
            log.exception("worker metrics endpoint failed")
            status, content_type, body = "500 Internal Server Error", "text/plain", b"error\n"
        head_out = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(Exception):
            writer.write(head_out.encode() + body)
            await writer.drain()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    async def _respond(self, head: bytes) -> tuple[str, str, bytes]:
        if len(head) > MAX_REQUEST_BYTES:
            return "400 Bad Request", "text/plain", b"request too large\n"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method != b"GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if target == b"/metrics" and self._metrics is not None:
            if not scrape_allowed(_header(head, b"authorization"), self._token):
                return "401 Unauthorized", "text/plain", b"send Authorization: Bearer <token>\n"
            if self._refresh is not None:
                await self._refresh()  # the gauges that are read when scraped
            return "200 OK", CONTENT_TYPE, self._metrics.exposition()
        if target == b"/health/live" and self._health is not None:
            return "200 OK", "application/json", b'{"status":"ok"}'  # the loop answered
        if target in (b"/health", b"/health/ready") and self._health is not None:
            healthy, details = self._health()
            body = orjson.dumps({"status": "ok" if healthy else "unavailable", **details})
            return ("200 OK" if healthy else "503 Service Unavailable"), "application/json", body
        return "404 Not Found", "text/plain", b"not found: try /metrics or /health\n"


def _header(head: bytes, name: bytes) -> str | None:
    """The value of header ``name`` (lowercase) in a request head, if it has one."""
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None
