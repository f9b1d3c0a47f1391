"""The dashboard's notifications page (Admins): subscriptions with their last delivery
attempts, and the form that creates one; other roles see neither."""

from __future__ import annotations

import httpx

from rota.core.ids import new_id
from rota.core.notifications import DeliveryAttempt, DeliveryState
from tests.api_runtime import MiniRuntime
from tests.integration.test_dashboard_pages import anonymous as anonymous
from tests.integration.test_dashboard_pages import jar, sign_in

SUBS = "/api/v1/notifications/subscriptions"


async def test_admins_see_subscriptions_and_their_last_attempts(
    client: httpx.AsyncClient, runtime: MiniRuntime
) -> None:
    empty = await client.get("/notifications")
    assert 'data-testid="no-subscriptions"' in empty.text
    assert 'data-testid="create-subscription"' in empty.text
    assert 'href="/notifications"' in empty.text  # in the navigation
    created = await client.post(
        SUBS,
        json={"name": "pager <duty>", "events": ["occurrence.failed"], "channel": "webhook",
              "url": "https://hooks.example.org/x", "tag": "billing"},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    sub_id = created.json()["id"]
    queued = await client.post(f"{SUBS}/{sub_id}/test")
    assert queued.status_code == 202
    [claimed] = await runtime.store.claim_deliveries("test", runtime.jobs.now(), 30, 10)
    await runtime.store.finish_delivery(
        DeliveryAttempt(
            id=new_id(), delivery_id=claimed.id, subscription_id=claimed.subscription_id,
            event=claimed.event, attempt=1, at=runtime.jobs.now(), ok=False, status_code=502,
            error="answered 502",
        ),
        "test",
        state=DeliveryState.PENDING,
        retry_at=runtime.jobs.now(),
    )  # fmt: skip
    page = (await client.get("/notifications")).text
    assert "pager &lt;duty&gt;" in page  # escaped
    assert "tag billing" in page
    assert "webhook https://hooks.example.org/x" in page
    assert 'data-testid="attempts"' in page
    assert "answered 502" in page
    assert f'data-api="DELETE {SUBS}/{sub_id}"' in page
    assert f'data-api="POST {SUBS}/{sub_id}/test"' in page


async def test_other_roles_see_no_subscription(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    created = await client.post(
        SUBS,
        json={"name": "secret-ops", "events": "silence.alert", "channel": "email",
              "recipients": "ops@example.org"},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    operator = await sign_in(anonymous, "operator")
    page = await anonymous.get("/notifications", headers=jar(operator))
    assert page.status_code == 200
    assert "Admins only." in page.text
    assert "secret-ops" not in page.text
    assert 'href="/notifications"' not in page.text
