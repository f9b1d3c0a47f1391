"""Notification subscriptions and their delivery log (``/api/v1/notifications``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints

from rota.api.schemas.common import NO_NUL, ApiModel, InputModel, Tag
from rota.core.notifications import (
    MAX_NAME,
    MAX_RECIPIENTS,
    Channel,
    DeliveryAttempt,
    NotificationDelivery,
    NotificationEvent,
    Subscription,
)


def split_list(value: Any) -> Any:
    """A list, or one comma-separated string ``"a,b"`` (what a form sends)."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def http_url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "no user:password@ in the URL (it would be shown and stored in clear): "
            "the receiver checks the X-Rota-Signature made with the secret"
        )
    return value.strip()


Events = Annotated[
    list[NotificationEvent],
    BeforeValidator(split_list),
    Field(
        min_length=1,
        max_length=len(NotificationEvent),
        description="occurrence.failed, occurrence.timed_out, job.auto_disabled, "
        "deadletters.over_threshold, silence.alert (a list, or one comma-separated string).",
    ),
]
Address = Annotated[
    str, StringConstraints(max_length=254, pattern=r"^[^@\s,<>]+@[^@\s,<>]+\.[^@\s,<>]+$")
]
Recipients = Annotated[
    list[Address],
    BeforeValidator(split_list),
    Field(max_length=MAX_RECIPIENTS, description="Email addresses (a list or 'a@x,b@y')."),
]
Url = Annotated[str, StringConstraints(max_length=2000, pattern=NO_NUL), AfterValidator(http_url)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME, pattern=NO_NUL)]
Secret = Annotated[str, StringConstraints(min_length=16, max_length=200, pattern=NO_NUL)]


class SubscriptionCreate(InputModel):
    name: Name
    events: Events
    channel: Channel = Field(description="webhook or email.")
    job_id: UUID | None = Field(None, description="Scope: only this job's events.")
    tag: Tag | None = Field(None, description="Scope: only the events of jobs with this tag.")
    url: Url | None = Field(None, description="webhook: the http(s) URL POSTed to.")
    secret: Secret | None = Field(
        None,
        description="webhook: the HMAC-SHA256 key of X-Rota-Signature (16+ characters); "
        "omitted: one is generated and shown once, in this answer.",
    )
    recipients: Recipients = Field(default_factory=list)
    threshold: int = Field(
        0, ge=0, le=10_000_000, description="deadletters.over_threshold: told above this count."
    )
    enabled: bool = True


class SubscriptionPatch(InputModel):
    """The fields to change; ``jobId``/``tag`` set to null widen the scope."""

    name: Name | None = None
    events: Events | None = None
    channel: Channel | None = None
    job_id: UUID | None = None
    tag: Tag | None = None
    url: Url | None = None
    secret: Secret | None = None
    recipients: Recipients | None = None
    threshold: int | None = Field(None, ge=0, le=10_000_000)
    enabled: bool | None = None


class SubscriptionOut(ApiModel):
    id: UUID
    name: str
    events: list[NotificationEvent]
    scope: str = Field(description="global, job or tag.")
    job_id: UUID | None
    tag: str | None
    channel: Channel
    url: str | None
    has_secret: bool
    secret: str | None = Field(
        None, description="Only in the answer that generated it; never shown again."
    )
    recipients: list[str]
    threshold: int
    enabled: bool
    created_at: datetime
    updated_at: datetime
    created_by: str | None

    @classmethod
    def of(cls, sub: Subscription, *, secret: str | None = None) -> SubscriptionOut:
        return cls(
            id=sub.id,
            name=sub.name,
            events=sorted(sub.events),
            scope=sub.scope,
            job_id=sub.job_id,
            tag=sub.tag,
            channel=sub.channel,
            url=sub.url,
            has_secret=bool(sub.secret),
            secret=secret,
            recipients=list(sub.recipients),
            threshold=sub.threshold,
            enabled=sub.enabled,
            created_at=sub.created_at,
            updated_at=sub.updated_at,
            created_by=sub.created_by,
        )

    def audit(self) -> dict[str, Any]:
        """The audit log's view: no secret."""
        return self.model_dump(mode="json", exclude={"secret"})


class SubscriptionList(ApiModel):
    items: list[SubscriptionOut]


class DeliveryOut(ApiModel):
    id: UUID
    event: NotificationEvent
    key: str
    state: str = Field(description="pending, delivered or failed (given up).")
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    finished_at: datetime | None
    last_error: str | None

    @classmethod
    def of(cls, d: NotificationDelivery) -> DeliveryOut:
        return cls(
            id=d.id,
            event=d.event,
            key=d.key,
            state=d.state.value,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            created_at=d.created_at,
            finished_at=d.finished_at,
            last_error=d.last_error,
        )


class AttemptOut(ApiModel):
    delivery_id: UUID
    event: NotificationEvent
    attempt: int
    at: datetime
    ok: bool
    status_code: int | None = Field(description="webhook: the HTTP status answered.")
    error: str | None

    @classmethod
    def of(cls, a: DeliveryAttempt) -> AttemptOut:
        return cls(
            delivery_id=a.delivery_id,
            event=a.event,
            attempt=a.attempt,
            at=a.at,
            ok=a.ok,
            status_code=a.status_code,
            error=a.error,
        )


class DeliveryLog(ApiModel):
    deliveries: list[DeliveryOut] = Field(description="The newest deliveries first.")
    attempts: list[AttemptOut] = Field(description="The newest attempts first.")
