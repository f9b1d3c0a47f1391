"""AuthService over a real SQLite store with a hand-moved clock: login, lockout, refresh
rotation and reuse, logout, password policy and changes, the admin bootstrap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from rota.core.errors import (
    AccountLockedError,
    AuthenticationError,
    ConflictError,
    ValidationError,
)
from rota.core.security import Role, check_password
from rota.services.auth import BAD_CREDENTIALS, AuthConfig, AuthService
from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PASSWORD = "a long enough passphrase"
SECRET = b"s" * 32


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlStore]:
    url = f"sqlite:///{tmp_path / 'rota.db'}"
    await upgrade(url)
    instance = SqlStore(url)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(store: SqlStore, clock: Clock) -> AuthService:
    # A cheap argon2id for speed; production uses the library's defaults.
    hasher = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
    config = AuthConfig(secret=SECRET, max_failed_logins=3, lockout=timedelta(minutes=15))
    return AuthService(store, config, clock, hasher=hasher)


async def test_login_gives_tokens_that_authenticate_the_user(auth: AuthService) -> None:
    user = await auth.create_user("Ada", PASSWORD, Role.OPERATOR)
    assert user.username == "ada"  # names are case-insensitive
    assert user.password_hash.startswith("$argon2id$")
    tokens = await auth.login("ADA", PASSWORD)
    assert tokens.expires_in == 15 * 60
    # The clock is in 2030; PyJWT checks exp against the real time, so a 2030 token is valid.
    principal = await auth.authenticate(tokens.access_token)
    assert (principal.user_id, principal.username, principal.role) == (
        user.id,
        "ada",
        Role.OPERATOR,
    )


async def test_a_wrong_password_and_an_unknown_name_fail_alike(auth: AuthService) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    with pytest.raises(AuthenticationError) as wrong:
        await auth.login("ada", "not the password at all")
    with pytest.raises(AuthenticationError) as unknown:
        await auth.login("nobody", PASSWORD)
    assert wrong.value.message == unknown.value.message == BAD_CREDENTIALS
    assert type(wrong.value) is type(unknown.value) is AuthenticationError


async def test_lockout_after_the_limit_until_it_expires(auth: AuthService, clock: Clock) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    for _ in range(3):
        with pytest.raises(AuthenticationError):
            await auth.login("ada", "wrong password, again")
    with pytest.raises(AccountLockedError) as locked:
        await auth.login("ada", PASSWORD)  # even the right password
    assert locked.value.retry_after == 15 * 60
    clock.now += timedelta(minutes=14)
    with pytest.raises(AccountLockedError) as still:
        await auth.login("ada", PASSWORD)
    assert still.value.retry_after == 60
    clock.now += timedelta(minutes=1)
    await auth.login("ada", PASSWORD)
    assert (await auth.find_user("ada")).failed_logins == 0  # type: ignore[union-attr]


async def test_a_success_resets_the_failure_count(auth: AuthService) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    for _ in range(2):
        with pytest.raises(AuthenticationError):
            await auth.login("ada", "wrong password, again")
    await auth.login("ada", PASSWORD)
    for _ in range(2):
        with pytest.raises(AuthenticationError):
            await auth.login("ada", "wrong password, again")
    await auth.login("ada", PASSWORD)


async def test_unknown_names_lock_like_users(auth: AuthService, clock: Clock) -> None:
    for _ in range(3):
        with pytest.raises(AuthenticationError):
            await auth.login("ghost", PASSWORD)
    with pytest.raises(AccountLockedError):
        await auth.login("ghost", PASSWORD)
    clock.now += timedelta(minutes=15)
    with pytest.raises(AuthenticationError) as again:
        await auth.login("ghost", PASSWORD)
    assert not isinstance(again.value, AccountLockedError)


async def test_an_inactive_user_cannot_sign_in_or_use_its_tokens(auth: AuthService) -> None:
    await auth.create_user("root", PASSWORD, Role.ADMIN)
    user = await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    await auth.update_user(user.id, is_active=False)
    with pytest.raises(AuthenticationError, match="not active"):
        await auth.authenticate(tokens.access_token)
    with pytest.raises(AuthenticationError):
        await auth.refresh(tokens.refresh_token)
    with pytest.raises(AuthenticationError) as login:
        await auth.login("ada", PASSWORD)
    assert login.value.message == BAD_CREDENTIALS


async def test_refresh_rotates_and_a_reused_token_revokes_the_family(
    auth: AuthService,
) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    first = await auth.login("ada", PASSWORD)
    other_login = await auth.login("ada", PASSWORD)
    second = await auth.refresh(first.refresh_token)
    assert second.refresh_token != first.refresh_token
    third = await auth.refresh(second.refresh_token)
    with pytest.raises(AuthenticationError, match="used before"):
        await auth.refresh(first.refresh_token)  # stolen and replayed
    with pytest.raises(AuthenticationError):
        await auth.refresh(third.refresh_token)  # the family is revoked
    await auth.refresh(other_login.refresh_token)  # another login is untouched


async def test_refresh_tokens_expire(auth: AuthService, clock: Clock) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    clock.now += auth.config.refresh_ttl
    with pytest.raises(AuthenticationError, match="invalid or expired"):
        await auth.refresh(tokens.refresh_token)


async def test_refresh_carries_the_current_role(auth: AuthService) -> None:
    await auth.create_user("root", PASSWORD, Role.ADMIN)
    user = await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    await auth.update_user(user.id, role=Role.OPERATOR)
    refreshed = await auth.refresh(tokens.refresh_token)
    assert (await auth.authenticate(refreshed.access_token)).role is Role.OPERATOR


async def test_logout_revokes_the_login(auth: AuthService) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    rotated = await auth.refresh(tokens.refresh_token)
    assert await auth.logout(rotated.refresh_token)
    with pytest.raises(AuthenticationError):
        await auth.refresh(rotated.refresh_token)
    assert not await auth.logout("not a token")


@pytest.mark.parametrize(
    ("username", "password", "why"),
    [
        ("ada", "short", "at least 12"),
        ("adalovelace", "adalovelace1", "username"),
        ("ada", "password1234", "most common passwords"),
        ("ada", "zzzzzzzzzzzzzzzz", "short pattern"),
        ("ada", "x" * 1025, "at most"),
    ],
)
def test_the_password_policy_refuses(username: str, password: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why) as refused:
        check_password(username, password)
    assert refused.value.field == "password"


def test_the_password_policy_accepts_a_passphrase() -> None:
    check_password("ada", "correct horse battery staple")


async def test_users_get_the_policy_and_unique_names(auth: AuthService) -> None:
    with pytest.raises(ValidationError, match="at least 12"):
        await auth.create_user("ada", "short", Role.VIEWER)
    with pytest.raises(ValidationError) as bad_name:
        await auth.create_user("-ada", PASSWORD, Role.VIEWER)
    assert bad_name.value.field == "username"
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    with pytest.raises(ConflictError):
        await auth.create_user("ADA", PASSWORD, Role.VIEWER)


async def test_change_password_checks_the_current_one_and_ends_other_logins(
    auth: AuthService,
) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    principal = await auth.authenticate(tokens.access_token)
    with pytest.raises(ValidationError) as wrong:
        await auth.change_password(principal, "not the current one", "another passphrase 1")
    assert wrong.value.field == "currentPassword"
    with pytest.raises(ValidationError) as weak:
        await auth.change_password(principal, PASSWORD, "short")
    assert weak.value.field == "newPassword"
    await auth.change_password(principal, PASSWORD, "another passphrase 1")
    with pytest.raises(AuthenticationError):
        await auth.refresh(tokens.refresh_token)
    with pytest.raises(AuthenticationError):
        await auth.login("ada", PASSWORD)
    await auth.login("ada", "another passphrase 1")


async def test_a_password_reset_unlocks(auth: AuthService) -> None:
    await auth.create_user("root", PASSWORD, Role.ADMIN)
    user = await auth.create_user("ada", PASSWORD, Role.VIEWER)
    for _ in range(3):
        with pytest.raises(AuthenticationError):
            await auth.login("ada", "wrong password, again")
    with pytest.raises(AccountLockedError):
        await auth.login("ada", PASSWORD)
    await auth.update_user(user.id, password="a brand new passphrase")
    await auth.login("ada", "a brand new passphrase")


async def test_admin_bootstrap_only_when_there_is_no_admin(auth: AuthService) -> None:
    viewer = await auth.create_user("ops", PASSWORD, Role.VIEWER)
    assert not await auth.has_admin()
    promoted = await auth.ensure_admin("OPS", "the bootstrap passphrase")
    assert promoted is not None
    assert (promoted.id, promoted.role) == (viewer.id, Role.ADMIN)
    await auth.login("ops", "the bootstrap passphrase")
    assert await auth.ensure_admin("other", "the bootstrap passphrase") is None
    assert await auth.find_user("other") is None


async def test_the_last_admin_stays(auth: AuthService) -> None:
    root = await auth.create_user("root", PASSWORD, Role.ADMIN)
    with pytest.raises(ConflictError):
        await auth.update_user(root.id, role=Role.VIEWER)
    with pytest.raises(ConflictError):
        await auth.delete_user(root.id)


def test_the_config_refuses_short_secrets_and_long_lived_tokens() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        AuthConfig(secret=b"short")
    with pytest.raises(ValueError, match="15 minutes"):
        AuthConfig(secret=SECRET, access_ttl=timedelta(minutes=16))


async def test_two_servers_bootstrapping_at_once_make_one_admin(auth: AuthService) -> None:
    results = await asyncio.gather(
        auth.ensure_admin("root", "the bootstrap passphrase"),
        auth.ensure_admin("root", "the bootstrap passphrase"),
    )
    assert sum(r is not None for r in results) == 1
    assert await auth.has_admin()
