"""Notifications end to end through the embedded runtime: a job fails for good (or times out,
or is auto-disabled) and its notification arrives, signed, at a webhook receiver of the
test's own on loopback (allowed explicitly in the settings) and by email at a local SMTP
server (aiosmtpd); a receiver that fails at first gets the delivery again, with the attempts
in the delivery log."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

import httpx
import orjson
import pytest
from aiosmtpd.controller import Controller

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.core.notifications import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Channel,
    NotificationEvent,
    verify,
)
from rota.services.notifications import SubscriptionInput
from tests.api_client import api_client
from tests.helpers import RuntimeFactory, eventually

SUBS = "/api/v1/notifications/subscriptions"
SECRET = "the receiver's shared secret"
JOBS = ["tests.integration.notify_jobs"]
FAST = {
    "notifications.interval_seconds": 0.1,
    "notifications.backoff_base_seconds": 0.2,
    "notifications.allow_networks": "127.0.0.0/8",
}


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    """A minimal HTTP server on loopback that answers each POST with the next status of
    ``answers`` (then 200) and keeps what it received."""

    answers: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.received.append(Received(headers, body))
        status = self.answers.pop(0) if self.answers else 200
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    made = Receiver()
    server = await asyncio.start_server(made.handle, "127.0.0.1", 0)
    made.port = server.sockets[0].getsockname()[1]
    async with server:
        yield made
        server.close()


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


@contextlib.asynccontextmanager
async def admin(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(create_app(runtime, dashboard=False), "admin") as http:
        yield http


async def subscribe(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await http.post(SUBS, json=body)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


def signed(got: Received) -> bool:
    return verify(
        SECRET, got.headers[TIMESTAMP_HEADER.lower()], got.body,
        got.headers[SIGNATURE_HEADER.lower()], time.time(),
    )  # fmt: skip


async def test_a_failed_job_is_told_by_signed_webhook_and_by_email(
    runtime_factory: RuntimeFactory, receiver: Receiver, mailbox: tuple[Mailbox, int]
) -> None:
    box, smtp_port = mailbox
    rt = await runtime_factory(
        FAST | {"smtp.host": "127.0.0.1", "smtp.port": smtp_port, "smtp.starttls": False,
                "smtp.from_address": "rota@example.org"},
        JOBS,
    )  # fmt: skip
    async with admin(rt) as http:
        hook = await subscribe(
            http, name="hook", events=["occurrence.failed"], channel="webhook",
            url=receiver.url, secret=SECRET, tag="billing",
        )  # fmt: skip
        await subscribe(
            http, name="mail", events=["occurrence.failed"], channel="email",
            recipients=["ops@example.org"],
        )  # fmt: skip
        await subscribe(  # another tag: not told
            http, name="other", events=["occurrence.failed"], channel="webhook",
            url=receiver.url + "/other", secret=SECRET, tag="marketing",
        )  # fmt: skip
        job = await rt.jobs.create_job(
            {"job_type": "it.notify.fails", "execute_at": rt.jobs.now(), "tags": ["billing"]}
        )
        await eventually(lambda: receiver.received and box.messages, 20, "webhook and email")
        [got] = receiver.received
        assert signed(got)
        assert got.headers["content-type"] == "application/json"
        assert got.headers["x-rota-event"] == "occurrence.failed"
        body = got.json()
        assert body["event"] == "occurrence.failed"
        assert body["jobId"] == str(job.id)
        assert body["jobType"] == "it.notify.fails"
        assert body["tags"] == ["billing"]
        assert body["data"]["status"] == "Failed"
        assert "ValueError: the report server said no" in body["data"]["exception"]
        assert got.headers["x-rota-delivery"] == body["id"]
        # tampered with, or replayed later: refused by the receiver's check
        assert not verify(SECRET, got.headers["x-rota-timestamp"], got.body + b" ",
                          got.headers["x-rota-signature"], time.time())  # fmt: skip
        assert not verify(SECRET, got.headers["x-rota-timestamp"], got.body,
                          got.headers["x-rota-signature"], time.time() + 3600)  # fmt: skip
        [mail] = box.messages
        assert mail["To"] == "ops@example.org"
        assert mail["From"] == "rota@example.org"
        assert "occurrence.failed" in mail["Subject"]
        assert str(job.id) in mail.get_payload()
        # the delivery log
        log: dict[str, Any] = {}

        async def recorded() -> bool:  # the receiver answered; the log follows
            log.update((await http.get(f"{SUBS}/{hook['id']}/deliveries")).json())
            return [d["state"] for d in log["deliveries"]] == ["delivered"]

        await eventually(recorded, 10, "the delivery recorded as delivered")
        assert [(a["ok"], a["statusCode"]) for a in log["attempts"]] == [(True, 200)]
    await asyncio.sleep(0.3)
    assert len(receiver.received) == 1  # once, and not to the other tag's subscription
    counted = rt.metrics.notifications

    def both_counted() -> bool:
        webhook = counted.labels("webhook", "delivered")._value.get()
        return webhook == counted.labels("email", "delivered")._value.get() == 1

    await eventually(both_counted, 10, "one webhook and one email counted as delivered")


async def test_a_failing_receiver_gets_it_again_after_a_backoff(
    runtime_factory: RuntimeFactory, receiver: Receiver
) -> None:
    receiver.answers = [500, 503]
    rt = await runtime_factory(FAST | {"scheduler.auto_disable_threshold": 1}, JOBS)
    async with admin(rt) as http:
        hook = await subscribe(
            http, name="hook", channel="webhook", url=receiver.url, secret=SECRET,
            events=["occurrence.timed_out", "job.auto_disabled"],
        )  # fmt: skip
        job = await rt.jobs.create_job({"job_type": "it.notify.slow", "execute_at": rt.jobs.now()})

        def both_delivered() -> bool:
            events = [r.json()["event"] for r in receiver.received]
            return events.count("occurrence.timed_out") == events.count("job.auto_disabled") == 2

        await eventually(both_delivered, 20, "a timed-out and an auto-disabled notice")
        assert all(signed(r) for r in receiver.received)
        assert len(receiver.received) == 4  # two refused, then each delivered once
        disabled = next(
            r.json() for r in receiver.received if r.json()["event"] == "job.auto_disabled"
        )
        assert disabled["jobId"] == str(job.id)
        log: dict[str, Any] = {}

        async def both_recorded() -> bool:  # the receiver answered; the log follows
            log.update((await http.get(f"{SUBS}/{hook['id']}/deliveries")).json())
            return [d["state"] for d in log["deliveries"]] == ["delivered", "delivered"]

        await eventually(both_recorded, 10, "both deliveries recorded as delivered")
        codes = sorted(a["statusCode"] for a in log["attempts"])
        assert codes == [200, 200, 500, 503]
        assert {a["error"] for a in log["attempts"] if not a["ok"]} == {
            "answered 500", "answered 503",
        }  # fmt: skip


async def test_loopback_is_refused_unless_allowed(
    runtime_factory: RuntimeFactory, receiver: Receiver
) -> None:
    rt = await runtime_factory(
        {"notifications.interval_seconds": 0.1, "notifications.max_attempts": 1}, JOBS
    )
    async with admin(rt) as http:
        # localhost is loopback without a look-up: refused when subscribed
        refused = await http.post(SUBS, json={
            "name": "hook", "channel": "webhook", "events": ["occurrence.failed"],
            "url": f"http://localhost:{receiver.port}/hook", "secret": SECRET,
        })  # fmt: skip
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == "url"
        # a host name is checked when sent too (one stored before, or whose DNS changed)
        stored = await rt.notifications.create_subscription(
            SubscriptionInput(
                name="hook", events=frozenset({NotificationEvent.OCCURRENCE_FAILED}),
                channel=Channel.WEBHOOK, url=f"http://localhost:{receiver.port}/hook",
                secret=SECRET,
            ),
            "test",
        )  # fmt: skip
        hook = {"id": str(stored.id)}
        await rt.jobs.create_job({"job_type": "it.notify.fails", "execute_at": rt.jobs.now()})

        async def given_up() -> list[dict[str, Any]]:
            log = (await http.get(f"{SUBS}/{hook['id']}/deliveries")).json()
            return [d for d in log["deliveries"] if d["state"] == "failed"]

        [failed] = await _wait(given_up)
        assert "refused" in failed["lastError"]
        assert "loopback" in failed["lastError"]
    assert receiver.received == []


async def _wait(check: Any) -> Any:
    found: list[Any] = []

    async def probe() -> bool:
        found[:] = await check()
        return bool(found)

    await eventually(probe, 20, "the delivery given up")
    return found


async def test_an_allowed_host_name_is_reached_at_its_checked_address(
    runtime_factory: RuntimeFactory, receiver: Receiver
) -> None:
    rt = await runtime_factory(
        {"notifications.interval_seconds": 0.1, "notifications.allow_hosts": "localhost"}, JOBS
    )
    async with admin(rt) as http:
        await subscribe(
            http, name="hook", channel="webhook", events=["occurrence.failed"],
            url=f"http://localhost:{receiver.port}/hook", secret=SECRET,
        )  # fmt: skip
        await rt.jobs.create_job({"job_type": "it.notify.fails", "execute_at": rt.jobs.now()})
        await eventually(lambda: receiver.received, 20, "the webhook")
    [got] = receiver.received
    assert got.headers["host"] == f"localhost:{receiver.port}"  # the URL's, not the address
    assert signed(got)
