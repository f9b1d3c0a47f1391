"""Authentication and users: argon2id passwords, JWT access tokens, rotated refresh tokens,
login lockout, the password policy, and the user administration rules.

- Access tokens are JWTs signed with HS256 (pinned: a token naming any other algorithm,
  ``none`` included, is refused), living at most 15 minutes, with ``iss``, ``aud``, ``exp``,
  ``nbf``, ``iat``, ``sub`` (the user id), ``name``, ``role`` and ``jti``. Each request loads
  the user again, so a deactivated or deleted user, or a changed role, counts at once.
- Refresh tokens are opaque (32 random bytes); the store keeps only their SHA-256. Every
  refresh uses the token up and issues a new one in the same family (one login); presenting
  a used token again revokes the whole family (it was stolen, or the client is confused).
- ``max_failed_logins`` failures in a row lock an account for ``lockout``. Each attempt is
  counted in the store *before* its password is checked, and only one check of a name runs at
  a time (a lease in the store), so parallel guesses, on any number of servers, get at most
  ``max_failed_logins`` checks; a right password gives its count back (and clears the lock).
  Names that are not users are counted and locked the same way (in the store too), so the
  answers never tell whether a user exists.
- Login and refresh are rate limited per client address and in all (in this process), and
  password hashing runs in a small pool with a bounded queue (:mod:`rota.services.hashing`):
  a flood of sign-ins is refused (429 / 503 with Retry-After) instead of starving the server.
- A lockout and the reuse of a refresh token are written to the audit log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
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
    RateLimitedError,
    ValidationError,
)
from rota.core.ids import new_id
from rota.core.ports import AccountStore
from rota.core.records import Page
from rota.core.security import (
    MIN_SECRET_BYTES,
    USERNAME_PATTERN,
    LoginGate,
    LoginReservation,
    Principal,
    RefreshStatus,
    RefreshToken,
    Role,
    User,
    check_password,
)
from rota.services.audit import AuditService
from rota.services.hashing import HashingPool, Ticket
from rota.services.ratelimit import Rate, RateLimiter

log = logging.getLogger(__name__)

ALGORITHM: Final = "HS256"
MAX_ACCESS_TTL: Final = timedelta(minutes=15)
BAD_CREDENTIALS: Final = "invalid username or password"
CLOCK_SKEW_SECONDS: Final = 10.0
"""Leeway for the clocks of servers that share a secret."""
MAX_NAME_LENGTH: Final = 100
LOGIN_PER_CLIENT: Final = Rate(per_second=0.5, burst=20)
LOGIN_OVERALL: Final = Rate(per_second=5, burst=20)
REFRESH_PER_CLIENT: Final = Rate(per_second=1, burst=30)
REFRESH_OVERALL: Final = Rate(per_second=50, burst=100)
_CLAIMS: Final = ["exp", "iat", "nbf", "iss", "aud", "sub", "jti"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    secret: bytes
    previous_secrets: tuple[bytes, ...] = ()
    """Secrets that signed tokens before a rotation: accepted for verification only (the
    current ``secret`` signs)."""
    access_ttl: timedelta = MAX_ACCESS_TTL
    refresh_ttl: timedelta = timedelta(days=14)
    max_failed_logins: int = 5
    lockout: timedelta = timedelta(minutes=15)
    issuer: str = "rota"
    audience: str = "rota-api"
    check_lease: timedelta = timedelta(seconds=10)
    """How long a password check holds its name (a server that dies mid-check releases it
    after this long)."""
    login_per_client: Rate = LOGIN_PER_CLIENT
    login_overall: Rate = LOGIN_OVERALL
    refresh_per_client: Rate = REFRESH_PER_CLIENT
    refresh_overall: Rate = REFRESH_OVERALL
    hash_threads: int = 1
    hash_queue: int = 8

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the token secret must have at least {MIN_SECRET_BYTES} bytes")
        if any(len(old) < MIN_SECRET_BYTES for old in self.previous_secrets):
            raise ValueError(f"each previous secret must have at least {MIN_SECRET_BYTES} bytes")
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


class AuthService:
    """Sign-in, tokens and users over the store."""

    def __init__(
        self,
        store: AccountStore,
        config: AuthConfig,
        clock: Callable[[], datetime],
        *,
        hasher: PasswordHash | None = None,
        audit: AuditService | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self.store = store
        self.config = config
        self._clock = clock
        self._hasher = hasher or PasswordHash((Argon2Hasher(),))
        self.hashing = HashingPool(
            self._hasher, threads=config.hash_threads, queue=config.hash_queue
        )
        self.login_limits = RateLimiter(
            "sign-in",
            per_client=config.login_per_client,
            overall=config.login_overall,
            clock=monotonic,
        )
        self.refresh_limits = RateLimiter(
            "token refresh",
            per_client=config.refresh_per_client,
            overall=config.refresh_overall,
            clock=monotonic,
        )
        self._audit = audit or AuditService(store, clock)
        self._dummy_hash: str | None = None

    def now(self) -> datetime:
        return self._clock()

    # --- passwords ----------------------------------------------------------------------------

    async def hash_password(self, password: str) -> str:
        """The argon2id hash (in the hashing pool: ``OverloadedError`` when it is full)."""
        return await self.hashing.hash(password)

    def _burn_time(self, password: str) -> tuple[bool, str | None]:
        """Verify against a throw-away hash (in a hashing thread): an unknown name costs as
        long as a known one."""
        if self._dummy_hash is None:
            self._dummy_hash = self._hasher.hash(secrets.token_urlsafe(16))
        self._hasher.verify(password, self._dummy_hash)
        return False, None

    def close(self) -> None:
        """Stop the hashing threads."""
        self.hashing.close()

    # --- sign-in ------------------------------------------------------------------------------

    async def login(self, username: str, password: str, *, client: str | None = None) -> Tokens:
        """Tokens for a user whose password matches. ``AuthenticationError`` (the same for an
        unknown name, a wrong password and an inactive user), ``AccountLockedError``,
        ``RateLimitedError`` (too many sign-ins from ``client``, the caller's address, or in
        all; or another check of the name is in flight) or ``OverloadedError`` (the hashing
        pool is full)."""
        self.login_limits.take(client)
        name = username.strip().lower()[:MAX_NAME_LENGTH]
        ok, user = await self._check(name, password, client=client, action="login")
        if not ok or user is None or not user.is_active:
            raise AuthenticationError(BAD_CREDENTIALS)
        return await self._issue(user, self._clock(), family_id=new_id())

    async def _check(
        self, name: str, password: str, *, client: str | None, action: str
    ) -> tuple[bool, User | None]:
        """Check ``password`` for ``name``: room in the hashing pool first, then the attempt
        reserved in the store (counted as a failure, the name leased), then the check, then
        the lease ended (a success also clears the count and the lock). Whether it matched
        (an inactive user may match: the caller decides), and the user (``None`` for a name
        that is no user)."""
        now = self._clock()
        check_until = now + self.config.check_lease
        with self.hashing.ticket() as ticket:
            reservation = await self._store.reserve_login(
                name,
                now=now,
                max_failures=self.config.max_failed_logins,
                lock_until=now + self.config.lockout,
                check_until=check_until,
            )
            self._raise_if_refused(reservation, now)
            user = reservation.user
            succeeded = False
            try:
                ok, new_hash = await self._run_check(ticket, password, user)
                succeeded = ok and user is not None and user.is_active
                if succeeded and user is not None:
                    user = replace(user, failed_logins=0, locked_until=None)
                    if new_hash is not None:
                        user = await self._store.update_user(replace(user, password_hash=new_hash))
            finally:
                await self._end_check(name, check_until, succeeded=succeeded)
        if not succeeded and reservation.locks:
            await self._audit_lockout(name, user, reservation, client=client, action=action)
        return ok, user

    async def _run_check(
        self, ticket: Ticket, password: str, user: User | None
    ) -> tuple[bool, str | None]:
        if user is None:
            return await ticket.run(self._burn_time, password)
        return await ticket.run(self._hasher.verify_and_update, password, user.password_hash)

    async def _end_check(self, name: str, check_until: datetime, *, succeeded: bool) -> None:
        """End the lease, also when the check was cancelled (a client gone): shielded, and a
        store that fails here only delays the next check until the lease ends."""
        ending = self._store.end_login_check(name, check_until=check_until, succeeded=succeeded)
        try:
            await asyncio.shield(ending)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the lease runs out by itself
            log.warning("could not end a sign-in check of %s: %s", name, exc)

    async def _audit_lockout(
        self,
        name: str,
        user: User | None,
        reservation: LoginReservation,
        *,
        client: str | None,
        action: str,
    ) -> None:
        until = reservation.until
        log.warning(
            "too many failed logins: %s is locked until %s",
            name,
            until,
            extra={"action": "login_locked", "client": client},
        )
        with contextlib.suppress(Exception):  # a lost entry must not turn this into a 500
            await self._audit.record(
                name or "-",
                "login.locked",
                "user",
                None if user is None else user.id,
                after={
                    "client": client,
                    "lockedUntil": None if until is None else until.isoformat(),
                    "failures": self.config.max_failed_logins,
                    "during": action,
                },
            )

    def _raise_if_locked(self, until: datetime | None, now: datetime) -> None:
        if until is not None and until > now:
            seconds = max(1, math.ceil((until - now).total_seconds()))
            raise AccountLockedError(
                f"too many failed logins: try again in {seconds} seconds", retry_after=seconds
            )

    def _raise_if_refused(self, reservation: LoginReservation, now: datetime) -> None:
        if reservation.gate is LoginGate.LOCKED:
            self._raise_if_locked(reservation.until, now)
        elif reservation.gate is LoginGate.BUSY:
            raise RateLimitedError(
                "another sign-in of this name is being checked: try again in a second",
                retry_after=1,
            )

    async def refresh(self, refresh_token: str, *, client: str | None = None) -> Tokens:
        """New tokens for a live refresh token, which is used up. A used one revokes its
        family (and is written to the audit log); an unknown, expired or revoked one, or one
        of a user no longer active, is ``AuthenticationError``. Too many refreshes from
        ``client`` (the caller's address) or in all: ``RateLimitedError``."""
        self.refresh_limits.take(client)
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
            await self._audit_reuse(outcome.user_id, client)
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

    async def _audit_reuse(self, user_id: UUID | None, client: str | None) -> None:
        owner = None if user_id is None else await self._user_or_none(user_id)
        with contextlib.suppress(Exception):  # a lost entry must not turn this into a 500
            await self._audit.record(
                owner.username if owner is not None else "-",
                "refresh.reused",
                "user",
                user_id,
                after={"client": client, "familyRevoked": True},
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
                # Microseconds: a token issued in the same second as a password change (and
                # before it) must not outlive it (``tokens_valid_after``).
                "iat": issued_at(now),
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
            claims = self._decode(access_token)
            self._check_times(claims)
            user_id = UUID(str(claims["sub"]))
            issued = datetime.fromtimestamp(float(claims["iat"]), UTC)
        except (jwt.PyJWTError, ValueError, TypeError, OverflowError, OSError) as exc:
            raise AuthenticationError(f"invalid access token: {exc}") from None
        user = await self._active_user(user_id)
        if user is None:
            raise AuthenticationError("invalid access token: the user is not active")
        if user.tokens_valid_after is not None and issued <= user.tokens_valid_after:
            raise AuthenticationError(
                "invalid access token: the user's sessions were ended (a password or role "
                "change, or a deactivation): sign in again"
            )
        return Principal(user.id, user.username, user.role, str(claims["jti"]))

    def _decode(self, access_token: str) -> dict[str, Any]:
        """The claims, the signature checked with the current secret, then each previous one
        (a rotation: tokens signed before it stay good until they expire)."""
        keys = (self.config.secret, *self.config.previous_secrets)
        for key in keys[:-1]:
            with contextlib.suppress(jwt.InvalidSignatureError):
                return self._decode_with(access_token, key)
        return self._decode_with(access_token, keys[-1])

    def _decode_with(self, access_token: str, key: bytes) -> dict[str, Any]:
        claims: dict[str, Any] = jwt.decode(
            access_token,
            key,
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
        return claims

    def _check_times(self, claims: dict[str, Any]) -> None:
        now = self._clock().timestamp()
        exp, nbf, iat = (float(claims[name]) for name in ("exp", "nbf", "iat"))
        if now >= exp + CLOCK_SKEW_SECONDS:
            raise ValueError("the token has expired")
        if now + CLOCK_SKEW_SECONDS < nbf or now + CLOCK_SKEW_SECONDS < iat:
            raise ValueError("the token is not yet valid")
        if exp - iat > MAX_ACCESS_TTL.total_seconds():
            raise ValueError("the token lives longer than 15 minutes")

    async def _user_or_none(self, user_id: UUID) -> User | None:
        try:
            return await self._store.get_user(user_id)
        except NotFoundError:
            return None

    async def _active_user(self, user_id: UUID) -> User | None:
        user = await self._user_or_none(user_id)
        return user if user is not None and user.is_active else None

    # --- own password ---------------------------------------------------------------------------

    async def change_password(self, principal: Principal, current: str, new: str) -> User:
        """Change the caller's password after checking the current one (a wrong one counts as
        a failed login). Every session of the user ends (its access tokens, this one included,
        and its refresh tokens)."""
        user = await self._store.get_user(principal.user_id)
        ok, _ = await self._check(user.username, current, client=None, action="password change")
        if not ok:
            raise ValidationError("the current password is wrong", field="currentPassword")
        now = self._clock()
        if new == current:
            raise ValidationError("the new password is the current one", field="newPassword")
        check_password(user.username, new, field="newPassword")
        return await self._store.update_user_ending_sessions(
            replace(user, password_hash=await self.hash_password(new), updated_at=now), now
        )

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
        actor: Principal | None = None,
        current_password: str | None = None,
    ) -> User:
        """Change a user's role, active flag or password (a reset: it also unlocks the user).
        A reset, a role change and a deactivation end the user's sessions (access and refresh
        tokens). ``ConflictError`` when it would leave no active Admin. ``actor`` (the
        caller) setting its own password must give ``current_password`` (else a
        ``ValidationError`` on ``currentPassword``; a wrong one counts as a failed login)."""
        if password is not None and actor is not None and actor.user_id == user_id:
            await self._check_own_password(actor, current_password)
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
        ends = (
            password is not None
            or (is_active is False and user.is_active)
            or (role is not None and role is not user.role)
        )
        if ends:
            return await self._store.update_user_ending_sessions(changed, now)
        return await self._store.update_user(changed)

    async def _check_own_password(self, actor: Principal, current: str | None) -> None:
        """Whoever changes its own password proves it knows the current one (a stolen
        session alone must not take the account over)."""
        if current is None:
            raise ValidationError(
                "changing your own password needs your current password: send "
                "currentPassword (or use PUT /api/v1/auth/password)",
                field="currentPassword",
            )
        name = (await self._store.get_user(actor.user_id)).username
        ok, _ = await self._check(name, current, client=None, action="password change")
        if not ok:
            raise ValidationError("the current password is wrong", field="currentPassword")

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
        now = self._clock()
        return await self._store.update_user_ending_sessions(
            replace(
                existing,
                role=Role.ADMIN,
                is_active=True,
                password_hash=await self.hash_password(password),
                failed_logins=0,
                locked_until=None,
                updated_at=now,
            ),
            now,
        )


def issued_at(now: datetime) -> float:
    """A token's ``iat``: seconds since the epoch with microseconds (JWT allows a fraction),
    compared with ``tokens_valid_after`` as a time of the same precision."""
    return round(now.timestamp(), 6)


def generate_password() -> str:
    """A random password that passes the policy (128 bits)."""
    return secrets.token_urlsafe(16)
