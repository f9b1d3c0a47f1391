"""Two servers deliver notifications from one store (SQLite and PostgreSQL, each server with its
own connections): every delivery is sent once, by one of them, although both work at once."""

from __future__ import annotations

import asyncio
from collections import Counter

from rota.core.notifications import Channel, NotificationDelivery, NotificationEvent, Subscription
from rota.services.notifications import (
    NotificationConfig,
    NotificationService,
    Send,
    SendResult,
    SubscriptionInput,
)
from rota.stores.sql import SqlStore
from tests.unit.test_notifications import notice


async def test_two_servers_never_send_the_same_delivery(store_url: str) -> None:
    stores = [SqlStore(store_url), SqlStore(store_url)]
    for store in stores:
        await store.open()
    sent: Counter[str] = Counter()
    by: Counter[str] = Counter()

    def sender(name: str) -> Send:
        async def send(sub: Subscription, delivery: NotificationDelivery) -> SendResult:
            await asyncio.sleep(0.01)  # a send takes time: the other server works meanwhile
            sent[delivery.key] += 1
            by[name] += 1
            return SendResult(ok=True, status_code=200)

        return send

    config = NotificationConfig(batch_size=5)
    servers = [
        NotificationService(store, config, instance_id=f"server-{i}", send=sender(f"s{i}"))
        for i, store in enumerate(stores)
    ]
    try:
        await servers[0].create_subscription(
            SubscriptionInput(
                name="hook", events=frozenset({NotificationEvent.OCCURRENCE_FAILED}),
                channel=Channel.WEBHOOK, url="https://example.org/h", secret="k" * 16,
            ),
            "ada",
        )  # fmt: skip
        # both servers saw the same 40 events (e.g. replayed reports): stored once each
        for server in servers:
            server.notify([notice(key=f"event-{i}") for i in range(40)])
        await asyncio.gather(*(server.store_pending() for server in servers))
        for _ in range(3):
            await asyncio.gather(*(server.step() for server in servers))
        assert sorted(sent) == sorted(f"event-{i}" for i in range(40))
        assert set(sent.values()) == {1}
        assert sum(by.values()) == 40
        assert len(by) == 2, by  # both worked
    finally:
        for store in stores:
            await store.close()
