"""Users CRUD (Admin) and the audit log over HTTP, on a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.api_client import PASSWORD, api_client, username_of
from tests.integration.test_api import assert_problem

USERS = "/api/v1/users"
NEW_PASSWORD = "the new user's passphrase"


@pytest.fixture
async def admin(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(app, "admin") as http:
        yield http


async def create_user(
    http: httpx.AsyncClient, username: str, role: str = "Viewer", password: str = NEW_PASSWORD
) -> dict[str, Any]:
    r = await http.post(USERS, json={"username": username, "password": password, "role": role})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def login(http: httpx.AsyncClient, username: str, password: str) -> httpx.Response:
    return await http.post("/api/v1/auth/login", json={"username": username, "password": password})


async def bearer(http: httpx.AsyncClient, username: str, password: str) -> dict[str, str]:
    r = await login(http, username, password)
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['accessToken']}"}


# --- users -------------------------------------------------------------------------------------


async def test_create_read_and_list_users(admin: httpx.AsyncClient) -> None:
    r = await admin.post(
        USERS, json={"username": "Grace", "password": NEW_PASSWORD, "role": "operator"}
    )
    assert r.status_code == 201, r.text
    user = r.json()
    assert r.headers["location"] == f"/api/v1/users/{user['id']}"
    assert set(user) == {
        "id",
        "username",
        "role",
        "isActive",
        "lockedUntil",
        "createdAt",
        "updatedAt",
    }
    assert (user["username"], user["role"], user["isActive"]) == ("grace", "Operator", True)
    assert (await admin.get(f"{USERS}/{user['id']}")).json() == user
    for i in range(3):
        await create_user(admin, f"user{i}")
    first = (await admin.get(USERS, params={"limit": 2})).json()
    assert [u["username"] for u in first["items"]] == ["test-admin", "grace"]
    rest = (await admin.get(USERS, params={"limit": 10, "cursor": first["nextCursor"]})).json()
    assert [u["username"] for u in rest["items"]] == ["user0", "user1", "user2"]
    assert rest["nextCursor"] is None
    assert_problem(await admin.get(f"{USERS}/{'0' * 32}"), 404)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "ada", "password": "short", "role": "Viewer"}, "password"),
        ({"username": "ada", "password": "password1234", "role": "Viewer"}, "password"),
        ({"username": "ada", "password": "P@ssw0rd2024!", "role": "Viewer"}, "password"),
        ({"username": "adalovelace", "password": "adalovelace!", "role": "Viewer"}, "password"),
        ({"username": "ada", "password": NEW_PASSWORD, "role": "Owner"}, "role"),
        ({"username": "", "password": NEW_PASSWORD}, "username"),
        ({"username": "a d a", "password": NEW_PASSWORD}, "username"),
        ({"username": "ada", "password": NEW_PASSWORD, "extra": 1}, "extra"),
    ],
)
async def test_bad_users_are_refused_naming_the_field(
    admin: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    problem = assert_problem(await admin.post(USERS, json=body), 422)
    assert field in [e["field"] for e in problem["errors"]]


async def test_a_password_reset_gets_the_policy(admin: httpx.AsyncClient) -> None:
    user = await create_user(admin, "ada")
    for weak in ("Summer2024!!!", "abcabcabcabc", "short"):
        r = await admin.patch(f"{USERS}/{user['id']}", json={"password": weak})
        problem = assert_problem(r, 422)
        assert [e["field"] for e in problem["errors"]] == ["password"], problem
    assert (await login(admin, "ada", NEW_PASSWORD)).status_code == 200


WEAK = [
    (" " * 11 + "a", "at least 12 characters, not counting the spaces"),  # the report
    ("   Kx8#mPq2vL9   ", "at least 12 characters, not counting the spaces"),  # 11 inside
    ("aaaaaaab12cd", "mostly one character repeated"),
    ("Changeme2024!", "one of the most common passwords"),
    ("qwertyuiop12", "one of the most common passwords"),
    ("abcabcabcabc", "repeats a short pattern"),
]


@pytest.mark.parametrize(("weak", "why"), WEAK)
async def test_every_route_that_sets_a_password_applies_the_policy(
    app: FastAPI, admin: httpx.AsyncClient, weak: str, why: str
) -> None:
    """Create (Admin), reset (Admin), an Admin's own password, and one's own password
    (PUT /auth/password): a 422 naming the field, saying why; nothing changed."""

    def refused(response: httpx.Response, field: str) -> None:
        problem = assert_problem(response, 422)
        assert [e["field"] for e in problem["errors"]] == [field], problem
        assert why in problem["errors"][0]["message"], problem

    create = {"username": "ada", "password": weak, "role": "Viewer"}
    refused(await admin.post(USERS, json=create), "password")
    user = await create_user(admin, "ada")
    refused(await admin.patch(f"{USERS}/{user['id']}", json={"password": weak}), "password")
    me = (await admin.get("/api/v1/auth/me")).json()
    own = {"password": weak, "currentPassword": PASSWORD}
    refused(await admin.patch(f"{USERS}/{me['id']}", json=own), "password")
    headers = await bearer(admin, "ada", NEW_PASSWORD)
    change = {"currentPassword": NEW_PASSWORD, "newPassword": weak}
    refused(await admin.put("/api/v1/auth/password", json=change, headers=headers), "newPassword")
    assert (await login(admin, "ada", NEW_PASSWORD)).status_code == 200
    assert (await login(admin, username_of("admin"), PASSWORD)).status_code == 200


async def test_a_strong_password_with_spaces_around_it_is_taken_as_typed(
    admin: httpx.AsyncClient,
) -> None:
    """The spaces around it do not count towards the length, but they are part of it."""
    typed = "  purple monkey dishwasher  "
    await create_user(admin, "ada", password=typed)
    assert (await login(admin, "ada", typed)).status_code == 200
    assert (await login(admin, "ada", typed.strip())).status_code == 401


async def test_a_taken_username_is_a_conflict_case_insensitively(
    admin: httpx.AsyncClient,
) -> None:
    await create_user(admin, "ada")
    r = await admin.post(USERS, json={"username": "ADA", "password": NEW_PASSWORD})
    assert_problem(r, 409)


async def test_role_change_deactivation_and_password_reset(
    app: FastAPI, admin: httpx.AsyncClient
) -> None:
    user = await create_user(admin, "ada")
    async with api_client(app, None) as anon:
        headers = await bearer(anon, "ada", NEW_PASSWORD)
        job = {"jobType": "report", "cronExpression": "0 0 1 1 *"}
        assert_problem(await anon.post("/api/v1/jobs", json=job, headers=headers), 403)
        r = await admin.patch(f"{USERS}/{user['id']}", json={"role": "Operator"})
        assert r.json()["role"] == "Operator"
        # A role change ends the user's sessions at once; the next sign-in carries the role.
        assert_problem(await anon.post("/api/v1/jobs", json=job, headers=headers), 401)
        headers = await bearer(anon, "ada", NEW_PASSWORD)
        created = await anon.post("/api/v1/jobs", json=job, headers=headers)
        assert created.status_code == 201, created.text
        r = await admin.patch(f"{USERS}/{user['id']}", json={"isActive": False})
        assert r.json()["isActive"] is False
        assert_problem(await anon.get("/api/v1/auth/me", headers=headers), 401)
        assert_problem(await login(anon, "ada", NEW_PASSWORD), 401)
        reset = {"isActive": True, "password": "a reset passphrase!"}
        assert (await admin.patch(f"{USERS}/{user['id']}", json=reset)).status_code == 200
        assert_problem(await login(anon, "ada", NEW_PASSWORD), 401)
        assert (await login(anon, "ada", "a reset passphrase!")).status_code == 200
    assert_problem(await admin.patch(f"{USERS}/{'0' * 32}", json={"role": "Viewer"}), 404)


async def test_the_last_active_admin_stays(admin: httpx.AsyncClient) -> None:
    me = (await admin.get("/api/v1/auth/me")).json()
    for change in ({"role": "Operator"}, {"isActive": False}):
        problem = assert_problem(await admin.patch(f"{USERS}/{me['id']}", json=change), 409)
        assert "last active Admin" in problem["detail"]
    assert_problem(await admin.delete(f"{USERS}/{me['id']}"), 409)
    other = await create_user(admin, "root", role="Admin")
    assert (await admin.delete(f"{USERS}/{other['id']}")).status_code == 204
    assert_problem(await admin.get(f"{USERS}/{other['id']}"), 404)
    assert_problem(await admin.delete(f"{USERS}/{other['id']}"), 404)


async def test_only_admins_manage_users(app: FastAPI) -> None:
    for role in ("viewer", "operator"):
        async with api_client(app, role) as http:
            assert_problem(await http.get(USERS), 403)
            r = await http.post(USERS, json={"username": "x", "password": NEW_PASSWORD})
            assert_problem(r, 403)
            assert_problem(await http.get("/api/v1/audit"), 403)


# --- audit -------------------------------------------------------------------------------------


async def audit(http: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    r = await http.get("/api/v1/audit", params=params)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def test_a_job_update_is_audited_with_before_and_after(app: FastAPI) -> None:
    async with api_client(app, "operator") as op:
        created = await op.post(
            "/api/v1/jobs",
            json={"jobType": "report", "displayName": "old", "cronExpression": "0 0 1 1 *"},
        )
        job = created.json()
        r = await op.put(
            "/api/v1/jobs/job",
            json={"id": job["id"], "displayName": {"value": "new", "isUpdated": True}},
        )
        assert r.status_code == 200, r.text
        await op.post(f"/api/v1/jobs/{job['id']}/trigger", json={"reason": "check"})
        assert (await op.delete(f"/api/v1/jobs/{job['id']}")).status_code == 204
    async with api_client(app, "admin") as admin:
        entries = await audit(admin, resourceType="job", resourceId=job["id"])
    actions = [e["action"] for e in entries]
    assert actions == ["job.deleted", "job.triggered", "job.updated", "job.created"]
    assert {e["actor"] for e in entries} == {username_of("operator")}
    update = entries[2]
    assert update["before"]["displayName"] == "old"
    assert update["after"]["displayName"] == "new"
    assert entries[3]["before"] is None
    assert entries[3]["after"]["id"] == job["id"]
    assert entries[0]["before"]["displayName"] == "new"
    assert entries[0]["after"] is None
    assert entries[1]["after"]["reason"] == "check"


async def test_logins_users_and_passwords_are_audited_without_secrets(
    app: FastAPI, admin: httpx.AsyncClient
) -> None:
    user = await create_user(admin, "ada")
    async with api_client(app, None) as anon:
        assert_problem(await login(anon, "ada", "the wrong passphrase"), 401)
        headers = await bearer(anon, "ada", NEW_PASSWORD)
        r = await anon.put(
            "/api/v1/auth/password",
            json={"currentPassword": NEW_PASSWORD, "newPassword": "ada's next passphrase"},
            headers=headers,
        )
        assert r.status_code == 204, r.text
    await admin.patch(f"{USERS}/{user['id']}", json={"password": "an admin reset phrase"})
    entries = await audit(admin)
    mine = [(e["actor"], e["action"]) for e in entries if e["resourceId"] in (user["id"], None)]
    assert mine[:5] == [
        (username_of("admin"), "user.password_reset"),
        ("ada", "password.changed"),
        ("ada", "login.succeeded"),
        ("ada", "login.failed"),
        (username_of("admin"), "user.created"),
    ]
    text = str(entries)
    for secret in (NEW_PASSWORD, "ada's next passphrase", "an admin reset phrase", "argon2"):
        assert secret not in text
    assert await audit(admin, actor="ada", action="login.failed")
    assert (await audit(admin, actor="nobody")) == []


async def test_audit_pages_and_time_filters(admin: httpx.AsyncClient) -> None:
    for i in range(5):
        await create_user(admin, f"user{i}")
    first = (await admin.get("/api/v1/audit", params={"limit": 2})).json()
    assert [e["after"]["username"] for e in first["items"]] == ["user4", "user3"]
    second = (
        await admin.get("/api/v1/audit", params={"limit": 2, "cursor": first["nextCursor"]})
    ).json()
    assert [e["after"]["username"] for e in second["items"]] == ["user2", "user1"]
    latest = datetime.fromisoformat(first["items"][0]["at"].replace("Z", "+00:00"))
    later = (latest + timedelta(seconds=1)).isoformat()
    assert await audit(admin, after=later) == []
    assert len(await audit(admin, before=later, action="user.created")) == 5
    assert_problem(await admin.get("/api/v1/audit", params={"cursor": "bad"}), 422)
    assert_problem(await admin.get("/api/v1/audit", params={"after": "yesterday"}), 422)


async def test_an_operator_signs_in_with_the_test_password(app: FastAPI) -> None:
    """The helper's users are real users: they can sign in with its password."""
    async with api_client(app, "operator") as op:
        assert (await op.get("/api/v1/auth/me")).status_code == 200
    async with api_client(app, None) as anon:
        assert (await login(anon, username_of("operator"), PASSWORD)).status_code == 200
