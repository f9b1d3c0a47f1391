"""Parallel guesses against one account, through the auth service, on SQLite and PostgreSQL:
the attempt is reserved in the store before its password is checked, so however many arrive at
once, at most ``max_failed_logins`` passwords are checked before the lock."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from rota.core.errors import AccountLockedError, AuthenticationError, RateLimitedError
from rota.core.security import Role
from rota.services.auth import AuthConfig, AuthService, Tokens
from rota.services.ratelimit import Rate
from rota.stores.sql import SqlStore
from tests.stores import store as store  # each store kind, over the conftest's SQLite one

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PASSWORD = "the one right passphrase"
LIMIT = 5
PLENTY = Rate(per_second=1000, burst=1000)


class CountingHasher(PasswordHash):
    """A cheap argon2id that records every password it checks (from the hashing threads)."""

    def __init__(self) -> None:
        super().__init__((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
        self.checked: list[str] = []
        self._lock = threading.Lock()

    def verify_and_update(
        self, password: str | bytes, hash: str | bytes
    ) -> tuple[bool, str | None]:  # type: ignore[override]
        with self._lock:
            self.checked.append(str(password))
        return super().verify_and_update(password, hash)

    def verify(self, password: str | bytes, hash: str | bytes) -> bool:  # type: ignore[override]
        with self._lock:
            self.checked.append(str(password))
        return super().verify(password, hash)


@pytest.fixture
def hasher() -> CountingHasher:
    return CountingHasher()


@pytest.fixture
def auth(store: SqlStore, hasher: CountingHasher) -> AuthService:
    # Rate limits and the hashing queue out of the way: the store's reservation is on trial.
    config = AuthConfig(
        secret=b"s" * 32,
        max_failed_logins=LIMIT,
        lockout=timedelta(minutes=15),
        login_per_client=PLENTY,
        login_overall=PLENTY,
        hash_threads=2,
        hash_queue=500,
    )
    return AuthService(store, config, lambda: T0, hasher=hasher)


async def attempt(auth: AuthService, name: str, password: str, n: int) -> object:
    try:
        return await auth.login(name, password, client=f"10.0.{n // 250}.{n % 250}")
    except (AuthenticationError, RateLimitedError) as refused:
        return refused


async def burst(
    auth: AuthService, name: str, size: int, right_at: int | None = None
) -> list[object]:
    """``size`` sign-ins of ``name`` at once, each from its own address; the right password
    at ``right_at``."""
    passwords = [PASSWORD if i == right_at else f"wrong guess number {i}" for i in range(size)]
    return list(await asyncio.gather(*(attempt(auth, name, p, i) for i, p in enumerate(passwords))))


@pytest.mark.parametrize("known", [True, False], ids=["user", "unknown-name"])
async def test_120_simultaneous_wrong_passwords_cost_at_most_the_limit(
    auth: AuthService, hasher: CountingHasher, known: bool
) -> None:
    if known:
        await auth.create_user("ada", PASSWORD, Role.VIEWER)
    rounds = 0
    while rounds < 3 * LIMIT:
        rounds += 1
        results = await burst(auth, "ada", 120)
        assert not [r for r in results if not isinstance(r, Exception)]
        if all(isinstance(r, AccountLockedError) for r in results):
            break
    assert len(hasher.checked) == LIMIT, "every check before the lock, and none after"
    locked = await attempt(auth, "ada", PASSWORD, 0)
    assert isinstance(locked, AccountLockedError)
    assert len(hasher.checked) == LIMIT


async def test_a_burst_of_40_with_the_right_password_at_31(
    auth: AuthService, hasher: CountingHasher, store: SqlStore
) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    hasher.checked.clear()
    results = await burst(auth, "ada", 40, right_at=31)
    assert len(hasher.checked) <= LIMIT
    signed_in = isinstance(results[31], Tokens)
    # It signs in only if its check was one of the few granted (before any lock).
    assert signed_in == (PASSWORD in hasher.checked)
    assert sum(isinstance(r, Tokens) for r in results) == int(signed_in)
    # Every lease was ended: the next sign-in is not told that a check is in flight.
    after = await attempt(auth, "ada", PASSWORD, 0)
    assert not isinstance(after, RateLimitedError)


async def test_once_locked_the_right_password_does_not_sign_in(
    auth: AuthService, hasher: CountingHasher
) -> None:
    await auth.create_user("ada", PASSWORD, Role.VIEWER)
    for _ in range(3 * LIMIT):
        results = await burst(auth, "ada", 40)
        if all(isinstance(r, AccountLockedError) for r in results):
            break
    results = await burst(auth, "ada", 40, right_at=31)
    assert isinstance(results[31], AccountLockedError)
    assert all(isinstance(r, AccountLockedError) for r in results)
    assert PASSWORD not in hasher.checked
    assert len(hasher.checked) == LIMIT
