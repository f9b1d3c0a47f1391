"""Notifications: matching, signing, backoff, the address rules, the notices of a status batch,
and the service's delivery loop on a real SQLite store with a fake sender."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from rota.app.notify import email_sender, webhook_sender
from rota.app.settings import NotificationSettings
from rota.builtin.config import SmtpSettings
from rota.core.addresses import AddressPolicy, address_refusal
from rota.core.errors import ValidationError
from rota.core.ids import new_id
from rota.core.models import OccurrenceStatus
from rota.core.notifications import (
    Channel,
    DeliveryState,
    Notice,
    NotificationDelivery,
    NotificationEvent,
    Subscription,
    matches,
    render_email,
    retry_delay,
    sign,
    verify,
)
from rota.core.records import AppliedChange, DisabledJob, StatusResult
from rota.services.notifications import (
    NotificationConfig,
    NotificationService,
    SendResult,
    SubscriptionInput,
    status_notices,
)
from rota.stores.sql import SqlStore

E = NotificationEvent
S = OccurrenceStatus
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def sub(**fields: object) -> Subscription:
    values: dict[str, object] = {
        "id": new_id(),
        "name": "s",
        "events": frozenset({E.OCCURRENCE_FAILED}),
        "channel": Channel.WEBHOOK,
        "url": "https://example.org/h",
        "secret": "k" * 16,
        "created_at": T0,
        "updated_at": T0,
    }
    values.update(fields)
    return Subscription(**values)  # type: ignore[arg-type]


def notice(**fields: object) -> Notice:
    values: dict[str, object] = {
        "event": E.OCCURRENCE_FAILED,
        "key": "k",
        "at": T0,
        "summary": "x failed",
        "job_id": uuid4(),
        "tags": ("billing",),
    }
    values.update(fields)
    return Notice(**values)  # type: ignore[arg-type]


# --- matching ----------------------------------------------------------------------------------


def test_a_subscription_wants_its_events_in_its_scope() -> None:
    told = notice()
    assert matches(sub(), told)
    assert not matches(sub(enabled=False), told)
    assert not matches(sub(events=frozenset({E.SILENCE_ALERT})), told)
    assert matches(sub(job_id=told.job_id), told)
    assert not matches(sub(job_id=uuid4()), told)
    assert matches(sub(tag="billing"), told)
    assert not matches(sub(tag="marketing"), told)
    assert not matches(sub(tag="billing"), notice(tags=()))
    assert not matches(sub(job_id=uuid4()), notice(job_id=None))  # e.g. a stalled dispatcher
    mine = sub()
    assert matches(mine, notice(subscription_id=mine.id))
    assert not matches(sub(), notice(subscription_id=mine.id))


# --- signing -----------------------------------------------------------------------------------


def test_the_signature_is_an_hmac_of_the_timestamp_and_the_body() -> None:
    body = b'{"event":"occurrence.failed"}'
    expected = hmac.new(b"secret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert sign("secret", 1_700_000_000, body) == f"sha256={expected}"
    signature = sign("secret", 1_700_000_000, body)
    assert verify("secret", "1700000000", body, signature, now=1_700_000_010)
    assert not verify("other", "1700000000", body, signature, now=1_700_000_010)
    assert not verify("secret", "1700000000", body + b" ", signature, now=1_700_000_010)
    assert not verify("secret", "1700000001", body, signature, now=1_700_000_010)
    assert not verify("secret", "1700000000", body, signature, now=1_700_000_000 + 301)
    assert not verify("secret", "soon", body, signature, now=1_700_000_000)


def test_retries_back_off_exponentially_up_to_a_cap() -> None:
    assert [retry_delay(n, 10, 100) for n in range(1, 6)] == [10, 20, 40, 80, 100]


# --- addresses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "192.168.0.9", "172.16.5.5", "169.254.169.254", "::1",
     "::ffff:127.0.0.1", "fe80::1", "0.0.0.0", "224.0.0.1", "100.64.0.1", "fd00::5",
     "2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe", "fec0::1", "[::1]", "not-an-ip"],
)  # fmt: skip
def test_special_addresses_are_refused(address: str) -> None:
    assert address_refusal(address) is not None
    assert AddressPolicy().refusal("hooks.example", [address]) is not None


def test_public_addresses_and_what_the_settings_allow_pass() -> None:
    assert address_refusal("93.184.216.34") is None
    assert address_refusal("2606:2800:220:1:248:1893:25c8:1946") is None
    policy = AddressPolicy.parse("127.0.0.0/8, 10.1.0.0/16", "*.corp.example,hooks.internal")
    assert policy.refusal("h", ["127.0.0.1", "10.1.9.9"]) is None
    assert policy.refusal("h", ["10.2.0.1"]) is not None
    assert policy.refusal("h", ["93.184.216.34", "10.2.0.1"]) is not None  # every address
    assert policy.refusal("a.corp.example", ["10.9.9.9"]) is None
    assert policy.refusal("hooks.internal", ["192.168.1.1"]) is None
    assert policy.refusal("corp.example.evil", ["10.9.9.9"]) is not None
    assert policy.refusal("h", []) is not None
    with pytest.raises(ValueError, match="does not appear"):
        AddressPolicy.parse("not-a-network", "")


async def test_the_webhook_sender_refuses_loopback_and_other_schemes_without_connecting() -> None:
    send = webhook_sender(NotificationSettings())
    delivery = NotificationDelivery(
        id=new_id(), subscription_id=new_id(), event=E.OCCURRENCE_FAILED, key="k",
        payload={"event": "occurrence.failed"}, next_attempt_at=T0, created_at=T0,
    )  # fmt: skip
    for url in ("http://127.0.0.1:9/x", "http://localhost:9/x", "http://[::1]:9/x"):
        result = await send(sub(url=url), delivery)
        assert not result.ok
        assert result.error is not None
        assert result.error.startswith("refused")
        assert result.status_code is None
    result = await send(sub(url="file:///etc/passwd"), delivery)
    assert not result.ok
    assert "http" in (result.error or "")


def test_an_email_tells_the_summary_and_details() -> None:
    subject, text = render_email(
        {"event": "occurrence.failed", "summary": "report failed", "jobId": "j1",
         "tags": ["a"], "data": {"attempt": 2}},
    )  # fmt: skip
    assert subject == "[Rota] occurrence.failed: report failed"
    assert "Job: j1" in text
    assert "Tags: a" in text
    assert "attempt: 2" in text


# --- the notices of a status batch -------------------------------------------------------------


def change(before: S, after: S, attempt: int = 1) -> AppliedChange:
    return AppliedChange(
        occurrence_id=uuid4(), job_id=uuid4(), from_status=before, to_status=after,
        attempt=attempt, job_type="report",
    )  # fmt: skip


def test_final_failures_timeouts_and_auto_disables_are_notices() -> None:
    failed, timed_out = change(S.RUNNING, S.FAILED, 3), change(S.RUNNING, S.TIMED_OUT)
    disabled = DisabledJob(job_id=uuid4(), bucket=1, reason="5 consecutive failures")
    result = StatusResult(
        applied=[
            change(S.QUEUED, S.RUNNING),
            change(S.RUNNING, S.QUEUED, 2),  # a retry: not told
            failed,
            change(S.RUNNING, S.COMPLETED),
            timed_out,
            change(S.QUEUED, S.CANCELLED),
        ],
        disabled=[disabled],
    )
    notices = status_notices(result, T0)
    assert [n.event for n in notices] == [
        E.OCCURRENCE_FAILED, E.OCCURRENCE_TIMED_OUT, E.JOB_AUTO_DISABLED,
    ]  # fmt: skip
    assert notices[0].key == f"occurrence.failed:{failed.occurrence_id}:3"
    assert notices[0].job_id == failed.job_id
    assert notices[0].data["status"] == "Failed"
    assert notices[1].data["status"] == "TimedOut"
    assert notices[2].job_id == disabled.job_id
    assert "5 consecutive failures" in notices[2].summary


# --- the service -------------------------------------------------------------------------------


class FakeSender:
    def __init__(self, *answers: SendResult | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[Subscription, NotificationDelivery]] = []

    async def __call__(self, s: Subscription, d: NotificationDelivery) -> SendResult:
        self.sent.append((s, d))
        answer = self.answers.pop(0) if self.answers else SendResult(ok=True, status_code=200)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def service(
    store: SqlStore, send: FakeSender, clock: Clock, **config: object
) -> tuple[NotificationService, list[tuple[Channel, str]], list[int]]:
    sent: list[tuple[Channel, str]] = []
    counted: list[int] = []
    made = NotificationService(
        store,
        NotificationConfig(
            **({"backoff_base_seconds": 10.0, "max_attempts": 3} | config)  # type: ignore[arg-type]
        ),
        instance_id="s1",
        send=send,
        clock=clock,
        on_sent=lambda channel, outcome: sent.append((channel, outcome)),
        on_dead_letters=counted.append,
    )
    return made, sent, counted


WEBHOOK = SubscriptionInput(
    name="hook",
    events=frozenset({E.OCCURRENCE_FAILED, E.DEADLETTERS_OVER_THRESHOLD}),
    channel=Channel.WEBHOOK,
    url="https://example.org/h",
    secret="k" * 16,
    threshold=2,
)


async def test_a_delivery_is_retried_with_backoff_then_given_up(store: SqlStore) -> None:
    send = FakeSender(
        SendResult(ok=False, status_code=500, error="answered 500"),
        RuntimeError("sender bug"),
        SendResult(ok=False, error="timed out"),
    )
    clock = Clock()
    notifier, sent, _ = service(store, send, clock)
    s = await notifier.create_subscription(WEBHOOK, "ada")
    notifier.notify([notice()])
    assert await notifier.step() == 1
    assert await notifier.step() == 0  # not due yet: 10 s backoff
    clock.now += timedelta(seconds=10)
    assert await notifier.step() == 1
    clock.now += timedelta(seconds=19)
    assert await notifier.step() == 0  # 20 s after the second attempt
    clock.now += timedelta(seconds=1)
    assert await notifier.step() == 1
    clock.now += timedelta(hours=1)
    assert await notifier.step() == 0  # given up after max_attempts
    [d] = await store.list_deliveries(s.id, 10)
    assert d.state is DeliveryState.FAILED
    assert d.attempts == 3
    errors = [a.error for a in await store.list_delivery_attempts(s.id, 10)]
    assert errors == ["timed out", "RuntimeError('sender bug')", "answered 500"]
    assert sent == [(Channel.WEBHOOK, "retried")] * 2 + [(Channel.WEBHOOK, "failed")]
    assert send.sent[0][1].payload["summary"] == "x failed"


async def test_the_same_notice_twice_is_sent_once(store: SqlStore) -> None:
    send = FakeSender()
    notifier, sent, _ = service(store, send, Clock())
    await notifier.create_subscription(WEBHOOK, "ada")
    told = notice()
    notifier.notify([told, told])
    await notifier.step()
    notifier.notify([told])
    await notifier.step()
    assert len(send.sent) == 1
    assert sent == [(Channel.WEBHOOK, "delivered")]


async def test_a_disabled_subscription_is_not_told(store: SqlStore) -> None:
    send = FakeSender()
    notifier, _, _ = service(store, send, Clock())
    s = await notifier.create_subscription(WEBHOOK, "ada")
    notifier.notify([notice(key="a")])
    await notifier.store_pending()
    await notifier.update_subscription(s.id, {"enabled": False})
    notifier.notify([notice(key="b")])
    await notifier.step()
    assert send.sent == []  # the queued one is given up, the new one never queued
    [d] = await store.list_deliveries(s.id, 10)
    assert d.state is DeliveryState.FAILED
    assert d.last_error == "the subscription is disabled or deleted"


async def test_a_subscription_made_while_the_list_is_read_is_told(store: SqlStore) -> None:
    """The loop reads the subscriptions while one is created: the list it read may lack the
    new one, so it is not kept as fresh (a failed job right after was once told nobody)."""
    send = FakeSender()
    notifier, _, _ = service(store, send, Clock())
    reading, created = asyncio.Event(), asyncio.Event()
    read = store.list_subscriptions

    async def slow_read() -> list[Subscription]:
        found = await read()
        reading.set()
        await created.wait()
        return found

    store.list_subscriptions = slow_read  # type: ignore[method-assign]
    pass_ = asyncio.create_task(notifier.step())
    await reading.wait()
    await notifier.create_subscription(WEBHOOK, "ada")
    created.set()
    await pass_
    store.list_subscriptions = read  # type: ignore[method-assign]
    notifier.notify([notice()])
    assert await notifier.step() == 1
    assert len(send.sent) == 1


async def test_dead_letters_over_a_threshold_are_told_once_per_crossing(
    store: SqlStore,
) -> None:
    send = FakeSender()
    clock = Clock()
    notifier, _, counted = service(store, send, clock, dead_letter_interval_seconds=3600.0)
    await notifier.create_subscription(WEBHOOK, "ada")
    await notifier.step()  # counts the store's (none), and not again within the hour
    for count in (1, 3, 4, 2, 5):
        clock.now += timedelta(seconds=30)
        await notifier.dead_letters_counted(count)
        await notifier.step()
    told = [d.payload["data"]["unresolved"] for _, d in send.sent]
    assert told == [3, 5]  # over 2 at 3; again only after it was back at 2
    assert counted == [0]


async def test_subscriptions_are_checked(store: SqlStore) -> None:
    notifier, _, _ = service(store, FakeSender(), Clock())
    bad = [
        {"name": " "},
        {"events": frozenset()},
        {"url": None},
        {"secret": None},
        {"channel": Channel.EMAIL},
        {"job_id": uuid4(), "tag": "x"},
        {"threshold": -1},
    ]
    for changes in bad:
        given = replace(WEBHOOK, **changes)  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            await notifier.create_subscription(given, "ada")
    assert await notifier.list_subscriptions() == []


async def test_email_goes_only_to_the_allowed_domains_and_needs_a_server() -> None:
    delivery = NotificationDelivery(
        id=new_id(), subscription_id=new_id(), event=E.OCCURRENCE_FAILED, key="k",
        payload={"event": "occurrence.failed", "summary": "x"}, next_attempt_at=T0,
        created_at=T0,
    )  # fmt: skip
    mail = sub(channel=Channel.EMAIL, url=None, secret=None, recipients=("a@ok.org", "b@evil.org"))
    unconfigured = await email_sender(SmtpSettings())(mail, delivery)
    assert not unconfigured.ok
    assert "no SMTP server configured" in (unconfigured.error or "")
    limited = SmtpSettings(
        host="127.0.0.1", port=9, from_address="rota@ok.org", allowed_recipient_domains="ok.org"
    )
    refused = await email_sender(limited)(mail, delivery)
    assert not refused.ok
    assert refused.error == "recipients outside ROTA_SMTP__ALLOWED_RECIPIENT_DOMAINS: b@evil.org"
