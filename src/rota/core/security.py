"""Users, roles, refresh tokens, audit entries and the password policy (pure domain, no I/O)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from rota.core.errors import ValidationError


class Role(enum.StrEnum):
    """What a user may do. Ordered: ``Viewer < Operator < Admin``; a higher role may do all a
    lower one may."""

    VIEWER = "Viewer"
    OPERATOR = "Operator"
    ADMIN = "Admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        """A user of this role may call what ``needed`` may."""
        return self.rank >= needed.rank

    @classmethod
    def parse(cls, value: str) -> Role:
        """``admin``, ``Admin`` or ``ADMIN`` -> :attr:`ADMIN`; anything else is refused."""
        for role in cls:
            if role.value.lower() == value.strip().lower():
                return role
        names = ", ".join(r.value for r in cls)
        raise ValidationError(f"unknown role {value!r} (one of {names})", field="role")


_RANKS: Final = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    id: UUID
    username: str
    password_hash: str
    role: Role
    is_active: bool = True
    failed_logins: int = 0
    """Consecutive failed logins since the last success or lock."""
    locked_until: datetime | None = None
    created_at: datetime
    updated_at: datetime

    def locked(self, now: datetime) -> bool:
        return self.locked_until is not None and self.locked_until > now


@dataclass(frozen=True, slots=True, kw_only=True)
class RefreshToken:
    """A stored refresh token: only the SHA-256 of the opaque token is kept.

    Every refresh uses a token up and issues its successor in the same ``family_id`` (one
    login); presenting a used or revoked token again revokes the whole family."""

    token_hash: str
    family_id: UUID
    user_id: UUID
    issued_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    revoked_at: datetime | None = None


class RefreshStatus(enum.StrEnum):
    ROTATED = "rotated"
    """The token was live: it is used up now and its successor is stored."""
    REUSED = "reused"
    """The token was used or revoked before: its family is revoked now."""
    INVALID = "invalid"
    """Unknown or expired; nothing changed."""


@dataclass(frozen=True, slots=True)
class RefreshOutcome:
    status: RefreshStatus
    user_id: UUID | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One change: who (``actor``, a username), what (``action`` on a resource), when, and the
    state before and after (JSON; ``None`` when there is none)."""

    id: UUID
    at: datetime
    actor: str
    action: str
    resource_type: str
    resource_id: str | None = None
    before: Any = None
    after: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditQuery:
    actor: str | None = None
    action: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    after: datetime | None = None
    """``after <= at``."""
    before: datetime | None = None
    """``at < before``."""
    limit: int = 50
    cursor: str | None = None
    """Entries are ordered newest first (by id, a UUIDv7)."""


# --- password policy -----------------------------------------------------------------------

MIN_PASSWORD_LENGTH: Final = 12
MAX_PASSWORD_LENGTH: Final = 1024
COMMON_PASSWORDS: Final = frozenset(
    {
        "password1234",
        "password12345",
        "password123456",
        "123456789012",
        "1234567890123",
        "qwertyuiop12",
        "qwerty123456",
        "administrator",
        "adminadmin12",
        "letmein12345",
        "iloveyou1234",
        "welcome12345",
        "changeme1234",
        "passw0rd1234",
        "rotarotarota",
        "abcdefghijkl",
        "aaaaaaaaaaaa",
        "111111111111",
    }
)

USERNAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$"


def check_password(username: str, password: str, *, field: str = "password") -> None:
    """Refuse a password that breaks the policy: at least 12 characters (at most 1024), not
    the username, not a well-known password, not one repeated character."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ValidationError(
            f"the password must have at least {MIN_PASSWORD_LENGTH} characters", field=field
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValidationError(
            f"the password must have at most {MAX_PASSWORD_LENGTH} characters", field=field
        )
    lowered = password.lower()
    if username and username.lower() in lowered and len(username) * 2 > len(password):
        raise ValidationError("the password must not be (mostly) the username", field=field)
    if lowered in COMMON_PASSWORDS or len(set(password)) == 1:
        raise ValidationError("the password is too common", field=field)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the signed-in user as the API sees it."""

    user_id: UUID
    username: str
    role: Role
    token_id: str = field(default="")
