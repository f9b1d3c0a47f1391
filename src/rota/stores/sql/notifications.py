"""The SQL store's notifications: subscriptions, the deliveries queue (claimed with a lease, as
the dispatch sweeper claims occurrences) and the delivery log. A mixin of
:class:`rota.stores.sql.SqlStore`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import Row, and_, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.errors import NotFoundError
from rota.core.notifications import (
    KEPT_ATTEMPTS,
    Channel,
    DeliveryAttempt,
    DeliveryState,
    NotificationDelivery,
    NotificationEvent,
    Subscription,
)
from rota.stores.schema import failed_occurrences, jobs, occurrences
from rota.stores.schema import notification_attempts as attempts_t
from rota.stores.schema import notification_deliveries as deliveries_t
from rota.stores.schema import notification_subscriptions as subs_t
from rota.stores.sql.engine import SqlParts


def _subscription_values(sub: Subscription) -> dict[str, Any]:
    return {
        "id": sub.id,
        "name": sub.name,
        "events": sorted(e.value for e in sub.events),
        "channel": sub.channel.value,
        "job_id": sub.job_id,
        "tag": sub.tag,
        "url": sub.url,
        "secret": sub.secret,
        "recipients": list(sub.recipients),
        "threshold": sub.threshold,
        "enabled": sub.enabled,
        "created_at": sub.created_at,
        "updated_at": sub.updated_at,
        "created_by": sub.created_by,
    }


def _events(values: Any) -> frozenset[NotificationEvent]:
    known = {e.value for e in NotificationEvent}
    return frozenset(NotificationEvent(v) for v in values or () if v in known)


def _subscription(row: Row[Any]) -> Subscription:
    return Subscription(
        id=row.id,
        name=row.name,
        events=_events(row.events),
        channel=Channel(row.channel),
        job_id=row.job_id,
        tag=row.tag,
        url=row.url,
        secret=row.secret,
        recipients=tuple(row.recipients or ()),
        threshold=row.threshold,
        enabled=row.enabled,
        created_at=row.created_at,
        updated_at=row.updated_at,
        created_by=row.created_by,
    )


def _delivery(row: Row[Any]) -> NotificationDelivery:
    return NotificationDelivery(
        id=row.id,
        subscription_id=row.subscription_id,
        event=NotificationEvent(row.event),
        key=row.event_key,
        payload=row.payload,
        state=DeliveryState(row.state),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        created_at=row.created_at,
        finished_at=row.finished_at,
        last_error=row.last_error,
    )


def _attempt(row: Row[Any]) -> DeliveryAttempt:
    return DeliveryAttempt(
        id=row.id,
        delivery_id=row.delivery_id,
        subscription_id=row.subscription_id,
        event=NotificationEvent(row.event),
        attempt=row.attempt,
        at=row.at,
        ok=row.ok,
        status_code=row.status_code,
        error=row.error,
    )


class NotificationQueries(SqlParts):
    """The :class:`~rota.core.ports.NotificationStore` slice of the store."""

    # --- subscriptions ----------------------------------------------------------------------

    async def create_subscription(self, subscription: Subscription) -> None:
        async with self._write() as conn:  # a duplicate id: ConflictError (guard_errors)
            await conn.execute(subs_t.insert().values(_subscription_values(subscription)))

    async def get_subscription(self, subscription_id: UUID) -> Subscription:
        async with self._read() as conn:
            row = (
                await conn.execute(select(subs_t).where(subs_t.c.id == subscription_id))
            ).one_or_none()
        if row is None:
            raise NotFoundError("subscription", subscription_id)
        return _subscription(row)

    async def list_subscriptions(self) -> list[Subscription]:
        stmt = select(subs_t).order_by(subs_t.c.created_at, subs_t.c.id)
        async with self._read() as conn:
            return [_subscription(row) for row in await conn.execute(stmt)]

    async def update_subscription(self, subscription: Subscription) -> Subscription:
        values = _subscription_values(subscription)
        for kept in ("id", "created_at", "created_by"):
            del values[kept]
        async with self._write() as conn:
            row = (
                await conn.execute(
                    update(subs_t)
                    .where(subs_t.c.id == subscription.id)
                    .values(values)
                    .returning(*subs_t.c)
                )
            ).one_or_none()
        if row is None:
            raise NotFoundError("subscription", subscription.id)
        return _subscription(row)

    async def delete_subscription(self, subscription_id: UUID) -> None:
        async with self._write() as conn:
            # Explicitly, not only by the foreign keys' cascade: SQLite migrations may run
            # without foreign keys, and the log rows name the subscription too.
            await conn.execute(
                delete(attempts_t).where(attempts_t.c.subscription_id == subscription_id)
            )
            await conn.execute(
                delete(deliveries_t).where(deliveries_t.c.subscription_id == subscription_id)
            )
            done = await conn.execute(delete(subs_t).where(subs_t.c.id == subscription_id))
        if done.rowcount == 0:
            raise NotFoundError("subscription", subscription_id)

    # --- deliveries -------------------------------------------------------------------------

    async def enqueue_deliveries(self, deliveries: Sequence[NotificationDelivery]) -> int:
        if not deliveries:
            return 0
        wanted = list({d.subscription_id for d in deliveries})
        async with self._write() as conn:
            present = set(
                (
                    await conn.execute(select(subs_t.c.id).where(self._member(subs_t.c.id, wanted)))
                ).scalars()
            )
            rows = [
                {
                    "id": d.id,
                    "subscription_id": d.subscription_id,
                    "event": d.event.value,
                    "event_key": d.key,
                    "payload": dict(d.payload),
                    "state": d.state.value,
                    "attempts": d.attempts,
                    "next_attempt_at": d.next_attempt_at,
                    "created_at": d.created_at,
                }
                for d in deliveries
                if d.subscription_id in present
            ]
            if not rows:
                return 0
            dialect = postgresql if self._dialect == "postgresql" else sqlite
            stmt = (
                dialect.insert(deliveries_t)
                .values(rows)
                .on_conflict_do_nothing()
                .returning(deliveries_t.c.id)
            )
            return len((await conn.execute(stmt)).all())

    async def claim_deliveries(
        self, owner: str, now: datetime, lease_seconds: float, limit: int
    ) -> list[NotificationDelivery]:
        d = deliveries_t.c
        due = (
            select(d.id)
            .where(
                d.state == DeliveryState.PENDING.value,
                d.next_attempt_at <= now,
                or_(d.claimed_until.is_(None), d.claimed_until <= now),
            )
            .order_by(d.next_attempt_at, d.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        until = now + timedelta(seconds=lease_seconds)
        async with self._write() as conn:
            ids = list((await conn.execute(due)).scalars())
            if not ids:
                return []
            rows = await conn.execute(
                update(deliveries_t)
                .where(self._member(d.id, ids))
                .values(claimed_by=owner, claimed_until=until)
                .returning(*deliveries_t.c)
            )
            claimed = [_delivery(row) for row in rows]
        return sorted(claimed, key=lambda x: (x.next_attempt_at, x.id))

    async def finish_delivery(
        self,
        attempt: DeliveryAttempt,
        owner: str,
        *,
        state: DeliveryState,
        retry_at: datetime | None = None,
    ) -> bool:
        d = deliveries_t.c
        values: dict[str, Any] = {
            "state": state.value,
            "attempts": attempt.attempt,
            "claimed_by": None,
            "claimed_until": None,
            "last_error": attempt.error,
        }
        if state is DeliveryState.PENDING:
            values["next_attempt_at"] = retry_at or attempt.at
        else:
            values["finished_at"] = attempt.at
        async with self._write() as conn:
            done = await conn.execute(
                update(deliveries_t)
                .where(
                    d.id == attempt.delivery_id,
                    d.claimed_by == owner,
                    d.state == DeliveryState.PENDING.value,
                )
                .values(values)
            )
            if done.rowcount == 0:
                return False
            await conn.execute(
                attempts_t.insert().values(
                    id=attempt.id,
                    delivery_id=attempt.delivery_id,
                    subscription_id=attempt.subscription_id,
                    event=attempt.event.value,
                    attempt=attempt.attempt,
                    at=attempt.at,
                    ok=attempt.ok,
                    status_code=attempt.status_code,
                    error=attempt.error,
                )
            )
            await self._trim_log(conn, attempt.subscription_id)
        return True

    async def _trim_log(self, conn: AsyncConnection, subscription_id: UUID) -> None:
        """Keep the newest :data:`KEPT_ATTEMPTS` attempts of the subscription."""
        a = attempts_t.c
        oldest_kept = (
            select(a.at, a.id)
            .where(a.subscription_id == subscription_id)
            .order_by(a.at.desc(), a.id.desc())
            .offset(KEPT_ATTEMPTS - 1)
            .limit(1)
        )
        edge = (await conn.execute(oldest_kept)).one_or_none()
        if edge is None:
            return
        await conn.execute(
            delete(attempts_t).where(
                a.subscription_id == subscription_id,
                or_(a.at < edge.at, and_(a.at == edge.at, a.id < edge.id)),
            )
        )

    async def list_deliveries(
        self, subscription_id: UUID, limit: int, state: DeliveryState | None = None
    ) -> list[NotificationDelivery]:
        d = deliveries_t.c
        stmt = select(deliveries_t).where(d.subscription_id == subscription_id)
        if state is not None:
            stmt = stmt.where(d.state == state.value)
        stmt = stmt.order_by(d.created_at.desc(), d.id.desc()).limit(limit)
        async with self._read() as conn:
            return [_delivery(row) for row in await conn.execute(stmt)]

    async def list_delivery_attempts(
        self, subscription_id: UUID, limit: int
    ) -> list[DeliveryAttempt]:
        a = attempts_t.c
        stmt = (
            select(attempts_t)
            .where(a.subscription_id == subscription_id)
            .order_by(a.at.desc(), a.id.desc())
            .limit(limit)
        )
        async with self._read() as conn:
            return [_attempt(row) for row in await conn.execute(stmt)]

    async def purge_deliveries(self, finished_before: datetime, limit: int) -> int:
        d = deliveries_t.c
        old = (
            select(d.id)
            .where(d.state != DeliveryState.PENDING.value, d.finished_at < finished_before)
            .limit(limit)
        )
        async with self._write() as conn:
            ids = list((await conn.execute(old)).scalars())
            if not ids:
                return 0
            await conn.execute(delete(deliveries_t).where(self._member(d.id, ids)))
        return len(ids)

    # --- what the notifier reads ----------------------------------------------------------

    async def unresolved_dead_letters(self) -> int:
        stmt = (
            select(func.count())
            .select_from(failed_occurrences)
            .where(~failed_occurrences.c.resolved)
        )
        async with self._read() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def job_tags(self, job_ids: Sequence[UUID]) -> dict[UUID, tuple[str, ...]]:
        if not job_ids:
            return {}
        ids = list(dict.fromkeys(job_ids))
        # A job's tags are its own column (``job_tags`` is read by tag, not by job).
        stmt = select(jobs.c.id, jobs.c.tags).where(self._member(jobs.c.id, ids))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return {row.id: tuple(sorted(set(row.tags or ()))) for row in rows}

    async def occurrence_exceptions(self, occurrence_ids: Sequence[UUID]) -> dict[UUID, str]:
        if not occurrence_ids:
            return {}
        o = occurrences.c
        stmt = select(o.id, o.exception).where(
            self._member(o.id, list(dict.fromkeys(occurrence_ids))), o.exception.is_not(None)
        )
        async with self._read() as conn:
            return {row.id: row.exception for row in await conn.execute(stmt)}
