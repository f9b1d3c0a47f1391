"""Notification subscriptions (Admin only): create, list, read, change, delete, the delivery
log, and a test delivery. Every change is audited (without the secret)."""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Protocol, cast
from urllib.parse import urlsplit
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response, status

from rota.api.deps import Audit, Runtime
from rota.api.paths import app_url
from rota.api.problems import problem_responses
from rota.api.schemas.notifications import (
    AttemptOut,
    DeliveryLog,
    DeliveryOut,
    SubscriptionCreate,
    SubscriptionList,
    SubscriptionOut,
    SubscriptionPatch,
)
from rota.api.security import AdminUser, requires
from rota.core.addresses import AddressPolicy
from rota.core.errors import ValidationError
from rota.core.notifications import Channel
from rota.core.security import Role
from rota.services.notifications import NotificationService, SubscriptionInput

router = APIRouter(
    prefix="/notifications", tags=["notifications"], dependencies=[requires(Role.ADMIN)]
)
PATH = "/api/v1/notifications/subscriptions"


class _WithNotifications(Protocol):
    @property
    def notifications(self) -> NotificationService: ...


def _service(runtime: Runtime) -> NotificationService:
    return cast(_WithNotifications, runtime).notifications


def _check_url(runtime: Runtime, url: str | None) -> None:
    """A URL whose host the settings refuse as it is written (an IP address, ``localhost``,
    a cloud metadata name: :meth:`AddressPolicy.static_refusal`) is refused now; a host name
    is also resolved and checked when each delivery is sent (what it resolves to may change)."""
    if url is None:
        return
    host = urlsplit(url).hostname or ""
    why = AddressPolicy.from_settings(runtime.settings.notifications).static_refusal(host)
    if why is not None:
        raise ValidationError(f"url: {why}", field="url")


@router.post(
    "/subscriptions",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(413, 422, 503),
    summary="Create a subscription",
    description="A webhook subscription without a secret gets a generated one, shown once in "
    "this answer. Its deliveries are signed: X-Rota-Signature: sha256=<hex HMAC-SHA256 of "
    "'<X-Rota-Timestamp>.<body>'>.",
)
async def create_subscription(
    body: SubscriptionCreate,
    runtime: Runtime,
    audit: Audit,
    admin: AdminUser,
    response: Response,
    request: Request,
) -> SubscriptionOut:
    _check_url(runtime, body.url)
    generated = None
    secret = body.secret
    if body.channel is Channel.WEBHOOK and secret is None:
        secret = generated = secrets.token_urlsafe(32)
    sub = await _service(runtime).create_subscription(
        SubscriptionInput(
            name=body.name,
            events=frozenset(body.events),
            channel=body.channel,
            job_id=body.job_id,
            tag=body.tag,
            url=body.url,
            secret=secret,
            recipients=tuple(body.recipients),
            threshold=body.threshold,
            enabled=body.enabled,
        ),
        admin.username,
    )
    out = SubscriptionOut.of(sub, secret=generated)
    await audit.record(
        admin.username, "notification.created", "notification", sub.id, after=out.audit()
    )
    response.headers["Location"] = app_url(request, f"{PATH}/{sub.id}")
    return out


@router.get("/subscriptions", responses=problem_responses(503), summary="List subscriptions")
async def list_subscriptions(runtime: Runtime) -> SubscriptionList:
    subs = await _service(runtime).list_subscriptions()
    return SubscriptionList(items=[SubscriptionOut.of(s) for s in subs])


@router.get(
    "/subscriptions/{subscription_id}",
    responses=problem_responses(404, 422, 503),
    summary="Read a subscription",
)
async def get_subscription(subscription_id: UUID, runtime: Runtime) -> SubscriptionOut:
    return SubscriptionOut.of(await _service(runtime).get_subscription(subscription_id))


def _changes(body: SubscriptionPatch) -> dict[str, Any]:
    # by field name (``job_id``), not by the camelCase alias the bodies serialise with
    changes = body.model_dump(exclude_unset=True, by_alias=False)
    for key in ("name", "events", "channel", "threshold", "enabled", "recipients"):
        if key in changes and changes[key] is None:
            raise ValidationError(f"{key} cannot be null", field=key)
    if "events" in changes:
        changes["events"] = frozenset(body.events or ())
    if "recipients" in changes:
        changes["recipients"] = tuple(body.recipients or ())
    return changes


@router.patch(
    "/subscriptions/{subscription_id}",
    responses=problem_responses(404, 413, 422, 503),
    summary="Change a subscription",
)
async def update_subscription(
    subscription_id: UUID,
    body: SubscriptionPatch,
    runtime: Runtime,
    audit: Audit,
    admin: AdminUser,
) -> SubscriptionOut:
    _check_url(runtime, body.url)
    before, after = await _service(runtime).update_subscription(subscription_id, _changes(body))
    out = SubscriptionOut.of(after)
    await audit.record(
        admin.username,
        "notification.updated",
        "notification",
        subscription_id,
        before=SubscriptionOut.of(before).audit(),
        after=out.audit() | ({"secretChanged": True} if body.secret else {}),
    )
    return out


@router.delete(
    "/subscriptions/{subscription_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(404, 422, 503),
    summary="Delete a subscription with its deliveries and delivery log",
)
async def delete_subscription(
    subscription_id: UUID, runtime: Runtime, audit: Audit, admin: AdminUser
) -> Response:
    before = await _service(runtime).delete_subscription(subscription_id)
    await audit.record(
        admin.username,
        "notification.deleted",
        "notification",
        subscription_id,
        before=SubscriptionOut.of(before).audit(),
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/subscriptions/{subscription_id}/deliveries",
    responses=problem_responses(404, 422, 503),
    summary="The delivery log: the newest deliveries and attempts",
)
async def deliveries(
    subscription_id: UUID,
    runtime: Runtime,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> DeliveryLog:
    found, attempts = await _service(runtime).deliveries(subscription_id, limit)
    return DeliveryLog(
        deliveries=[DeliveryOut.of(d) for d in found],
        attempts=[AttemptOut.of(a) for a in attempts],
    )


@router.post(
    "/subscriptions/{subscription_id}/test",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(404, 422, 503),
    summary="Queue a test delivery (sent like any other, logged with its attempts)",
)
async def send_test(
    subscription_id: UUID, runtime: Runtime, audit: Audit, admin: AdminUser
) -> DeliveryOut:
    delivery = await _service(runtime).send_test(subscription_id, admin.username)
    await audit.record(admin.username, "notification.tested", "notification", subscription_id)
    return DeliveryOut.of(delivery)
