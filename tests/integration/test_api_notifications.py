"""Notification subscriptions over HTTP (Admin only), on a real SQLite store: CRUD, input
refused as problem details, the audit log, the delivery log."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from rota.core.ids import new_id
from tests.api_client import api_client
from tests.integration.test_api import assert_problem, fields

SUBS = "/api/v1/notifications/subscriptions"
WEBHOOK = {
    "name": "on-call",
    "events": ["occurrence.failed", "job.auto_disabled"],
    "channel": "webhook",
    "url": "https://hooks.example.org/rota",
}


async def create(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    r = await client.post(SUBS, json=WEBHOOK | overrides)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_create_read_change_and_delete_a_subscription(client: httpx.AsyncClient) -> None:
    r = await client.post(SUBS, json=WEBHOOK)
    assert r.status_code == 201, r.text
    created = r.json()
    assert r.headers["location"] == f"{SUBS}/{created['id']}"
    # a generated secret is shown once
    assert created["hasSecret"] is True
    assert len(created["secret"]) >= 32
    assert created["scope"] == "global"
    assert created["events"] == ["job.auto_disabled", "occurrence.failed"]
    assert created["createdBy"] == "test-admin"
    read = (await client.get(f"{SUBS}/{created['id']}")).json()
    assert read["secret"] is None
    assert read["hasSecret"] is True
    listed = (await client.get(SUBS)).json()["items"]
    assert [s["id"] for s in listed] == [created["id"]]

    r = await client.patch(
        f"{SUBS}/{created['id']}",
        json={"events": "silence.alert,deadletters.over_threshold", "tag": "billing",
              "threshold": 5, "enabled": False},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    changed = r.json()
    assert changed["events"] == ["deadletters.over_threshold", "silence.alert"]
    assert changed["scope"] == "tag"
    assert changed["threshold"] == 5
    assert changed["enabled"] is False
    assert changed["name"] == "on-call"

    r = await client.delete(f"{SUBS}/{created['id']}")
    assert r.status_code == 204
    assert_problem(await client.get(f"{SUBS}/{created['id']}"), 404)
    assert_problem(await client.delete(f"{SUBS}/{created['id']}"), 404)


async def test_an_email_subscription_scoped_to_a_job(client: httpx.AsyncClient) -> None:
    job_id = str(new_id())
    sub = await create(
        client, channel="email", url=None, recipients="ops@example.org, dev@example.org",
        jobId=job_id, events=["occurrence.timed_out"],
    )  # fmt: skip
    assert sub["recipients"] == ["ops@example.org", "dev@example.org"]
    assert sub["scope"] == "job"
    assert sub["jobId"] == job_id
    assert sub["secret"] is None
    assert sub["hasSecret"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (WEBHOOK | {"url": "ftp://files.example.org/x"}, "url"),
        (WEBHOOK | {"url": "http://127.0.0.1:8080/hook"}, "url"),  # loopback, not allowed
        (WEBHOOK | {"url": "http://169.254.169.254/latest"}, "url"),  # link-local metadata
        (WEBHOOK | {"url": "http://metadata.google.internal/x"}, "url"),  # its name
        (WEBHOOK | {"url": "http://[fd00:ec2::254]/x"}, "url"),  # AWS's, over IPv6
        (WEBHOOK | {"url": "http://2852039166/x"}, "url"),  # 169.254.169.254 as one number
        (WEBHOOK | {"url": "http://localhost:8080/hook"}, "url"),  # loopback by name
        (WEBHOOK | {"url": "https://user:pass@hooks.example.org/x"}, "url"),  # credentials
        (WEBHOOK | {"url": "file:///etc/passwd"}, "url"),
        (WEBHOOK | {"url": None}, "url"),
        (WEBHOOK | {"events": []}, "events"),
        (WEBHOOK | {"events": ["occurrence.exploded"]}, "events"),
        (WEBHOOK | {"secret": "short"}, "secret"),
        (WEBHOOK | {"channel": "email", "url": None}, "recipients"),
        (WEBHOOK | {"channel": "email", "recipients": ["not an address"]}, "recipients"),
        (WEBHOOK | {"jobId": str(new_id()), "tag": "x"}, "tag"),
        (WEBHOOK | {"threshold": -1}, "threshold"),
        (WEBHOOK | {"name": ""}, "name"),
        (WEBHOOK | {"surprise": 1}, "surprise"),
    ],
)
async def test_bad_input_is_a_problem_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    problem = assert_problem(await client.post(SUBS, json=body), 422)
    assert any(f is not None and re.split(r"[.\[]", f)[0] == field for f in fields(problem)), (
        problem["errors"]
    )
    assert (await client.get(SUBS)).json()["items"] == []


async def test_a_change_is_checked_like_a_creation(client: httpx.AsyncClient) -> None:
    sub = await create(client)
    path = f"{SUBS}/{sub['id']}"
    assert_problem(await client.patch(path, json={"url": "http://10.0.0.8/x"}), 422)
    for url in ("http://metadata.google.internal/", "https://u:p@hooks.example.org/"):
        assert fields(assert_problem(await client.patch(path, json={"url": url}), 422)) == ["url"]
    assert_problem(await client.patch(path, json={"name": None}), 422)
    assert_problem(await client.patch(path, json={"channel": "email"}), 422)  # no recipients
    assert_problem(await client.patch(f"{SUBS}/{new_id()}", json={"name": "x"}), 404)
    assert (await client.get(path)).json()["url"] == WEBHOOK["url"]


async def test_a_change_of_scope_to_a_job_is_applied(client: httpx.AsyncClient) -> None:
    """``jobId`` in a change was a 500 (the camelCase name reached the service)."""
    sub = await create(client)
    path = f"{SUBS}/{sub['id']}"
    job_id = str(new_id())
    r = await client.patch(path, json={"jobId": job_id})
    assert r.status_code == 200, r.text
    assert (r.json()["scope"], r.json()["jobId"]) == ("job", job_id)
    assert (await client.get(path)).json()["jobId"] == job_id
    # a job and a tag at once is refused naming the field; null widens the scope again
    problem = assert_problem(await client.patch(path, json={"tag": "billing"}), 422)
    assert fields(problem) == ["tag"]
    r = await client.patch(path, json={"jobId": None})
    assert r.status_code == 200, r.text
    assert (r.json()["scope"], r.json()["jobId"]) == ("global", None)


async def test_only_admins_manage_subscriptions(app: FastAPI, client: httpx.AsyncClient) -> None:
    sub = await create(client)
    for role in ("operator", "viewer"):
        async with api_client(app, role) as http:
            assert_problem(await http.get(SUBS), 403)
            assert_problem(await http.post(SUBS, json=WEBHOOK), 403)
            assert_problem(await http.get(f"{SUBS}/{sub['id']}/deliveries"), 403)
            assert_problem(await http.delete(f"{SUBS}/{sub['id']}"), 403)
    async with api_client(app, None) as http:
        assert_problem(await http.get(SUBS), 401)


async def test_changes_are_audited_without_the_secret(client: httpx.AsyncClient) -> None:
    sub = await create(client, secret="a-secret-of-enough-length")
    await client.patch(f"{SUBS}/{sub['id']}", json={"secret": "another-long-enough-secret"})
    await client.delete(f"{SUBS}/{sub['id']}")
    r = await client.get("/api/v1/audit", params={"resourceType": "notification"})
    entries = r.json()["items"]
    assert [e["action"] for e in entries] == [
        "notification.deleted",
        "notification.updated",
        "notification.created",
    ]
    assert all(e["resourceId"] == sub["id"] for e in entries)
    assert "secret" not in r.text.replace("hasSecret", "").replace("secretChanged", "")
    assert entries[1]["after"]["secretChanged"] is True


async def test_a_test_delivery_is_queued_and_listed(client: httpx.AsyncClient) -> None:
    sub = await create(client)
    r = await client.post(f"{SUBS}/{sub['id']}/test")
    assert r.status_code == 202, r.text
    queued = r.json()
    assert queued["state"] == "pending"
    log = (await client.get(f"{SUBS}/{sub['id']}/deliveries")).json()
    assert [d["id"] for d in log["deliveries"]] == [queued["id"]]
    assert log["attempts"] == []
    assert_problem(await client.get(f"{SUBS}/{new_id()}/deliveries"), 404)
    assert_problem(await client.post(f"{SUBS}/{new_id()}/test"), 404)
