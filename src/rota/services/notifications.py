"""Notifications: subscriptions managed by Admins, and the loop that tells them.

Event sources hand over what happened (:meth:`NotificationService.status_applied` after each
applied status batch, :meth:`NotificationService.silence_alert`, and the periodic dead-letter
count); the loop turns each notice into one stored delivery per matching subscription
(durable: a delivery survives a restart; the same notice made twice is stored once), claims
the due deliveries with a lease (no two servers send the same one at once), sends them through
the channel's sender and records each attempt. A failed attempt is tried again after
``base × 2^(attempt−1)`` seconds (capped) until ``max_attempts``; then it is given up. The
guarantee is at-least-once: a server that dies mid-send leaves its claim to expire and
another sends it again.

Not durable: the notices of status changes applied in the last moment before a crash and not
yet stored (they live for one loop pass, ``interval_seconds`` at most).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from rota.core.errors import ValidationError
from rota.core.ids import new_id
from rota.core.models import OccurrenceStatus, utcnow
from rota.core.notifications import (
    MAX_NAME,
    MAX_RECIPIENTS,
    Channel,
    DeliveryAttempt,
    DeliveryState,
    Notice,
    NotificationDelivery,
    NotificationEvent,
    Subscription,
    matches,
    payload,
    retry_delay,
)
from rota.core.ports import NotificationStore
from rota.core.records import StatusResult
from rota.services._loop import run_periodically
from rota.services.silence import Alert, alert_json

log = logging.getLogger(__name__)

PENDING_LIMIT = 10_000
"""Notices waiting to be stored at most; more (a store down for long) are dropped, logged."""
ERROR_TEXT = 500
EXCEPTION_TEXT = 4000
"""The end of an occurrence's exception (its last frames and message) sent with a notice."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotificationConfig:
    interval_seconds: float = 2.0
    """How often due deliveries are looked for (new notices wake the loop at once)."""
    lease_seconds: float = 60.0
    """A claim on a delivery lasts this long (keep it above the senders' timeouts)."""
    batch_size: int = 50
    max_attempts: int = 8
    backoff_base_seconds: float = 10.0
    backoff_cap_seconds: float = 3600.0
    dead_letter_interval_seconds: float = 30.0
    keep_finished_seconds: float = 7 * 86400.0
    """Delivered and given-up deliveries are deleted after this long (the log stays)."""
    subscriptions_ttl_seconds: float = 5.0
    """Subscriptions changed on another server are seen after at most this long."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    ok: bool
    status_code: int | None = None
    error: str | None = None


Send = Callable[[Subscription, NotificationDelivery], Awaitable[SendResult]]
"""A channel's sender: never raises, says how the attempt went."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionInput:
    """A subscription as an Admin gives it (create: every field; update: the changed ones)."""

    name: str
    events: frozenset[NotificationEvent]
    channel: Channel
    job_id: UUID | None = None
    tag: str | None = None
    url: str | None = None
    secret: str | None = None
    recipients: tuple[str, ...] = ()
    threshold: int = 0
    enabled: bool = True


_CHANGEABLE = frozenset(field.name for field in fields(SubscriptionInput))


def _check(sub: Subscription) -> Subscription:
    """``sub`` if it is complete and consistent, else ``ValidationError`` naming the field."""
    if not sub.name.strip() or len(sub.name) > MAX_NAME:
        raise ValidationError(f"a name has 1 to {MAX_NAME} characters", field="name")
    if not sub.events:
        raise ValidationError("name at least one event", field="events")
    if sub.job_id is not None and sub.tag is not None:
        raise ValidationError(
            "a subscription is scoped to a job or to a tag, not both", field="tag"
        )
    if sub.channel is Channel.WEBHOOK:
        if not sub.url:
            raise ValidationError("a webhook subscription needs a url", field="url")
        if not sub.secret:
            raise ValidationError("a webhook subscription needs a secret", field="secret")
    else:
        if not sub.recipients:
            raise ValidationError("an email subscription needs recipients", field="recipients")
        if len(sub.recipients) > MAX_RECIPIENTS:
            raise ValidationError(f"at most {MAX_RECIPIENTS} recipients", field="recipients")
    if sub.threshold < 0:
        raise ValidationError("the threshold is 0 or more", field="threshold")
    return sub


