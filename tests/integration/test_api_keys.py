"""API keys over HTTP (docs/security.md#api-keys): created by an Admin and shown once, used as
a bearer token or an X-API-Key header, acting with its role and name, audited, its last use
written at most once a minute, refused at once when revoked or expired, never a session; and
scoped keys that see and act only on their jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
from fastapi import FastAPI

from rota.core.apikeys import ApiKey, KeyScope, format_token, hash_secret, new_secret
from rota.core.ids import new_id
from rota.core.security import Role
from tests.api_client import api_key, api_key_client

PROBLEM = "application/problem+json"


def job(job_type: str = "billing.sync", tags: list[str] | None = None) -> dict[str, Any]:
    return {
        "jobType": job_type,
        "displayName": f"a {job_type} job",
        "cronExpression": "0 8 1 * *",
        "tags": tags or [],
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def audit_actions(client: httpx.AsyncClient, **query: str) -> list[dict[str, Any]]:
    answer = await client.get("/api/v1/audit", params=query)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


async def test_a_key_is_shown_once_works_and_is_audited_by_name(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    created = await client.post(
        "/api/v1/api-keys", json={"name": "billing-svc", "role": "operator"}
    )
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    body = created.json()
    token = body["key"]
    assert token.startswith(body["prefix"])
    assert body["prefix"] == f"rota_{body['id'].replace('-', '')}_"
    assert body["role"] == "Operator"
    assert body["lastUsedAt"] is None
    # never shown again
    read = await client.get(f"/api/v1/api-keys/{body['id']}")
    assert read.status_code == 200
    assert "key" not in read.json()
    listed = (await client.get("/api/v1/api-keys")).json()["items"]
    assert [k["name"] for k in listed] == ["billing-svc"]
    assert "key" not in listed[0]
    # stored hashed: the secret is nowhere in the store
    stored = await app.state.runtime.store.get_api_key(UUID(body["id"]))
    assert stored.secret_hash == hash_secret(token[len(body["prefix"]) :])
    assert token not in repr(stored)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rota") as http:
        made = await http.post("/api/v1/jobs", json=job(), headers=bearer(token))
        assert made.status_code == 201, made.text
        assert made.json()["createdBy"] == "key:billing-svc"
        read = await http.get("/api/v1/jobs", headers={"X-API-Key": token})
        assert read.status_code == 200
        assert len(read.json()["items"]) == 1
        # an Operator key is an Operator: no Admin route
        assert (await http.get("/api/v1/users", headers=bearer(token))).status_code == 403

    entries = await audit_actions(client, actor="key:billing-svc")
    assert [e["action"] for e in entries] == ["job.created"]
    created_entry = (await audit_actions(client, action="apikey.created"))[0]
    assert created_entry["actor"] == "test-admin"
    assert created_entry["after"]["name"] == "billing-svc"
    assert token not in str(created_entry)
    assert stored.secret_hash not in str(created_entry)
    used = (await client.get(f"/api/v1/api-keys/{body['id']}")).json()
    assert used["lastUsedAt"] is not None


async def test_a_revoked_key_is_refused_at_once(app: FastAPI, client: httpx.AsyncClient) -> None:
    created = (await client.post("/api/v1/api-keys", json={"name": "old", "role": "viewer"})).json()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rota") as http:
        assert (await http.get("/api/v1/jobs", headers=bearer(created["key"]))).status_code == 200
        revoked = await client.delete(f"/api/v1/api-keys/{created['id']}")
        assert revoked.status_code == 200
        assert revoked.json()["revokedBy"] == "test-admin"
        refused = await http.get("/api/v1/jobs", headers=bearer(created["key"]))
        assert refused.status_code == 401
        assert "revoked" in refused.json()["detail"]
        assert refused.headers["www-authenticate"].startswith("Bearer")
    # the name is free again; the revoked key stays listed
    again = await client.post("/api/v1/api-keys", json={"name": "old", "role": "viewer"})
    assert again.status_code == 201
    assert len((await client.get("/api/v1/api-keys")).json()["items"]) == 2
    entry = (await audit_actions(client, action="apikey.revoked"))[0]
    assert (entry["actor"], entry["resourceId"]) == ("test-admin", created["id"])


async def test_expired_wrong_and_malformed_keys_are_401(app: FastAPI) -> None:
    store = app.state.runtime.store
    secret = new_secret()
    past = datetime.now(UTC) - timedelta(minutes=1)
    expired = ApiKey(
        id=new_id(),
        name="expired",
        role=Role.ADMIN,
        secret_hash=hash_secret(secret),
        created_at=past - timedelta(days=1),
        created_by="test-admin",
        expires_at=past,
    )
    await store.create_api_key(expired)
    good = await api_key(app, Role.VIEWER)
    wrong = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rota") as http:
        for token in (format_token(expired.id, secret), wrong, "rota_nothex_x", "rota_"):
            answer = await http.get("/api/v1/jobs", headers=bearer(token))
            assert answer.status_code == 401, (token, answer.text)
            assert answer.headers["content-type"].startswith(PROBLEM)
        answer = await http.get("/api/v1/jobs", headers={"X-API-Key": wrong})
        assert answer.status_code == 401


async def test_the_last_use_is_written_at_most_once_a_minute(app: FastAPI) -> None:
    token = await api_key(app, Role.VIEWER, name="poller")
    store = app.state.runtime.store
    key_id = UUID(hex=token.split("_")[1])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://rota", headers=bearer(token)
    ) as http:
        assert (await http.get("/api/v1/jobs")).status_code == 200
        first = (await store.get_api_key(key_id)).last_used_at
        assert first is not None
        for _ in range(3):
            assert (await http.get("/api/v1/jobs")).status_code == 200
        assert (await store.get_api_key(key_id)).last_used_at == first


async def test_a_key_is_no_session_and_only_an_unscoped_admin_key_manages_keys(
    app: FastAPI,
) -> None:
    async with api_key_client(app, Role.ADMIN) as admin_key:
        for path in ("/api/v1/auth/me",):
            assert (await admin_key.get(path)).status_code == 403
        assert (await admin_key.put("/api/v1/auth/password", json={})).status_code == 403
        made = await admin_key.post("/api/v1/api-keys", json={"name": "child", "role": "viewer"})
        assert made.status_code == 201, made.text
        assert made.json()["createdBy"].startswith("key:")
    async with api_key_client(app, Role.ADMIN, tags=("billing",)) as scoped_admin:
        refused = await scoped_admin.post("/api/v1/api-keys", json={"name": "x", "role": "admin"})
        assert refused.status_code == 403
        assert (await scoped_admin.get("/api/v1/api-keys")).status_code == 403
        assert (await scoped_admin.get("/api/v1/users")).status_code == 403
    async with api_key_client(app, Role.OPERATOR) as operator_key:
        assert (await operator_key.get("/api/v1/api-keys")).status_code == 403
    # the dashboard does not take a key as a sign-in
    async with api_key_client(app, Role.ADMIN) as admin_key:
        page = await admin_key.get("/", follow_redirects=False)
        assert page.status_code in (302, 303, 307, 401), page.status_code


async def test_bad_key_input_is_422_naming_the_field(client: httpx.AsyncClient) -> None:
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    cases = [
        ({"name": "no spaces here", "role": "viewer"}, "name"),
        ({"name": "k1", "role": "root"}, "role"),
        ({"name": "k2", "role": "viewer", "expiresAt": past}, "expiresAt"),
        ({"name": "k3", "role": "viewer", "jobTypes": [" "]}, "jobTypes[0]"),
        ({"name": "k4"}, "role"),
    ]
    for body, field in cases:
        answer = await client.post("/api/v1/api-keys", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert field in [e["field"] for e in answer.json()["errors"]], answer.text
    await client.post("/api/v1/api-keys", json={"name": "dup", "role": "viewer"})
    taken = await client.post("/api/v1/api-keys", json={"name": "dup", "role": "admin"})
    assert taken.status_code == 409
    assert (await client.delete(f"/api/v1/api-keys/{new_id()}")).status_code == 404


async def test_a_scoped_key_sees_and_acts_only_on_its_jobs(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    inside = (await client.post("/api/v1/jobs", json=job("billing.sync", ["billing"]))).json()
    other_type = (await client.post("/api/v1/jobs", json=job("etl.load", ["billing"]))).json()
    other_tag = (await client.post("/api/v1/jobs", json=job("billing.sync", ["ops"]))).json()
    assert KeyScope(job_types=("billing.sync",), tags=("billing",)).allows(
        "billing.sync", ["billing"]
    )
    async with api_key_client(
        app, Role.OPERATOR, job_types=("billing.sync",), tags=("billing",)
    ) as scoped:
        listed = (await scoped.get("/api/v1/jobs")).json()["items"]
        assert [j["id"] for j in listed] == [inside["id"]]
        outside = await scoped.get("/api/v1/jobs", params={"jobType": "etl.load"})
        assert outside.status_code == 403
        assert outside.json()["errors"][0]["field"] == "jobType"
        for hidden in (other_type, other_tag):
            assert (await scoped.get(f"/api/v1/jobs/{hidden['id']}")).status_code == 404
            trigger = await scoped.post(f"/api/v1/jobs/{hidden['id']}/trigger", json={})
            assert trigger.status_code == 404
            assert (await scoped.delete(f"/api/v1/jobs/{hidden['id']}")).status_code == 404
        assert (await scoped.get(f"/api/v1/jobs/{inside['id']}")).status_code == 200

        wrong_type = await scoped.post("/api/v1/jobs", json=job("etl.load", ["billing"]))
        assert wrong_type.status_code == 403
        assert wrong_type.json()["errors"][0]["field"] == "jobType"
        wrong_tags = await scoped.post("/api/v1/jobs", json=job("billing.sync", ["ops"]))
        assert wrong_tags.status_code == 403
        assert wrong_tags.json()["errors"][0]["field"] == "tags"
        bulk = await scoped.post(
            "/api/v1/jobs/bulk",
            json={"jobs": [job("billing.sync", ["billing"]), job("etl.load", ["billing"])]},
        )
        assert bulk.status_code == 403
        assert bulk.json()["errors"][0]["field"] == "jobs[1].jobType"
        made = await scoped.post("/api/v1/jobs", json=job("billing.sync", ["billing", "x"]))
        assert made.status_code == 201, made.text
        moved = await scoped.patch(f"/api/v1/jobs/{inside['id']}", json={"tags": ["ops"]})
        assert moved.status_code == 403
        assert moved.json()["errors"][0]["field"] == "tags"
        renamed = await scoped.patch(f"/api/v1/jobs/{inside['id']}", json={"displayName": "n"})
        assert renamed.status_code == 200, renamed.text
        # nothing outside the jobs and occurrences routes
        for path in ("/api/v1/occurrences", "/api/v1/failed-occurrences", "/api/v1/tags"):
            assert (await scoped.get(path)).status_code == 403, path
    # nothing was changed outside the scope
    for hidden in (other_type, other_tag):
        assert (await client.get(f"/api/v1/jobs/{hidden['id']}")).status_code == 200
