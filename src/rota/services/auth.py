"""Authentication and users: argon2id passwords, JWT access tokens, rotated refresh tokens,
login lockout, the password policy, and the user administration rules.

- Access tokens are JWTs signed with HS256 (pinned: a token naming any other algorithm,
  ``none`` included, is refused), living at most 15 minutes, with ``iss``, ``aud``, ``exp``,
  ``nbf``, ``iat``, ``sub`` (the user id), ``name``, ``role`` and ``jti``. Each request loads
  the user again, so a deactivated or deleted user, or a changed role, counts at once.
- Refresh tokens are opaque (32 random bytes); the store keeps only their SHA-256. Every
  refresh uses the token up and issues a new one in the same family (one login); presenting
  a used token again revokes the whole family (it was stolen, or the client is confused).
- ``max_failed_logins`` failures in a row lock an account for ``lockout``. Names that are not
  users are throttled the same way in memory, so the answers never tell whether a user exists.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

import jwt
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from rota.core.errors import (
    AccountLockedError,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from rota.core.ids import new_id
from rota.core.ports import Page, Store
from rota.core.security import (
    USERNAME_PATTERN,
    Principal,
    RefreshStatus,
    RefreshToken,
    Role,
    User,
    check_password,
)

log = logging.getLogger(__name__)

ALGORITHM: Final = "HS256"
MIN_SECRET_BYTES: Final = 32
MAX_ACCESS_TTL: Final = timedelta(minutes=15)
BAD_CREDENTIALS: Final = "invalid username or password"
CLOCK_SKEW_SECONDS: Final = 10.0
"""Leeway for the clocks of servers that share a secret."""
_UNKNOWN_NAMES_KEPT: Final = 10_000
_CLAIMS: Final = ["exp", "iat", "nbf", "iss", "aud", "sub", "jti"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    secret: bytes
    access_ttl: timedelta = MAX_ACCESS_TTL
    refresh_ttl: timedelta = timedelta(days=14)
    max_failed_logins: int = 5
    lockout: timedelta = timedelta(minutes=15)
    issuer: str = "rota"
    audience: str = "rota-api"

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the token secret must have at least {MIN_SECRET_BYTES} bytes")
        if not timedelta(0) < self.access_ttl <= MAX_ACCESS_TTL:
            raise ValueError("access tokens live more than 0 and at most 15 minutes")


@dataclass(frozen=True, slots=True)
class Tokens:
    access_token: str
    refresh_token: str
    expires_in: int
    """Seconds the access token lives."""
    user: User


def hash_refresh_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def normalize_username(username: str) -> str:
    """Names are case-insensitive: stored and compared lowercased."""
    name = username.strip().lower()
    if not re.fullmatch(USERNAME_PATTERN, name):
        raise ValidationError(
            "a username has 1-100 characters: letters, digits and _ . @ - (not first)",
            field="username",
        )
    return name


class _NameThrottle:
    """Failed logins of names that are not users, in memory (bounded), locked like users."""

    def __init__(self) -> None:
        self._failures: OrderedDict[str, tuple[int, datetime | None]] = OrderedDict()

    def locked_until(self, name: str, now: datetime) -> datetime | None:
        _count, until = self._failures.get(name, (0, None))
        return until if until is not None and until > now else None

    def fail(self, name: str, max_failures: int, lock_until: datetime) -> None:
        count, _until = self._failures.pop(name, (0, None))
        count += 1
        self._failures[name] = (0, lock_until) if count >= max_failures else (count, None)
        while len(self._failures) > _UNKNOWN_NAMES_KEPT:
            self._failures.popitem(last=False)


class AuthService:
    """Sign-in, tokens and users over the store."""

    def __init__(
        self,
        store: Store,
        config: AuthConfig,
        clock: Callable[[], datetime],
        *,
        hasher: PasswordHash | None = None,
    ) -> None:
        self._store = store
        self.store = store
        self.config = config
        self._clock = clock
        self._hasher = hasher or PasswordHash((Argon2Hasher(),))
        self._dummy_hash: str | None = None
        self._names = _NameThrottle()

    def now(self) -> datetime:
        return self._clock()

    # --- passwords ----------------------------------------------------------------------------

    async def hash_password(self, password: str) -> str:
        return await asyncio.to_thread(self._hasher.hash, password)

    async def _verify(self, password: str, password_hash: str) -> tuple[bool, str | None]:
        return await asyncio.to_thread(self._hasher.verify_and_update, password, password_hash)

    async def _burn_time(self, password: str) -> None:
        """Verify against a throw-away hash: an unknown name costs as long as a known one."""
        if self._dummy_hash is None:
            self._dummy_hash = await self.hash_password(secrets.token_urlsafe(16))
        await self._verify(password, self._dummy_hash)

    # --- sign-in ------------------------------------------------------------------------------

    async def login(self, username: str, password: str) -> Tokens:
        """Tokens for a user whose password matches. ``AuthenticationError`` (the same for an
        unknown name, a wrong password and an inactive user) or ``AccountLockedError``."""
        now = self._clock()
        name = username.strip().lower()
        user = await self._store.find_user(name) if name else None
        if user is None:
            self._raise_if_locked(self._names.locked_until(name, now), now)
            await self._burn_time(password)
            self._names.fail(name, self.config.max_failed_logins, now + self.config.lockout)
            raise AuthenticationError(BAD_CREDENTIALS)
        self._raise_if_locked(user.locked_until, now)
        ok, new_hash = await self._verify(password, user.password_hash)
        if not ok or not user.is_active:
            await self._store.record_login_failure(
                user.id,
                max_failures=self.config.max_failed_logins,
                lock_until=now + self.config.lockout,
            )
            raise AuthenticationError(BAD_CREDENTIALS)
        if new_hash is not None:
            user = await self._store.update_user(replace(user, password_hash=new_hash))
        if user.failed_logins or user.locked_until:
            await self._store.record_login_success(user.id)
        return await self._issue(user, now, family_id=new_id())

    def _raise_if_locked(self, until: datetime | None, now: datetime) -> None:
        if until is not None and until > now:
            seconds = max(1, math.ceil((until - now).total_seconds()))
            raise AccountLockedError(
                f"too many failed logins: try again in {seconds} seconds", retry_after=seconds
            )

    async def refresh(self, refresh_token: str) -> Tokens:
        """New tokens for a live refresh token, which is used up. A used one revokes its
        family; an unknown, expired or revoked one, or one of a user no longer active, is
        ``AuthenticationError``."""
        now = self._clock()
        token, successor = self._new_refresh(now, UUID(int=0), UUID(int=0))
        outcome = await self._store.rotate_refresh_token(
            hash_refresh_token(refresh_token), successor, now
        )
        if outcome.status is RefreshStatus.REUSED:
            log.warning(
                "a used refresh token was presented again: its family is revoked",
                extra={"action": "refresh_reuse", "user_id": str(outcome.user_id)},
            )
            raise AuthenticationError("the refresh token was used before: sign in again")
        if outcome.status is RefreshStatus.INVALID or outcome.user_id is None:
            raise AuthenticationError("the refresh token is invalid or expired")
        user = await self._active_user(outcome.user_id)
        if user is None:
            await self._store.revoke_refresh_tokens(now, user_id=outcome.user_id)
            raise AuthenticationError("the refresh token is invalid or expired")
        return Tokens(
            access_token=self._access_token(user, now),
            refresh_token=token,
            expires_in=int(self.config.access_ttl.total_seconds()),
            user=user,
        )

    async def logout(self, refresh_token: str) -> bool:
        """Revoke the family (the login) of the refresh token. Whoever holds a refresh token
        could refresh with it, so holding it is enough to end its login. Returns whether any
        token was revoked."""
        now = self._clock()
        revoked = await self._store.revoke_refresh_tokens(
            now, token_hash=hash_refresh_token(refresh_token)
        )
        return revoked > 0

    async def _issue(self, user: User, now: datetime, *, family_id: UUID) -> Tokens:
        token, record = self._new_refresh(now, family_id, user.id)
        await self._store.add_refresh_token(record)
        return Tokens(
            access_token=self._access_token(user, now),
            refresh_token=token,
            expires_in=int(self.config.access_ttl.total_seconds()),
            user=user,
        )

    def _new_refresh(
        self, now: datetime, family_id: UUID, user_id: UUID
    ) -> tuple[str, RefreshToken]:
        token = secrets.token_urlsafe(32)
        record = RefreshToken(
            token_hash=hash_refresh_token(token),
            family_id=family_id,
            user_id=user_id,
            issued_at=now,
            expires_at=now + self.config.refresh_ttl,
        )
        return token, record

    # --- access tokens ------------------------------------------------------------------------

    def _access_token(self, user: User, now: datetime) -> str:
        return self.encode_access_token(
            {
                "sub": str(user.id),
                "name": user.username,
                "role": user.role.value,
                "iat": now,
                "nbf": now,
                "exp": now + self.config.access_ttl,
            }
        )

    def encode_access_token(self, claims: dict[str, Any]) -> str:
        """Sign ``claims`` (``iss``, ``aud`` and a fresh ``jti`` added unless given)."""
        payload = {
            "iss": self.config.issuer,
            "aud": self.config.audience,
            "jti": new_id().hex,
            **claims,
        }
        return jwt.encode(payload, self.config.secret, algorithm=ALGORITHM)

    def access_token_for(self, user: User) -> str:
        """An access token for ``user`` issued now (for sign-in helpers and tests)."""
        return self._access_token(user, self._clock())

    async def authenticate(self, access_token: str) -> Principal:
        """The active user an access token was issued to, with the role stored now.
        ``AuthenticationError`` for anything else: a bad signature, another algorithm,
        expired or not yet valid, a wrong issuer or audience, a missing claim, or a user that
        is gone or inactive."""
        try:
            claims = jwt.decode(
                access_token,
                self.config.secret,
                algorithms=[ALGORITHM],
                audience=self.config.audience,
                issuer=self.config.issuer,
                options={
                    "require": _CLAIMS,
                    # Times are checked below against this service's clock.
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
            self._check_times(claims)
            user_id = UUID(str(claims["sub"]))
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise AuthenticationError(f"invalid access token: {exc}") from None
        user = await self._active_user(user_id)
        if user is None:
            raise AuthenticationError("invalid access token: the user is not active")
        return Principal(user.id, user.username, user.role, str(claims["jti"]))

    def _check_times(self, claims: dict[str, Any]) -> None:
        now = self._clock().timestamp()
        exp, nbf, iat = (float(claims[name]) for name in ("exp", "nbf", "iat"))
        if now >= exp + CLOCK_SKEW_SECONDS:
            raise ValueError("the token has expired")
        if now + CLOCK_SKEW_SECONDS < nbf or now + CLOCK_SKEW_SECONDS < iat:
            raise ValueError("the token is not yet valid")
        if exp - iat > MAX_ACCESS_TTL.total_seconds():
            raise ValueError("the token lives longer than 15 minutes")

    async def _active_user(self, user_id: UUID) -> User | None:
        try:
            user = await self._store.get_user(user_id)
        except NotFoundError:
            return None
        return user if user.is_active else None

    # --- own password ---------------------------------------------------------------------------

    async def change_password(self, principal: Principal, current: str, new: str) -> User:
        """Change the caller's password after checking the current one (a wrong one counts as
        a failed login). Every refresh token of the user is revoked."""
        now = self._clock()
        user = await self._store.get_user(principal.user_id)
        self._raise_if_locked(user.locked_until, now)
        ok, _ = await self._verify(current, user.password_hash)
        if not ok:
            await self._store.record_login_failure(
                user.id,
                max_failures=self.config.max_failed_logins,
                lock_until=now + self.config.lockout,
            )
            raise ValidationError("the current password is wrong", field="currentPassword")
        if new == current:
            raise ValidationError("the new password is the current one", field="newPassword")
        check_password(user.username, new, field="newPassword")
        stored = await self._store.update_user(
            replace(user, password_hash=await self.hash_password(new), updated_at=now)
        )
        await self._store.revoke_refresh_tokens(now, user_id=user.id)
        return stored

    # --- users (admin) --------------------------------------------------------------------------

    async def create_user(self, username: str, password: str, role: Role) -> User:
        name = normalize_username(username)
        check_password(name, password)
        if await self._store.find_user(name) is not None:
            raise ConflictError(f"the username {name!r} is taken")
        now = self._clock()
        user = User(
            id=new_id(),
            username=name,
            password_hash=await self.hash_password(password),
            role=role,
            created_at=now,
            updated_at=now,
        )
        await self._store.create_user(user)
        return user

    async def get_user(self, user_id: UUID) -> User:
        return await self._store.get_user(user_id)

    async def find_user(self, username: str) -> User | None:
        return await self._store.find_user(username.strip().lower())

    async def list_users(self, limit: int = 50, cursor: str | None = None) -> Page[User]:
        return await self._store.list_users(limit, cursor)

    async def has_admin(self) -> bool:
        return await self._store.count_admins() > 0

    async def update_user(
        self,
        user_id: UUID,
        *,
        role: Role | None = None,
        is_active: bool | None = None,
        password: str | None = None,
    ) -> User:
        """Change a user's role, active flag or password (a reset: it also unlocks the user).
        Deactivating or resetting revokes the user's refresh tokens. ``ConflictError`` when
        it would leave no active Admin."""
        now = self._clock()
        user = await self._store.get_user(user_id)
        changed = replace(user, updated_at=now)
        if role is not None:
            changed = replace(changed, role=role)
        if is_active is not None:
            changed = replace(changed, is_active=is_active)
        if password is not None:
            check_password(user.username, password)
            changed = replace(
                changed,
                password_hash=await self.hash_password(password),
                failed_logins=0,
                locked_until=None,
            )
        stored = await self._store.update_user(changed)
        if password is not None or is_active is False:
            await self._store.revoke_refresh_tokens(now, user_id=user_id)
        return stored

    async def delete_user(self, user_id: UUID) -> User:
        return await self._store.delete_user(user_id)

    async def ensure_admin(self, username: str, password: str) -> User | None:
        """The bootstrap: when no active Admin exists, make ``username`` one with
        ``password`` (created, or an existing user promoted, re-activated and given the
        password). Returns the user, or ``None`` when an Admin already exists (or another
        server created it at the same time)."""
        if await self.has_admin():
            return None
        name = normalize_username(username)
        existing = await self._store.find_user(name)
        if existing is None:
            try:
                return await self.create_user(name, password, Role.ADMIN)
            except ConflictError:
                if await self.has_admin():  # another server bootstrapped it meanwhile
                    return None
                raise
        check_password(name, password)
        return await self._store.update_user(
            replace(
                existing,
                role=Role.ADMIN,
                is_active=True,
                password_hash=await self.hash_password(password),
                failed_logins=0,
                locked_until=None,
                updated_at=self._clock(),
            )
        )


def generate_password() -> str:
    """A random password that passes the policy (128 bits)."""
    return secrets.token_urlsafe(16)