def status_notices(result: StatusResult, now: datetime) -> list[Notice]:
    """What an applied status batch tells: occurrences that failed for good or timed out, and
    auto-disabled jobs. (A failed attempt with a retry left goes back to Queued: nothing.)"""
    notices: list[Notice] = []
    for change in result.applied:
        if change.to_status is OccurrenceStatus.FAILED:
            event, what = NotificationEvent.OCCURRENCE_FAILED, "failed"
        elif change.to_status is OccurrenceStatus.TIMED_OUT:
            event, what = NotificationEvent.OCCURRENCE_TIMED_OUT, "timed out"
        else:
            continue
        notices.append(
            Notice(
                event=event,
                key=f"{event.value}:{change.occurrence_id}:{change.attempt}",
                at=now,
                summary=f"{change.job_type or 'a job'} {what} (occurrence "
                f"{change.occurrence_id}, attempt {change.attempt})",
                job_id=change.job_id,
                job_type=change.job_type or None,
                occurrence_id=change.occurrence_id,
                data={
                    "occurrenceId": str(change.occurrence_id),
                    "attempt": change.attempt,
                    "fromStatus": change.from_status.name.title().replace("_", ""),
                    "status": change.to_status.name.title().replace("_", ""),
                    "workerId": change.worker_id,
                    "instanceId": change.instance_id,
                },
            )
        )
    for job in result.disabled:
        notices.append(
            Notice(
                event=NotificationEvent.JOB_AUTO_DISABLED,
                key=f"job.auto_disabled:{job.job_id}:{now.isoformat()}",
                at=now,
                summary=f"job {job.job_id} was disabled: {job.reason}",
                job_id=job.job_id,
                data={"reason": job.reason},
            )
        )
    return notices


def alert_notice(alert: Alert) -> Notice:
    return Notice(
        event=NotificationEvent.SILENCE_ALERT,
        key=f"silence.alert:{alert.key}:{alert.raised_at.isoformat()}",
        at=alert.raised_at,
        summary=alert.message,
        job_id=alert.job_id,
        job_type=alert.job_type,
        data=alert_json(alert),
    )


