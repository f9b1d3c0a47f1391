"""AuthService over a real SQLite store with a hand-moved clock: login, lockout, refresh
rotation and reuse, logout, password policy and changes, the admin bootstrap."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from rota.core.errors import (
    AccountLockedError,
    AuthenticationError,
    ConflictError,
    OverloadedError,
    RateLimitedError,
    ValidationError,
)
from rota.core.security import AuditQuery, Role, check_password
from rota.services.auth import BAD_CREDENTIALS, AuthConfig, AuthService
from rota.services.ratelimit import Rate
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


async def test_a_role_change_ends_the_sessions_and_the_next_login_carries_it(
    auth: AuthService, clock: Clock
) -> None:
    await auth.create_user("root", PASSWORD, Role.ADMIN)
    user = await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    await auth.update_user(user.id, role=Role.VIEWER)  # no change: the session goes on
    assert (await auth.authenticate(tokens.access_token)).role is Role.VIEWER
    await auth.update_user(user.id, role=Role.OPERATOR)
    with pytest.raises(AuthenticationError, match="sessions were ended"):
        await auth.authenticate(tokens.access_token)
    with pytest.raises(AuthenticationError):
        await auth.refresh(tokens.refresh_token)
    clock.now += timedelta(microseconds=1)
    again = await auth.login("ada", PASSWORD)
    assert (await auth.authenticate(again.access_token)).role is Role.OPERATOR


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
        ("ada", "zzzzzzzzzzzzzzzz", "mostly one character"),
        ("ada", " " * 11 + "a", "at least 12"),
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


# --- sign-in limits (issue 14) ---------------------------------------------------------------


class Ticks:
    """A hand-moved monotonic clock for the rate limits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limited(store: SqlStore, clock: Clock, ticks: Ticks, **limits: object) -> AuthService:
    hasher = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
    config = AuthConfig(secret=SECRET, max_failed_logins=3, **limits)  # type: ignore[arg-type]
    return AuthService(store, config, clock, hasher=hasher, monotonic=ticks)


@pytest.mark.parametrize("name", ["ada", "ghost"], ids=["user", "unknown-name"])
async def test_a_lockout_is_in_the_audit_log(
    auth: AuthService, store: SqlStore, clock: Clock, name: str
) -> None:
    user = await auth.create_user("ada", PASSWORD, Role.VIEWER)
    for _ in range(2):
        with pytest.raises(AuthenticationError):
            await auth.login(name, "wrong password, again", client="10.1.2.3")
    assert (await store.list_audit(AuditQuery(action="login.locked"))).items == []
    with pytest.raises(AuthenticationError):
        await auth.login(name, "wrong password, again", client="10.1.2.3")
    (entry,) = (await store.list_audit(AuditQuery(action="login.locked"))).items
    assert (entry.actor, entry.resource_type) == (name, "user")
    assert entry.resource_id == (str(user.id) if name == "ada" else None)
    assert entry.after["client"] == "10.1.2.3"
    assert entry.after["lockedUntil"] == (clock.now + timedelta(minutes=15)).isoformat()
    with pytest.raises(AccountLockedError):  # refused while locked: no new lockout entry
        await auth.login(name, PASSWORD, client="10.1.2.3")
    assert len((await store.list_audit(AuditQuery(action="login.locked"))).items) == 1


async def test_a_reused_refresh_token_is_in_the_audit_log(
    auth: AuthService, store: SqlStore
) -> None:
    user = await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    await auth.refresh(tokens.refresh_token, client="10.9.9.9")
    assert (await store.list_audit(AuditQuery(action="refresh.reused"))).items == []
    with pytest.raises(AuthenticationError, match="used before"):
        await auth.refresh(tokens.refresh_token, client="10.6.6.6")
    (entry,) = (await store.list_audit(AuditQuery(action="refresh.reused"))).items
    assert (entry.actor, entry.resource_id) == ("ada", str(user.id))
    assert entry.after == {"client": "10.6.6.6", "familyRevoked": True}


async def test_logins_are_rate_limited_per_client_and_in_all(store: SqlStore, clock: Clock) -> None:
    ticks = Ticks()
    auth = limited(
        store,
        clock,
        ticks,
        login_per_client=Rate(per_second=1 / 60, burst=2),
        login_overall=Rate(per_second=1, burst=3),
    )
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    await auth.login("ada", PASSWORD, client="10.0.0.1")
    await auth.login("ada", PASSWORD, client="10.0.0.1")
    with pytest.raises(RateLimitedError, match="from this address") as per_client:
        await auth.login("ada", PASSWORD, client="10.0.0.1")
    assert per_client.value.retry_after == 60
    await auth.login("ada", PASSWORD, client="10.0.0.2")  # another address: its own bucket
    with pytest.raises(RateLimitedError) as overall:  # but three in all is the global burst
        await auth.login("ada", PASSWORD, client="10.0.0.3")
    assert "from this address" not in overall.value.message
    assert overall.value.retry_after == 1
    ticks.now += 1
    await auth.login("ada", PASSWORD, client="10.0.0.3")
    ticks.now += 59
    await auth.login("ada", PASSWORD, client="10.0.0.1")


