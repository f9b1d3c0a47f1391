"""Outbound notices: the silence alert webhook, and the channels (signed webhooks, email) and
wiring of the notification service."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from email.message import EmailMessage
from typing import Any

import httpx
import orjson

from rota.app.configs import notification_config
from rota.app.settings import NotificationSettings, Settings, http_url
from rota.builtin.config import SmtpSettings
from rota.builtin.outbound import (
    AddressRefusedError,
    UnresolvedError,
    checked_addresses,
    send_pinned,
)
from rota.core.addresses import AddressPolicy
from rota.core.errors import BackendUnavailableError, ConfigurationError
from rota.core.notifications import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Channel,
    NotificationDelivery,
    Subscription,
    render_email,
    sign,
)
from rota.core.ports import NotificationStore
from rota.core.redact import mask_urls
from rota.observability.metrics import RotaMetrics
from rota.services.notifications import (
    NotificationService,
    Send,
    SendResult,
)
from rota.services.silence import Alert, Notify, alert_json


def alert_webhook(url: str, timeout: float) -> Callable[[Alert], Awaitable[None]]:
    """A notifier that POSTs ``{"alert": …}`` to ``url``; a non-2xx answer or a network error
    raises :class:`BackendUnavailableError` (the monitor logs it and goes on). ``url`` must
    be http or https (``ConfigurationError`` otherwise)."""
    try:
        url = http_url(url)
    except ValueError as exc:
        raise ConfigurationError(mask_urls(f"the alert webhook URL {url!r} {exc}")) from None

    async def send(alert: Alert) -> None:
        body = {"source": "rota", "alert": alert_json(alert)}
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                response = await http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise BackendUnavailableError(f"alert webhook: {exc!r}") from exc
        if response.status_code >= 300:
            raise BackendUnavailableError(f"alert webhook answered {response.status_code}")

    return send


# --- notifications to subscriptions ----------------------------------------------------------


def webhook_sender(settings: NotificationSettings, user_agent: str = "rota-notify") -> Send:
    """POST a delivery's JSON body, signed (``X-Rota-Signature``, ``X-Rota-Timestamp``), to
    the subscription's URL: http/https only, to the addresses the policy of
    ``ROTA_NOTIFICATIONS__…`` allows (:class:`rota.core.addresses.AddressPolicy`, the same
    rules as ``http.request``'s; the host is resolved, every address checked, and the
    connection made to a checked address: :mod:`rota.builtin.outbound`), no redirects
    followed, bounded by a timeout, the answer's body not read."""
    policy = AddressPolicy.from_settings(settings)
    timeout = settings.webhook_timeout_seconds

    async def send(sub: Subscription, delivery: NotificationDelivery) -> SendResult:
        if not sub.url or not sub.secret:
            return SendResult(ok=False, error="the subscription has no URL or secret")
        try:
            url = http_url(sub.url)
        except ValueError as exc:
            return SendResult(ok=False, error=f"the URL {exc}")
        target = httpx.URL(url)
        if target.userinfo:
            return SendResult(ok=False, error="refused: user:password@ in the URL")
        port = target.port or (443 if target.scheme == "https" else 80)
        try:
            addresses = await checked_addresses(policy, target.host, port)
        except (AddressRefusedError, UnresolvedError) as exc:
            return SendResult(ok=False, error=f"refused: {exc}")
        body = _bounded_body(delivery.payload, settings.max_body_bytes)
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": user_agent,
            EVENT_HEADER: delivery.event.value,
            DELIVERY_HEADER: str(delivery.id),
            TIMESTAMP_HEADER: str(stamp),
            SIGNATURE_HEADER: sign(sub.secret, stamp, body),
        }
        async with httpx.AsyncClient(
            timeout=timeout, follow_redirects=False, trust_env=False
        ) as http:
            try:
                response = await send_pinned(
                    http, "POST", target, addresses, headers=headers, content=body
                )
                await response.aclose()
            except httpx.HTTPError as exc:
                return SendResult(ok=False, error=mask_urls(f"{type(exc).__name__}: {exc}"))
        code = response.status_code
        if 200 <= code < 300:
            return SendResult(ok=True, status_code=code)
        return SendResult(ok=False, status_code=code, error=f"answered {code}")

    return send


