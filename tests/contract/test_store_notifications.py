"""The Store contract for notifications (subscriptions, the deliveries queue with its leases,
the delivery log), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from rota.core.errors import ConflictError, NotFoundError
from rota.core.ids import new_id
from rota.core.notifications import (
    KEPT_ATTEMPTS,
    Channel,
    DeliveryAttempt,
    DeliveryState,
    NotificationDelivery,
    NotificationEvent,
    Subscription,
)
from rota.core.ports import Store
from tests.contract.test_failed_occurrences import LATER, poison, running
from tests.contract.test_store import S, make_job, status

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
E = NotificationEvent


def make_subscription(**fields: object) -> Subscription:
    values: dict[str, object] = {
        "id": new_id(),
        "name": "ops",
        "events": frozenset({E.OCCURRENCE_FAILED, E.JOB_AUTO_DISABLED}),
        "channel": Channel.WEBHOOK,
        "url": "https://hooks.example/rota",
        "secret": "s3cret",
        "created_at": T0,
        "updated_at": T0,
        "created_by": "ada",
    }
    values.update(fields)
    return Subscription(**values)  # type: ignore[arg-type]


def delivery(sub: Subscription, key: str = "k1", at: datetime = T0) -> NotificationDelivery:
    return NotificationDelivery(
        id=new_id(),
        subscription_id=sub.id,
        event=E.OCCURRENCE_FAILED,
        key=key,
        payload={"event": "occurrence.failed", "summary": key},
        next_attempt_at=at,
        created_at=at,
    )


def attempt_of(
    d: NotificationDelivery, n: int = 1, *, ok: bool = True, at: datetime = T0, **fields: object
) -> DeliveryAttempt:
    values: dict[str, object] = {
        "id": new_id(),
        "delivery_id": d.id,
        "subscription_id": d.subscription_id,
        "event": d.event,
        "attempt": n,
        "at": at,
        "ok": ok,
        "status_code": 200 if ok else 500,
        "error": None if ok else "answered 500",
    }
    values.update(fields)
    return DeliveryAttempt(**values)  # type: ignore[arg-type]


async def test_subscription_round_trip_update_and_delete(store: Store) -> None:
    job_id = new_id()
    sub = make_subscription(job_id=job_id, recipients=(), threshold=3)
    await store.create_subscription(sub)
    assert await store.get_subscription(sub.id) == sub
    email = make_subscription(
        name="mail", channel=Channel.EMAIL, url=None, secret=None, recipients=("a@x.org",),
        tag="billing", created_at=T0 + SECOND,
    )  # fmt: skip
    await store.create_subscription(email)
    assert [s.id for s in await store.list_subscriptions()] == [sub.id, email.id]
    changed = replace(
        sub, name="ops 2", enabled=False, events=frozenset({E.SILENCE_ALERT}),
        created_by="someone else", updated_at=T0 + SECOND,
    )  # fmt: skip
    stored = await store.update_subscription(changed)
    assert stored == replace(changed, created_by="ada")
    assert await store.get_subscription(sub.id) == stored
    with pytest.raises(ConflictError):
        await store.create_subscription(sub)
    await store.delete_subscription(sub.id)
    with pytest.raises(NotFoundError):
        await store.get_subscription(sub.id)
    with pytest.raises(NotFoundError):
        await store.delete_subscription(sub.id)
    with pytest.raises(NotFoundError):
        await store.update_subscription(sub)


async def test_the_same_notice_is_enqueued_once_per_subscription(store: Store) -> None:
    a, b = make_subscription(), make_subscription(name="other")
    await store.create_subscription(a)
    await store.create_subscription(b)
    gone = make_subscription(name="deleted")
    first = await store.enqueue_deliveries([delivery(a), delivery(b), delivery(gone)])
    assert first == 2
    again = await store.enqueue_deliveries([delivery(a), delivery(a, "k2")])
    assert again == 1
    assert await store.enqueue_deliveries([]) == 0
    keys = sorted(d.key for d in await store.list_deliveries(a.id, 10))
    assert keys == ["k1", "k2"]


async def test_claims_are_due_first_leased_and_exclusive(store: Store) -> None:
    sub = make_subscription()
    await store.create_subscription(sub)
    later, sooner, future = (
        delivery(sub, "later", T0 + SECOND), delivery(sub, "sooner", T0),
        delivery(sub, "future", T0 + timedelta(hours=1)),
    )  # fmt: skip
    await store.enqueue_deliveries([later, sooner, future])
    now = T0 + 2 * SECOND
    claimed = await store.claim_deliveries("s1", now, 30, 10)
    assert [d.key for d in claimed] == ["sooner", "later"]
    # leased: nobody else gets them while the lease lasts; after it, another server may
    assert await store.claim_deliveries("s2", now + 10 * SECOND, 30, 10) == []
    taken = await store.claim_deliveries("s2", now + 31 * SECOND, 30, 1)
    assert [d.key for d in taken] == ["sooner"]
    # the first claimer lost it: its result is not recorded
    assert not await store.finish_delivery(attempt_of(sooner), "s1", state=DeliveryState.DELIVERED)
    assert await store.finish_delivery(attempt_of(sooner), "s2", state=DeliveryState.DELIVERED)
    # a finished delivery is not finished again
    assert not await store.finish_delivery(attempt_of(sooner), "s2", state=DeliveryState.FAILED)


async def test_two_claimers_never_share_a_delivery(store: Store) -> None:
    sub = make_subscription()
    await store.create_subscription(sub)
    await store.enqueue_deliveries([delivery(sub, f"k{i}") for i in range(20)])
    got = await asyncio.gather(
        *(store.claim_deliveries(f"s{i}", T0 + SECOND, 30, 5) for i in range(6))
    )
    ids = [d.id for batch in got for d in batch]
    assert len(ids) == len(set(ids)) == 20


async def test_a_failed_attempt_is_retried_later_and_logged(store: Store) -> None:
    sub = make_subscription()
    await store.create_subscription(sub)
    d = delivery(sub)
    await store.enqueue_deliveries([d])
    [claimed] = await store.claim_deliveries("s1", T0, 30, 10)
    retry_at = T0 + 10 * SECOND
    failed = attempt_of(d, 1, ok=False, at=T0)
    assert await store.finish_delivery(failed, "s1", state=DeliveryState.PENDING, retry_at=retry_at)
    # not due before retry_at, although no lease holds it
    assert await store.claim_deliveries("s1", T0 + 5 * SECOND, 30, 10) == []
    [again] = await store.claim_deliveries("s1", retry_at, 30, 10)
    assert again.attempts == 1
    assert again.last_error == "answered 500"
    last = attempt_of(d, 2, ok=False, at=retry_at, status_code=None, error="timed out")
    assert await store.finish_delivery(last, "s1", state=DeliveryState.FAILED)
    [stored] = await store.list_deliveries(sub.id, 10)
    assert stored.state is DeliveryState.FAILED
    assert stored.attempts == 2
    assert stored.finished_at == retry_at
    assert await store.list_deliveries(sub.id, 10, DeliveryState.PENDING) == []
    log = await store.list_delivery_attempts(sub.id, 10)
    assert [(a.attempt, a.ok, a.status_code, a.error) for a in log] == [
        (2, False, None, "timed out"),
        (1, False, 500, "answered 500"),
    ]
    assert claimed.id == d.id


async def test_the_delivery_log_keeps_the_newest_attempts(store: Store) -> None:
    sub = make_subscription()
    await store.create_subscription(sub)
    deliveries = [delivery(sub, f"k{i}") for i in range(KEPT_ATTEMPTS + 3)]
    await store.enqueue_deliveries(deliveries)
    claimed = await store.claim_deliveries("s1", T0, 30, len(deliveries))
    for i, d in enumerate(claimed):
        done = attempt_of(d, at=T0 + i * SECOND)
        assert await store.finish_delivery(done, "s1", state=DeliveryState.DELIVERED)
    log = await store.list_delivery_attempts(sub.id, 1000)
    assert len(log) == KEPT_ATTEMPTS
    assert log[0].at == T0 + (KEPT_ATTEMPTS + 2) * SECOND
    assert log[-1].at == T0 + 3 * SECOND


async def test_purge_deletes_finished_deliveries_only(store: Store) -> None:
    sub = make_subscription()
    await store.create_subscription(sub)
    done, pending = delivery(sub, "done"), delivery(sub, "pending", T0 + timedelta(hours=1))
    await store.enqueue_deliveries([done, pending])
    [claimed] = await store.claim_deliveries("s1", T0, 30, 10)
    await store.finish_delivery(attempt_of(claimed), "s1", state=DeliveryState.DELIVERED)
    assert await store.purge_deliveries(T0, 100) == 0
    assert await store.purge_deliveries(T0 + SECOND, 100) == 1
    assert [d.key for d in await store.list_deliveries(sub.id, 10)] == ["pending"]
    # deleting the subscription takes its deliveries and log along
    await store.delete_subscription(sub.id)
    assert await store.list_deliveries(sub.id, 10) == []
    assert await store.list_delivery_attempts(sub.id, 10) == []


async def test_unresolved_dead_letters_and_job_tags(store: Store) -> None:
    assert await store.unresolved_dead_letters() == 0
    records = [poison(), poison(), poison()]
    await store.record_dead_letters(records)
    await store.update_failed(records[0].id, resolved=True, resolved_by="ada", now=T0)
    assert await store.unresolved_dead_letters() == 2
    tagged, plain = make_job(tags=["billing", "eu"]), make_job()
    await store.create_jobs([tagged, plain])
    missing: UUID = new_id()
    tags = await store.job_tags([tagged.id, plain.id, missing])
    assert tags == {tagged.id: ("billing", "eu"), plain.id: ()}
    assert await store.job_tags([]) == {}


async def test_occurrence_exceptions(store: Store) -> None:
    failed, quiet = await running(store), await running(store)
    await store.apply_status([status(failed, S.FAILED, LATER, exception="ValueError: no")])
    await store.apply_status([status(quiet, S.COMPLETED, LATER)])
    found = await store.occurrence_exceptions([failed.id, quiet.id, new_id()])
    assert found == {failed.id: "ValueError: no"}
    assert await store.occurrence_exceptions([]) == {}