async def test_refreshes_are_rate_limited_per_client(store: SqlStore, clock: Clock) -> None:
    ticks = Ticks()
    auth = limited(store, clock, ticks, refresh_per_client=Rate(per_second=0.5, burst=1))
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    tokens = await auth.refresh(tokens.refresh_token, client="10.0.0.1")
    with pytest.raises(RateLimitedError) as refused:
        await auth.refresh(tokens.refresh_token, client="10.0.0.1")
    assert refused.value.retry_after == 2
    ticks.now += 2
    await auth.refresh(tokens.refresh_token, client="10.0.0.1")  # the refused one was not used


async def test_a_full_hashing_pool_refuses_before_anything_is_counted(
    store: SqlStore, clock: Clock
) -> None:
    auth = limited(store, clock, Ticks(), hash_threads=1, hash_queue=1)
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    with auth.hashing.ticket(), auth.hashing.ticket():  # one running, one waiting
        with pytest.raises(OverloadedError) as refused:
            await auth.login("ada", "wrong password, again")
        assert refused.value.retry_after == 1
    stored = await auth.find_user("ada")
    assert stored is not None
    assert stored.failed_logins == 0
    await auth.login("ada", PASSWORD)
    auth.close()


async def test_a_sign_in_abandoned_mid_check_releases_the_name(
    store: SqlStore, clock: Clock
) -> None:
    """A client that goes away while its password is checked must not leave the name
    held (another sign-in would be told to wait until the lease runs out)."""
    started, release = threading.Event(), threading.Event()

    class Blocking(PasswordHash):
        def verify_and_update(self, password: str | bytes, hash: str | bytes) -> Any:  # type: ignore[override]
            started.set()
            release.wait(10)
            return super().verify_and_update(password, hash)

    hasher = Blocking((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
    auth = AuthService(store, AuthConfig(secret=SECRET), clock, hasher=hasher)
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    pending = asyncio.create_task(auth.login("ada", "wrong password, again"))
    assert await asyncio.to_thread(started.wait, 10)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    release.set()
    await auth.login("ada", PASSWORD)  # not BUSY: the lease was ended
    auth.close()


async def test_a_token_of_the_same_second_as_a_change_ends_and_the_next_one_lives(
    auth: AuthService, clock: Clock
) -> None:
    """``iat`` has microseconds: a token issued 0.1 s before a password change (in the same
    second) is refused, one issued 0.1 s after it (the same second again) is accepted."""
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    clock.now = T0 + timedelta(milliseconds=100)
    before = await auth.login("ada", PASSWORD)
    principal = await auth.authenticate(before.access_token)
    clock.now = T0 + timedelta(milliseconds=200)
    await auth.change_password(principal, PASSWORD, "another passphrase 1")
    clock.now = T0 + timedelta(milliseconds=300)
    after = await auth.login("ada", "another passphrase 1")
    with pytest.raises(AuthenticationError, match="sessions were ended"):
        await auth.authenticate(before.access_token)
    assert (await auth.authenticate(after.access_token)).username == "ada"
    # The instant never moves back: an older change written later keeps the newer one.
    user = await auth.get_user(principal.user_id)
    assert user.tokens_valid_after == T0 + timedelta(milliseconds=200)
    again = await auth.store.update_user_ending_sessions(user, T0)
    assert again.tokens_valid_after == T0 + timedelta(milliseconds=200)


async def test_the_bootstrap_of_an_existing_user_ends_its_sessions(
    auth: AuthService, clock: Clock
) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    tokens = await auth.login("ada", PASSWORD)
    clock.now += timedelta(seconds=1)
    assert await auth.ensure_admin("ada", "the bootstrap passphrase") is not None
    with pytest.raises(AuthenticationError):
        await auth.authenticate(tokens.access_token)


async def test_previous_secrets_verify_but_never_sign(store: SqlStore, clock: Clock) -> None:
    hasher = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
    old = AuthService(store, AuthConfig(secret=b"o" * 32), clock, hasher=hasher)
    await old.create_user("ada", PASSWORD, Role.VIEWER)
    token = (await old.login("ada", PASSWORD)).access_token
    rotated = AuthService(
        store, AuthConfig(secret=SECRET, previous_secrets=(b"p" * 32, b"o" * 32)), clock
    )
    assert (await rotated.authenticate(token)).username == "ada"
    dropped = AuthService(store, AuthConfig(secret=SECRET, previous_secrets=(b"p" * 32,)), clock)
    with pytest.raises(AuthenticationError, match="Signature verification failed"):
        await dropped.authenticate(token)
    fresh = (await rotated.login("ada", PASSWORD)).access_token
    with pytest.raises(AuthenticationError):
        await old.authenticate(fresh)  # signed with the current secret only
    with pytest.raises(ValueError, match="previous secret"):
        AuthConfig(secret=SECRET, previous_secrets=(b"short",))
    for service in (old, rotated, dropped):
        service.close()