class NotificationService:
    """Subscriptions (for the API) and their deliveries (the loop)."""

    def __init__(
        self,
        store: NotificationStore,
        config: NotificationConfig,
        *,
        instance_id: str,
        send: Send,
        clock: Callable[[], datetime] = utcnow,
        is_leader: Callable[[], bool] = lambda: True,
        on_sent: Callable[[Channel, str], None] | None = None,
        on_dead_letters: Callable[[int], None] | None = None,
    ) -> None:
        """``is_leader``: whether this server checks dead-letter thresholds (one server
        does). ``on_sent(channel, outcome)``: an attempt ended ``delivered``, ``retried`` or
        ``failed``. ``on_dead_letters(count)``: the unresolved dead letters, counted."""
        self._store = store
        self._config = config
        self._owner = instance_id
        self._send = send
        self._clock = clock
        self._is_leader = is_leader
        self._on_sent = on_sent
        self._on_dead_letters = on_dead_letters
        self._pending: list[Notice] = []
        self._subscriptions: dict[UUID, Subscription] = {}
        self._loaded_at: float | None = None
        self._changes = 0  # bumped by every subscription change made here
        self._over: set[UUID] = set()
        """Subscriptions told their dead-letter threshold is passed (until it is not)."""
        self._checked_dead_letters: float | None = None
        self._purged_at: float | None = None
        self._stopping = asyncio.Event()
        self._kick = asyncio.Event()
        self.sent = 0
        self.failed = 0

    # --- subscriptions (the API) ------------------------------------------------------------

    async def list_subscriptions(self) -> list[Subscription]:
        return await self._store.list_subscriptions()

    async def get_subscription(self, subscription_id: UUID) -> Subscription:
        return await self._store.get_subscription(subscription_id)

    async def create_subscription(self, given: SubscriptionInput, by: str | None) -> Subscription:
        now = self._clock()
        sub = _check(
            Subscription(
                id=new_id(), created_at=now, updated_at=now, created_by=by, **_fields(given)
            )
        )
        await self._store.create_subscription(sub)
        self._subscriptions_changed()
        return sub

    async def update_subscription(
        self, subscription_id: UUID, changes: Mapping[str, Any]
    ) -> tuple[Subscription, Subscription]:
        """Apply ``changes`` (field name -> value, of :class:`SubscriptionInput`'s fields);
        returns the subscription before and after."""
        unknown = sorted(changes.keys() - _CHANGEABLE)
        if unknown:
            raise ValidationError("not a field of a subscription", field=unknown[0])
        before = await self._store.get_subscription(subscription_id)
        after = _check(replace(before, updated_at=self._clock(), **changes))
        stored = await self._store.update_subscription(after)
        self._subscriptions_changed()
        return before, stored

    async def delete_subscription(self, subscription_id: UUID) -> Subscription:
        before = await self._store.get_subscription(subscription_id)
        await self._store.delete_subscription(subscription_id)
        self._subscriptions_changed()
        return before

    async def deliveries(
        self, subscription_id: UUID, limit: int
    ) -> tuple[list[NotificationDelivery], list[DeliveryAttempt]]:
        """The subscription's newest deliveries and its delivery log."""
        await self._store.get_subscription(subscription_id)
        return (
            await self._store.list_deliveries(subscription_id, limit),
            await self._store.list_delivery_attempts(subscription_id, limit),
        )

    async def send_test(self, subscription_id: UUID, by: str) -> NotificationDelivery:
        """Queue a test notice for one subscription (whatever its events)."""
        sub = await self._store.get_subscription(subscription_id)
        now = self._clock()
        event = next(iter(sorted(sub.events)))
        notice = Notice(
            event=event,
            key=f"test:{new_id()}",
            at=now,
            summary=f"Test notification sent by {by}: not a real {event}",
            data={"test": True},
            test=True,
        )
        delivery = self._delivery(sub, notice, now)
        await self._store.enqueue_deliveries([delivery])
        self._kick.set()
        return delivery

    # --- event sources ----------------------------------------------------------------------

    def status_applied(self, result: StatusResult) -> None:
        """After a status batch was applied (tracker, zombies, dead letters)."""
        if result.applied or result.disabled:
            self.notify(status_notices(result, self._clock()))

    def silence_alert(self, alert: Alert) -> None:
        self.notify([alert_notice(alert)])

    def notify(self, notices: Iterable[Notice]) -> None:
        """Queue notices; the loop stores their deliveries at once."""
        added = False
        for notice in notices:
            if len(self._pending) >= PENDING_LIMIT:
                log.error(
                    "notification dropped (too many waiting): %s",
                    notice.summary,
                    extra={"action": "notification_dropped", "event": notice.event.value},
                )
                continue
            self._pending.append(notice)
            added = True
        if added:
            self._kick.set()

    # --- the loop ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await run_periodically(
            "notifications",
            self.step,
            self._config.interval_seconds,
            self._stopping,
            self._kick,
            log=log,
        )

    async def step(self) -> int:
        """One pass: store waiting notices, check dead letters when due, send due deliveries.
        Returns how many deliveries were attempted."""
        await self._load_subscriptions()
        await self.store_pending()
        await self._check_dead_letters()
        await self._purge()
        attempted = 0
        if not self._subscriptions:
            return 0  # no subscription, no delivery: spare the store the claim
        while not self._stopping.is_set():
            claimed = await self._store.claim_deliveries(
                self._owner, self._clock(), self._config.lease_seconds, self._config.batch_size
            )
            if not claimed:
                break
            await asyncio.gather(*(self._deliver(d) for d in claimed))
            attempted += len(claimed)
            if len(claimed) < self._config.batch_size:
                break
        return attempted

    async def store_pending(self) -> int:
        """Store one delivery per (waiting notice, subscription that wants it)."""
        if not self._pending:
            return 0
        await self._load_subscriptions()
        notices, self._pending = self._pending, []
        try:
            return await self._enqueue(notices)
        except BaseException:
            self._pending[:0] = notices  # tried again next pass
            raise

    async def _enqueue(self, notices: Sequence[Notice]) -> int:
        subs = [s for s in self._subscriptions.values() if s.enabled]
        if not subs:
            return 0
        job_ids = [n.job_id for n in notices if n.job_id is not None]
        tags = await self._store.job_tags(job_ids) if any(s.tag for s in subs) else {}
        occurrence_ids = [n.occurrence_id for n in notices if n.occurrence_id is not None]
        exceptions = await self._store.occurrence_exceptions(occurrence_ids)
        now = self._clock()
        deliveries: list[NotificationDelivery] = []
        for notice in notices:
            if notice.job_id is not None and notice.job_id in tags:
                notice = replace(notice, tags=tags[notice.job_id])
            if notice.occurrence_id in exceptions:
                text = exceptions[notice.occurrence_id][-EXCEPTION_TEXT:]
                notice = replace(notice, data={**notice.data, "exception": text})
            deliveries.extend(self._delivery(s, notice, now) for s in subs if matches(s, notice))
        if not deliveries:
            return 0
        return await self._store.enqueue_deliveries(deliveries)

    def _delivery(self, sub: Subscription, notice: Notice, now: datetime) -> NotificationDelivery:
        delivery_id = new_id()
        return NotificationDelivery(
            id=delivery_id,
            subscription_id=sub.id,
            event=notice.event,
            key=notice.key,
            payload=payload(notice, delivery_id),
            next_attempt_at=now,
            created_at=now,
        )

    async def _deliver(self, delivery: NotificationDelivery) -> None:
        sub = self._subscriptions.get(delivery.subscription_id)
        if sub is None:  # created elsewhere in the last moments, or deleted
            await self._load_subscriptions(force=True)
            sub = self._subscriptions.get(delivery.subscription_id)
        attempt_no = delivery.attempts + 1
        if sub is None or not sub.enabled:
            result = SendResult(ok=False, error="the subscription is disabled or deleted")
            final = True
        else:
            try:
                result = await self._send(sub, delivery)
            except Exception as exc:  # a sender bug must not stop the loop
                log.exception("notification sender failed")
                result = SendResult(ok=False, error=repr(exc))
            final = result.ok or attempt_no >= self._config.max_attempts
        now = self._clock()
        attempt = DeliveryAttempt(
            id=new_id(),
            delivery_id=delivery.id,
            subscription_id=delivery.subscription_id,
            event=delivery.event,
            attempt=attempt_no,
            at=now,
            ok=result.ok,
            status_code=result.status_code,
            error=None if result.error is None else result.error[:ERROR_TEXT],
        )
        if result.ok:
            state, outcome, retry_at = DeliveryState.DELIVERED, "delivered", None
        elif final:
            state, outcome, retry_at = DeliveryState.FAILED, "failed", None
        else:
            state, outcome = DeliveryState.PENDING, "retried"
            delay = retry_delay(
                attempt_no, self._config.backoff_base_seconds, self._config.backoff_cap_seconds
            )
            retry_at = now + timedelta(seconds=delay)
        if not result.ok:
            log.warning(
                "notification %s to %s failed (attempt %d): %s",
                delivery.event.value,
                sub.name if sub else delivery.subscription_id,
                attempt_no,
                result.error,
                extra={"action": "notification_failed", "delivery_id": delivery.id},
            )
        recorded = await self._store.finish_delivery(
            attempt, self._owner, state=state, retry_at=retry_at
        )
        if recorded:
            self.sent += result.ok
            self.failed += state is DeliveryState.FAILED
            if self._on_sent is not None:
                self._on_sent(sub.channel if sub else Channel.WEBHOOK, outcome)

    async def _load_subscriptions(self, force: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if (
            not force
            and self._loaded_at is not None
            and loop.time() - self._loaded_at < self._config.subscriptions_ttl_seconds
        ):
            return
        changes = self._changes
        self._subscriptions = {s.id: s for s in await self._store.list_subscriptions()}
        # a change made while the list was read may be missing from it: read again next time
        self._loaded_at = loop.time() if changes == self._changes else None

    def _subscriptions_changed(self) -> None:
        self._changes += 1
        self._loaded_at = None

    async def _check_dead_letters(self) -> None:
        loop = asyncio.get_running_loop()
        last = self._checked_dead_letters
        if last is not None and loop.time() - last < self._config.dead_letter_interval_seconds:
            return
        self._checked_dead_letters = loop.time()
        count = await self._store.unresolved_dead_letters()
        if self._on_dead_letters is not None:
            self._on_dead_letters(count)
        if not self._is_leader():
            self._over.clear()  # the next leader decides; this one starts over when it is one
            return
        await self.dead_letters_counted(count)

    async def dead_letters_counted(self, count: int) -> None:
        """Tell the subscriptions whose threshold ``count`` passes (once, until it is back
        at or below their threshold)."""
        now = self._clock()
        notices: list[Notice] = []
        for sub in self._subscriptions.values():
            if not sub.enabled or NotificationEvent.DEADLETTERS_OVER_THRESHOLD not in sub.events:
                self._over.discard(sub.id)
                continue
            if count <= sub.threshold:
                self._over.discard(sub.id)
                continue
            if sub.id in self._over:
                continue
            self._over.add(sub.id)
            notices.append(
                Notice(
                    event=NotificationEvent.DEADLETTERS_OVER_THRESHOLD,
                    key=f"deadletters.over_threshold:{now.isoformat()}",
                    at=now,
                    summary=f"{count} unresolved dead letters (threshold {sub.threshold})",
                    data={"unresolved": count, "threshold": sub.threshold},
                    subscription_id=sub.id,
                )
            )
        if notices:
            await self._enqueue(notices)

    async def _purge(self) -> None:
        loop = asyncio.get_running_loop()
        if self._purged_at is not None and loop.time() - self._purged_at < 3600:
            return
        self._purged_at = loop.time()
        if self._is_leader():
            before = self._clock() - timedelta(seconds=self._config.keep_finished_seconds)
            await self._store.purge_deliveries(before, 1000)


def _fields(given: SubscriptionInput) -> dict[str, Any]:
    return {
        "name": given.name,
        "events": given.events,
        "channel": given.channel,
        "job_id": given.job_id,
        "tag": given.tag,
        "url": given.url,
        "secret": given.secret,
        "recipients": given.recipients,
        "threshold": given.threshold,
        "enabled": given.enabled,
    }