def _bounded_body(body: Mapping[str, Any], limit: int) -> bytes:
    """The JSON body; if longer than ``limit`` bytes, its ``data`` is replaced by a note."""
    raw = orjson.dumps(body)
    if len(raw) <= limit:
        return raw
    return orjson.dumps({**body, "data": {"truncated": True, "bytes": len(raw)}})


def email_sender(smtp: SmtpSettings) -> Send:
    """Send a delivery as a plain-text email to the subscription's recipients through the SMTP
    settings (``aiosmtplib``, the ``email`` extra)."""

    async def send(sub: Subscription, delivery: NotificationDelivery) -> SendResult:
        if not smtp.host or not smtp.from_address:
            return SendResult(
                ok=False, error="no SMTP server configured (ROTA_SMTP__HOST, __FROM_ADDRESS)"
            )
        try:
            import aiosmtplib
        except ImportError:
            return SendResult(ok=False, error="aiosmtplib is missing: pip install 'rota[email]'")
        domains = {
            d.strip().lower() for d in smtp.allowed_recipient_domains.split(",") if d.strip()
        }
        outside = [r for r in sub.recipients if r.rsplit("@", 1)[-1].lower() not in domains]
        if domains and outside:
            return SendResult(
                ok=False,
                error="recipients outside ROTA_SMTP__ALLOWED_RECIPIENT_DOMAINS: "
                + ", ".join(outside),
            )
        subject, text = render_email(delivery.payload)
        message = EmailMessage()
        message["From"] = smtp.from_address
        message["To"] = ", ".join(sub.recipients)
        message["Subject"] = subject
        message["X-Rota-Delivery"] = str(delivery.id)
        message.set_content(text)
        try:
            await aiosmtplib.send(
                message,
                hostname=smtp.host,
                port=smtp.effective_port,
                username=smtp.username,
                password=None if smtp.password is None else smtp.password.get_secret_value(),
                use_tls=smtp.tls,
                start_tls=smtp.starttls and not smtp.tls,
                validate_certs=smtp.validate_certs,
                timeout=smtp.timeout_seconds,
            )
        except (aiosmtplib.SMTPException, OSError) as exc:
            return SendResult(ok=False, error=f"{type(exc).__name__}: {exc}")
        return SendResult(ok=True)

    return send


def channel_sender(settings: Settings) -> Send:
    """The sender of each channel."""
    senders = {
        Channel.WEBHOOK: webhook_sender(settings.notifications),
        Channel.EMAIL: email_sender(settings.smtp),
    }

    async def send(sub: Subscription, delivery: NotificationDelivery) -> SendResult:
        return await senders[sub.channel](sub, delivery)

    return send


def build_notifications(
    settings: Settings,
    store: NotificationStore,
    metrics: RotaMetrics,
    instance_id: str,
    *,
    is_leader: Callable[[], bool],
) -> NotificationService:
    """The notification service of a server, from ``ROTA_NOTIFICATIONS__…`` and
    ``ROTA_SMTP__…``."""
    return NotificationService(
        store,
        notification_config(settings.notifications),
        instance_id=instance_id,
        send=channel_sender(settings),
        is_leader=is_leader,
        on_sent=metrics.record_notification,
        on_dead_letters=metrics.dead_letters_unresolved.set,
    )


def silence_notifier(settings: Settings, notifications: NotificationService) -> Notify:
    """What the silence monitor calls with each new alert: the subscriptions to
    ``silence.alert``, and the alert webhook (``ROTA_ALERT_WEBHOOK_URL``) if set."""
    webhook = (
        alert_webhook(settings.alert_webhook_url, settings.silence.webhook_timeout_seconds)
        if settings.alert_webhook_url
        else None
    )

    async def notify(alert: Alert) -> None:
        notifications.silence_alert(alert)
        if webhook is not None:
            await webhook(alert)

    return notify
