"""Real local servers for the built-in workers' tests: an HTTP server of the test's own on
loopback (a thread), an SMTP server (aiosmtpd, in the test's loop), and running one job of a
built-in type through an embedded runtime to its final status."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rota.app.runtime import Runtime
from rota.core.models import Occurrence
from rota.core.records import OccurrenceQuery
from tests.helpers import eventually

BIG = 200 * 1024


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, parts.path, dict(self.headers), body))
        if parts.path == "/echo":
            echoed = {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers),
                "body": body.decode(),
            }
            self._send(200, json.dumps(echoed).encode(), {"Content-Type": "application/json"})
        elif parts.path.startswith("/status/"):
            self._send(int(parts.path.rsplit("/", 1)[1]), b"status body")
        elif parts.path == "/flaky":  # 503 for the first `fails` calls
            self.server.flaky_calls += 1
            if self.server.flaky_calls <= int(query.get("fails", "1")):
                self._send(503, b"try later")
            else:
                self._send(200, b"recovered")
        elif parts.path == "/big":
            self._send(200, b"x" * BIG, {"Content-Type": "text/plain"})
        elif parts.path == "/redirect":
            self._send(int(query.get("status", "302")), b"", {"Location": query["to"]})
        else:
            self._send(404, b"no such path")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _route


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.flaky_calls = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def http_server(tls: ssl.SSLContext | None = None) -> Iterator[_Server]:
    """The test's HTTP server on 127.0.0.1 (HTTPS with ``tls``) in a thread of its own."""
    server = _Server()
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class Mailbox:
    """What the test SMTP server received."""

    port: int
    envelopes: list[Any] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)


class _Collect:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.box.envelopes.append(envelope)
        return "250 OK queued"

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if address.startswith("bounce@"):
            return "550 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"


@asynccontextmanager
async def smtp_server(
    *, users: dict[str, str] | None = None, tls: ssl.SSLContext | None = None
) -> AsyncIterator[Mailbox]:
    """An SMTP server on loopback (aiosmtpd) in the running loop; with ``users``, AUTH is
    required and checked (over plain TCP: a test server only); with ``tls``, STARTTLS is
    offered and required."""
    from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

    box = Mailbox(port=0)
    handler = _Collect(box)

    def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        ok = (
            users is not None
            and isinstance(data, LoginPassword)
            and users.get(data.login.decode()) == data.password.decode()
        )
        if ok:
            box.logins.append((data.login.decode(), mechanism))
        return AuthResult(success=ok, handled=False)

    sessions: list[SMTP] = []

    def factory() -> SMTP:
        with warnings.catch_warnings():  # AUTH without TLS: fine for a test on loopback
            warnings.simplefilter("ignore")
            session = SMTP(
                handler,
                hostname="smtp.test",
                authenticator=authenticator if users else None,
                auth_required=bool(users),
                auth_require_tls=False,
                tls_context=tls,
                require_starttls=tls is not None,
            )
        sessions.append(session)
        return session

    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    box.port = server.sockets[0].getsockname()[1]
    try:
        yield box
    finally:
        server.close()
        for session in sessions:
            if session.transport is not None:
                session.transport.close()
        await server.wait_closed()
        await asyncio.sleep(0.01)  # the transports' close callbacks


async def run_job(
    rt: Runtime, job_type: str, data: Any, *, within: float = 20, **fields: Any
) -> Occurrence:
    """Create a one-time job of ``job_type`` due now and wait for its occurrence's final
    status; the occurrence with its history."""
    job = await rt.jobs.create_job(
        {"job_type": job_type, "execute_at": rt.jobs.now(), "job_data": data, **fields}
    )

    async def final() -> Occurrence | None:
        page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job.id))
        if page.items and page.items[0].status.is_terminal:
            return page.items[0]
        return None

    await eventually(final, within, f"a final status of {job_type}")
    occ = await final()
    assert occ is not None
    return await rt.store.get_occurrence(occ.id)


async def wait_for_log(rt: Runtime, occ: Occurrence, *parts: str, within: float = 10) -> None:
    """Wait until a log line of ``occ`` holds every one of ``parts`` (log lines are stored
    by their own batches, maybe after the final status)."""

    async def found() -> bool:
        lines = [r.message for _, r in await rt.store.occurrence_logs(occ.id)]
        return any(all(p in line for p in parts) for line in lines)

    await eventually(found, within, f"a log line with {parts}")


def self_signed(directory: Path, name: str = "IP:127.0.0.1") -> ssl.SSLContext:
    """A server TLS context with a certificate for ``name`` (a subjectAltName) made by
    ``openssl`` now, in ``directory/cert.pem``."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=rota-test",
         "-addext", f"subjectAltName={name}"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
