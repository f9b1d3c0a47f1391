"""``email.send``: one mail through the SMTP server of ``ROTA_SMTP__…`` (aiosmtplib, the
``email`` extra). The sender is the Admin's ``ROTA_SMTP__FROM_ADDRESS``; job data gives the
recipients, subject and text and/or HTML body, within the configured limits.

A temporary SMTP failure (4xx, a connection or timeout) is retried within the job's retries; a
permanent one (5xx, authentication, every recipient refused) fails for good."""

from __future__ import annotations

import re
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from pydantic import ConfigDict, Field, JsonValue, field_validator, model_validator
from pydantic.alias_generators import to_camel

from rota.builtin.config import SmtpSettings
from rota.core.addresses import split_list
from rota.core.errors import ConfigurationError, PermanentError, RotaError
from rota.sdk.job import JobContext, JobData, JobDefinition, job

__all__ = ["EmailSend", "definitions"]

JOB_TYPE = "email.send"
MAX_ADDRESS = 254
MAX_SUBJECT = 998
_ADDRESS = re.compile(r"^[^@\s<>,;:\"()\[\]\\]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")

Address = str


def _check_address(value: str) -> str:
    if len(value) > MAX_ADDRESS or not _ADDRESS.match(value):
        raise ValueError(f"not a plain mail address: {value[:60]!r}")
    return value


class EmailSend(JobData):
    """The job data of ``email.send``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    to: list[Address] = Field(min_length=1, max_length=1000)
    cc: list[Address] = Field(default_factory=list, max_length=1000)
    bcc: list[Address] = Field(default_factory=list, max_length=1000)
    reply_to: Address | None = None
    subject: str = Field(max_length=MAX_SUBJECT)
    text: str | None = Field(None, description="The plain-text body.")
    html: str | None = Field(None, description="The HTML body (with text: an alternative).")

    @field_validator("to", "cc", "bcc")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        return [_check_address(a) for a in value]

    @field_validator("reply_to")
    @classmethod
    def _reply_to(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        if any(c in value for c in "\r\n\0"):
            raise ValueError("the subject is one line")
        return value

    @model_validator(mode="after")
    def _some_body(self) -> EmailSend:
        if self.text is None and self.html is None:
            raise ValueError("give text, html or both")
        return self


def _import_aiosmtplib() -> Any:
    try:
        import aiosmtplib
    except ImportError:
        raise ConfigurationError(
            "the email.send worker needs aiosmtplib: pip install 'rota[email]'"
        ) from None
    return aiosmtplib


class Mailer:
    """Sends :class:`EmailSend` data under :class:`SmtpSettings`."""

    def __init__(self, settings: SmtpSettings) -> None:
        if not settings.host:
            raise ConfigurationError(
                "the email.send worker needs an SMTP server: set ROTA_SMTP__HOST (and "
                "ROTA_SMTP__FROM_ADDRESS)"
            )
        if not settings.from_address:
            raise ConfigurationError("the email.send worker needs ROTA_SMTP__FROM_ADDRESS")
        self.settings = settings
        self.smtp = _import_aiosmtplib()
        self.domains = {d.lower() for d in split_list(settings.allowed_recipient_domains)}

    def check(self, data: EmailSend) -> list[str]:
        """Every recipient, after the limits (``PermanentError`` names the one broken)."""
        s = self.settings
        recipients = [*data.to, *data.cc, *data.bcc]
        if len(recipients) > s.max_recipients:
            raise PermanentError(
                f"{len(recipients)} recipients, over the limit of {s.max_recipients} "
                "(ROTA_SMTP__MAX_RECIPIENTS)"
            )
        if self.domains:
            for address in recipients:
                if address.rsplit("@", 1)[1].lower() not in self.domains:
                    raise PermanentError(
                        f"mail to {address} is refused: its domain is not in "
                        "ROTA_SMTP__ALLOWED_RECIPIENT_DOMAINS"
                    )
        size = len((data.text or "").encode()) + len((data.html or "").encode())
        if size > s.max_body_bytes:
            raise PermanentError(
                f"the body has {size} bytes, over the limit of {s.max_body_bytes} "
                "(ROTA_SMTP__MAX_BODY_BYTES)"
            )
        return recipients

    def message(self, data: EmailSend) -> EmailMessage:
        sender = self.settings.from_address or ""
        message = EmailMessage()
        message["From"] = sender
        message["To"] = ", ".join(data.to)
        if data.cc:
            message["Cc"] = ", ".join(data.cc)
        if data.reply_to:
            message["Reply-To"] = data.reply_to
        message["Subject"] = data.subject
        message["Date"] = formatdate(localtime=False)
        message["Message-ID"] = make_msgid(domain=sender.rsplit("@", 1)[-1] or None)
        if data.text is not None:
            message.set_content(data.text)
            if data.html is not None:
                message.add_alternative(data.html, subtype="html")
        else:
            message.set_content(data.html or "", subtype="html")
        return message

    async def send(self, data: EmailSend, log: Any) -> dict[str, JsonValue]:
        recipients = self.check(data)
        message = self.message(data)
        s = self.settings
        smtp: Any = self.smtp
        try:
            refused, response = await smtp.send(
                message,
                sender=s.from_address,
                recipients=recipients,
                hostname=s.host,
                port=s.effective_port,
                username=s.username,
                password=s.password.get_secret_value() if s.password else None,
                use_tls=s.tls,
                start_tls=s.starttls and not s.tls,
                validate_certs=s.validate_certs,
                timeout=s.timeout_seconds,
            )
        except ssl.SSLCertVerificationError as exc:
            raise PermanentError(
                f"SMTP: the server's certificate is not trusted: {exc.verify_message} "
                "(ROTA_SMTP__VALIDATE_CERTS)"
            ) from None
        except (smtp.SMTPException, OSError) as exc:
            raise _classify(smtp, exc) from None
        log.info(
            "mail %s sent to %d recipients (%d refused)",
            message["Message-ID"], len(recipients), len(refused),
        )  # fmt: skip
        return {
            "messageId": str(message["Message-ID"]),
            "recipients": len(recipients),
            "refused": {str(k): str(v) for k, v in refused.items()},
            "response": str(response),
        }


def _classify(smtp: Any, exc: Exception) -> Exception:
    """A permanent failure for what a retry cannot fix, else a retryable one."""
    text = f"SMTP: {exc}"
    if isinstance(exc, smtp.SMTPAuthenticationError | smtp.SMTPRecipientsRefused):
        return PermanentError(text)
    code = getattr(exc, "code", None)
    if isinstance(code, int) and 500 <= code < 600:
        return PermanentError(text)
    if code is None and "STARTTLS" in str(exc):  # the server offers none: a setting to fix
        return PermanentError(f"{text} (ROTA_SMTP__STARTTLS)")
    return RotaError(text)


def definitions(settings: SmtpSettings) -> list[JobDefinition[..., Any]]:
    """The ``email.send`` job type, bound to ``settings`` (``ConfigurationError`` without an
    SMTP server, a sender or aiosmtplib)."""
    mailer = Mailer(settings)

    @job(JOB_TYPE, max_retries=3, retry_delay=30, retry_jitter=0.2)
    async def email_send(ctx: JobContext, data: EmailSend) -> dict[str, JsonValue]:
        """Send one mail through the configured SMTP server."""
        return await mailer.send(data, ctx.log)

    return [email_send]
