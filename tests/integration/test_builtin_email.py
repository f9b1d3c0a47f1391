"""``email.send`` through a local SMTP server the test starts (aiosmtpd): the mail as received,
authentication, limits, refused recipients; end to end through the embedded runtime."""

from __future__ import annotations

import email
import logging
import shutil
from email.message import Message
from email.policy import default
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from rota.builtin.config import SmtpSettings
from rota.builtin.email import EmailSend, Mailer
from rota.core.errors import PermanentError, RotaError
from rota.core.models import OccurrenceStatus
from tests.helpers import RuntimeFactory
from tests.integration.builtin_servers import (
    Mailbox,
    run_job,
    self_signed,
    smtp_server,
    wait_for_log,
)

S = OccurrenceStatus
log = logging.getLogger("test")


def settings(box: Mailbox, **more: Any) -> SmtpSettings:
    return SmtpSettings(
        **{
            "host": "127.0.0.1",
            "port": box.port,
            "starttls": False,
            "from_address": "rota@example.com",
            "timeout_seconds": 5,
        }
        | more
    )


def received(box: Mailbox, index: int = -1) -> Message:
    return email.message_from_bytes(box.envelopes[index].content, policy=default)


async def send(box: Mailbox, data: dict[str, Any], **more: Any) -> Any:
    return await Mailer(settings(box, **more)).send(EmailSend.model_validate(data), log)


async def test_a_mail_with_text_html_cc_and_bcc() -> None:
    async with smtp_server() as box:
        result = await send(
            box,
            {
                "to": ["ann@example.com"],
                "cc": ["bob@example.com"],
                "bcc": ["audit@example.com"],
                "replyTo": "ops@example.com",
                "subject": "Nightly report ✓",
                "text": "All good.",
                "html": "<p>All <b>good</b>.</p>",
            },
        )
    assert result["recipients"] == 3
    assert result["refused"] == {}
    [envelope] = box.envelopes
    assert envelope.mail_from == "rota@example.com"
    assert sorted(envelope.rcpt_tos) == ["ann@example.com", "audit@example.com", "bob@example.com"]
    mail = received(box)
    assert mail["From"] == "rota@example.com"
    assert mail["To"] == "ann@example.com"
    assert mail["Cc"] == "bob@example.com"
    assert mail["Bcc"] is None  # bcc only in the envelope
    assert mail["Reply-To"] == "ops@example.com"
    assert mail["Subject"] == "Nightly report ✓"
    assert mail["Message-ID"] == result["messageId"]
    text = mail.get_body(("plain",))
    html = mail.get_body(("html",))
    assert text is not None
    assert html is not None
    assert text.get_content().strip() == "All good."
    assert "<b>good</b>" in html.get_content()


async def test_authentication() -> None:
    async with smtp_server(users={"mailer": "s3cret"}) as box:
        data = {"to": ["ann@example.com"], "subject": "hi", "text": "x"}
        with pytest.raises(PermanentError, match="SMTP"):
            await send(box, data)  # the server requires AUTH: 530, for good
        with pytest.raises(PermanentError, match="SMTP"):
            await send(box, data, username="mailer", password=SecretStr("wrong"))
        await send(box, data, username="mailer", password=SecretStr("s3cret"))
    assert len(box.envelopes) == 1
    assert box.logins[0][0] == "mailer"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_starttls(tmp_path: Path) -> None:
    async with smtp_server(tls=self_signed(tmp_path)) as box:
        data = {"to": ["ann@example.com"], "subject": "tls", "text": "x"}
        with pytest.raises(PermanentError, match="certificate is not trusted"):
            await send(box, data, starttls=True)
        with pytest.raises(PermanentError, match="SMTP"):  # the server requires STARTTLS
            await send(box, data, starttls=False)
        await send(box, data, starttls=True, validate_certs=False)
    assert len(box.envelopes) == 1
    async with smtp_server() as plain:
        with pytest.raises(PermanentError, match="STARTTLS"):  # the server offers none
            await send(plain, data, starttls=True)


async def test_limits_and_refusals() -> None:
    async with smtp_server() as box:
        many = {"to": [f"u{i}@example.com" for i in range(4)], "subject": "s", "text": "x"}
        with pytest.raises(PermanentError, match="4 recipients, over the limit of 3"):
            await send(box, many, max_recipients=3)
        with pytest.raises(PermanentError, match="over the limit of 5"):
            await send(box, {"to": ["a@example.com"], "subject": "s", "text": "123456"},
                       max_body_bytes=5)  # fmt: skip
        with pytest.raises(PermanentError, match="ALLOWED_RECIPIENT_DOMAINS"):
            await send(box, {"to": ["a@evil.example"], "subject": "s", "text": "x"},
                       allowed_recipient_domains="example.com")  # fmt: skip
        with pytest.raises(PermanentError, match="SMTP"):  # every recipient refused: 550
            await send(box, {"to": ["bounce@example.com"], "subject": "s", "text": "x"})
        partly = await send(
            box, {"to": ["bounce@example.com", "ann@example.com"], "subject": "s", "text": "x"}
        )
        assert list(partly["refused"]) == ["bounce@example.com"]
    assert len(box.envelopes) == 1


async def test_an_unreachable_server_is_worth_a_retry() -> None:
    async with smtp_server() as box:
        port = box.port
    closed = SmtpSettings(host="127.0.0.1", port=port, starttls=False,
                          from_address="rota@example.com", timeout_seconds=2)  # fmt: skip
    with pytest.raises(RotaError) as caught:
        await Mailer(closed).send(
            EmailSend.model_validate({"to": ["a@example.com"], "subject": "s", "text": "x"}), log
        )
    assert not isinstance(caught.value, PermanentError)


async def test_end_to_end_through_the_embedded_runtime(runtime_factory: RuntimeFactory) -> None:
    async with smtp_server() as box:
        rt = await runtime_factory(
            {
                "smtp.host": "127.0.0.1",
                "smtp.port": box.port,
                "smtp.starttls": False,
                "smtp.from_address": "rota@example.com",
            },
            ["rota.builtin.email"],
        )
        occ = await run_job(
            rt,
            "email.send",
            {"to": ["ann@example.com"], "subject": "From a job", "text": "Hello from Rota."},
        )
        assert occ.status is S.COMPLETED, occ.exception
        assert occ.result["recipients"] == 1
        await wait_for_log(rt, occ, "sent to 1 recipients")
        bad = await run_job(rt, "email.send", {"to": ["ann@example.com"], "subject": "no body"})
        assert bad.status is S.FAILED
        assert "text, html or both" in (bad.exception or "")
    assert received(box)["Subject"] == "From a job"
    assert len(box.envelopes) == 1
