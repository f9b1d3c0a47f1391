"""Notifications: who is told what, and how a message is signed and retried (pure, no I/O).

A :class:`Subscription` (managed by Admins) names the events it wants, a scope (every job,
one job, or the jobs carrying a tag) and a channel (a webhook or email). A :class:`Notice` is
one thing that happened (an occurrence that failed for good, a job auto-disabled …); for each
subscription that :func:`matches` it, one :class:`NotificationDelivery` is stored and sent,
at least once, with retries (:func:`retry_delay`), every attempt logged (:class:`DeliveryAttempt`).

Webhook bodies are signed (:func:`sign`): ``X-Rota-Signature: sha256=<hex>`` is the
HMAC-SHA256, keyed with the subscription's secret, of ``"<timestamp>." + body``, where the
timestamp (Unix seconds) is sent in ``X-Rota-Timestamp``; a receiver checks both (and refuses
old timestamps) with :func:`verify`.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from rota.core.retry import retry_delay as job_retry_delay


class NotificationEvent(enum.StrEnum):
    OCCURRENCE_FAILED = "occurrence.failed"
    """An occurrence failed for good (no retry left, a permanent error, a zombie failed)."""
    OCCURRENCE_TIMED_OUT = "occurrence.timed_out"
    JOB_AUTO_DISABLED = "job.auto_disabled"
    DEADLETTERS_OVER_THRESHOLD = "deadletters.over_threshold"
    """Unresolved dead letters (failed-occurrence records) went above the subscription's
    threshold; told again only after they went back to it or below."""
    SILENCE_ALERT = "silence.alert"


class Channel(enum.StrEnum):
    WEBHOOK = "webhook"
    EMAIL = "email"


class DeliveryState(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    """Every attempt failed: given up."""


SIGNATURE_HEADER = "X-Rota-Signature"
TIMESTAMP_HEADER = "X-Rota-Timestamp"
EVENT_HEADER = "X-Rota-Event"
DELIVERY_HEADER = "X-Rota-Delivery"
MAX_NAME = 200
MAX_RECIPIENTS = 50
KEPT_ATTEMPTS = 100
"""The delivery log keeps this many attempts per subscription (the newest)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    id: UUID
    name: str
    events: frozenset[NotificationEvent]
    channel: Channel
    job_id: UUID | None = None
    """Scope: only this job's events (``None`` and no ``tag``: every job)."""
    tag: str | None = None
    """Scope: only the events of jobs carrying this tag."""
    url: str | None = None
    """Webhook: the http(s) URL the JSON body is POSTed to."""
    secret: str | None = field(default=None, repr=False)
    """Webhook: the HMAC-SHA256 key of the signature (never in a ``repr``, so never in a
    log line)."""
    recipients: tuple[str, ...] = ()
    """Email: the addresses told."""
    threshold: int = 0
    """``deadletters.over_threshold``: told when unresolved dead letters exceed this."""
    enabled: bool = True
    created_at: datetime
    updated_at: datetime
    created_by: str | None = None

    @property
    def scope(self) -> str:
        """``global``, ``job`` or ``tag``."""
        if self.job_id is not None:
            return "job"
        return "tag" if self.tag is not None else "global"


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """Something that happened, to tell the subscriptions that want it."""

    event: NotificationEvent
    key: str
    """Identifies the happening: the same notice made twice (two servers, a replayed report)
    gives one delivery per subscription."""
    at: datetime
    summary: str
    job_id: UUID | None = None
    job_type: str | None = None
    tags: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    """JSON-ready details (camelCase keys)."""
    subscription_id: UUID | None = None
    """Only for this subscription (a threshold of its own)."""
    occurrence_id: UUID | None = None
    """The occurrence it is about (its exception is added to ``data`` when it has one)."""
    test: bool = False
    """A test sent on request ("Send a test"): nothing happened; the body says so."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotificationDelivery:
    id: UUID
    subscription_id: UUID
    event: NotificationEvent
    key: str
    payload: Mapping[str, Any]
    """The JSON body sent (webhook) or rendered (email)."""
    state: DeliveryState = DeliveryState.PENDING
    attempts: int = 0
    next_attempt_at: datetime
    created_at: datetime
    finished_at: datetime | None = None
    last_error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryAttempt:
    id: UUID
    delivery_id: UUID
    subscription_id: UUID
    event: NotificationEvent
    attempt: int
    at: datetime
    ok: bool
    status_code: int | None = None
    """Webhook: the HTTP status answered (``None``: no answer)."""
    error: str | None = None


def matches(subscription: Subscription, notice: Notice) -> bool:
    """Whether ``subscription`` wants ``notice``: enabled, the event is one of its events,
    and the notice is in its scope (a job-scoped or tag-scoped subscription wants only
    notices about such a job)."""
    if not subscription.enabled or notice.event not in subscription.events:
        return False
    if notice.subscription_id is not None and notice.subscription_id != subscription.id:
        return False
    if subscription.job_id is not None:
        return notice.job_id == subscription.job_id
    if subscription.tag is not None:
        return subscription.tag in notice.tags
    return True


def payload(notice: Notice, delivery_id: UUID) -> dict[str, Any]:
    """The JSON body of a delivery (camelCase)."""
    return {
        "source": "rota",
        "id": str(delivery_id),
        "event": notice.event.value,
        "at": notice.at.isoformat(),
        "summary": notice.summary,
        "jobId": None if notice.job_id is None else str(notice.job_id),
        "jobType": notice.job_type,
        "tags": list(notice.tags),
        "data": dict(notice.data),
        "test": notice.test,
    }


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Rota-Signature`` value: ``sha256=`` and the hex HMAC-SHA256 of
    ``"<timestamp>." + body`` keyed with ``secret``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(
    secret: str, timestamp: str, body: bytes, signature: str, now: float, tolerance: float = 300
) -> bool:
    """What a receiver checks: the signature is right for this timestamp and body, and the
    timestamp is within ``tolerance`` seconds of ``now`` (an old message replayed fails)."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, sent, body), signature)


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds before the next try after ``attempt`` (1-based) failed: ``base × 2^(attempt−1)``,
    at most ``cap`` — the jobs' retry policy (:func:`rota.core.retry.retry_delay`) without
    jitter."""
    return job_retry_delay(max(1, attempt), job_delay=base, max_delay=cap)


def render_email(body: Mapping[str, Any]) -> tuple[str, str]:
    """The subject and plain text of a notification email from its JSON body."""
    test = "TEST " if body.get("test") else ""
    subject = f"[Rota] {test}{body.get('event')}: {body.get('summary', '')}"
    lines = [str(body.get("summary", "")), ""]
    for label, key in (("Event", "event"), ("At", "at"), ("Job", "jobId"), ("Job type", "jobType")):
        if body.get(key):
            lines.append(f"{label}: {body[key]}")
    tags = body.get("tags")
    if tags:
        lines.append(f"Tags: {', '.join(str(t) for t in tags)}")
    data = body.get("data")
    if isinstance(data, Mapping) and data:
        lines.append("")
        lines.extend(f"{key}: {value}" for key, value in data.items())
    return subject[:250].replace("\n", " "), "\n".join(lines) + "\n"
