"""Sessions end at once, in a real browser (issue 33): a user signed in to the dashboard is
sent to the sign-in page on the next page after an Admin resets its password or changes its
role; signing in again (with the new password) works."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from .conftest import Server, sign_in

ADA = ("ada", "ada's browser passphrase 1")


@pytest.mark.parametrize(
    ("change", "password_after"),
    [
        ({"password": "an admin's reset phrase 2"}, "an admin's reset phrase 2"),
        ({"role": "Operator"}, ADA[1]),
    ],
    ids=["password-reset", "role-change"],
)
def test_a_signed_in_dashboard_is_signed_out_by_the_change(
    page: Page, server: Server, change: dict[str, str], password_after: str
) -> None:
    with server.api() as api:
        created = api.post(
            "/users", json={"username": ADA[0], "password": ADA[1], "role": "Viewer"}
        )
        assert created.status_code == 201, created.text
        user_id = created.json()["id"]
    try:
        sign_in(page, server, ADA)
        page.goto(f"{server.url}/jobs")
        expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
        with server.api() as api:
            assert api.patch(f"/users/{user_id}", json=change).status_code == 200
        page.goto(f"{server.url}/jobs")
        # The page's token is refused; its refresh token was revoked too: sign in again.
        expect(page).to_have_url(re.compile(r"/login"))
        page.get_by_label("Username").fill(ADA[0])
        page.get_by_label("Password").fill(password_after)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_test_id("user")).to_contain_text(ADA[0])
    finally:
        with server.api() as api:
            api.delete(f"/users/{user_id}")
