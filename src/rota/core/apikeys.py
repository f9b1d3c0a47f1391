"""API keys for services: the stored key, its scope, and the token format (pure, no I/O).

A key is shown once, at creation, as ``rota_<id>_<secret>``: ``<id>`` the key's id (32 hex
digits, what the server looks the key up by) and ``<secret>`` 32 random bytes in URL-safe
base64. Only the SHA-256 of the secret is stored: the secret has 256 bits of entropy, so a
fast hash is enough (no password hash per request), and it is compared in constant time.

A key with a scope (job types and/or tags) sees and acts only on the jobs in it; see
:meth:`KeyScope.allows`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from uuid import UUID

from rota.core.errors import PermissionDeniedError
from rota.core.security import Role

KEY_PREFIX: Final = "rota_"
KEY_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$"
"""Like a username: 1-100 letters, digits and ``_ . @ -`` (not first)."""
ACTOR_PREFIX: Final = "key:"
"""A key acts as ``key:<name>`` (in the audit log, ``createdBy`` of jobs, …): no username
holds a colon, so a key is never taken for a user."""
MAX_SCOPE_ITEMS: Final = 50
_TOKEN: Final = re.compile(r"^rota_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyScope:
    """What a scoped key may see and act on. Empty: everything its role allows.

    A job is in the scope when **each** list that is not empty matches it: its job type is
    one of ``job_types``, and at least one of its tags is one of ``tags``."""

    job_types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def scoped(self) -> bool:
        return bool(self.job_types or self.tags)

    def allows(self, job_type: str, tags: Iterable[str]) -> bool:
        if self.job_types and job_type not in self.job_types:
            return False
        return not self.tags or not set(self.tags).isdisjoint(tags)

    def check(self, job_type: str, tags: Sequence[str], *, prefix: str = "") -> None:
        """Refuse a job outside the scope (one created or changed by a scoped key):
        :class:`ScopeDeniedError` naming the field (``jobType`` or ``tags``)."""
        if self.job_types and job_type not in self.job_types:
            allowed = ", ".join(self.job_types)
            raise ScopeDeniedError(
                f"job type {job_type!r} is outside this API key's scope (job types: {allowed})",
                field=f"{prefix}jobType",
            )
        if self.tags and set(self.tags).isdisjoint(tags):
            allowed = ", ".join(self.tags)
            raise ScopeDeniedError(
                f"the job's tags are outside this API key's scope: it needs one of {allowed}",
                field=f"{prefix}tags",
            )

    def to_json(self) -> dict[str, list[str]]:
        return {"jobTypes": list(self.job_types), "tags": list(self.tags)}


UNSCOPED: Final = KeyScope()


class ScopeDeniedError(PermissionDeniedError):
    """A scoped API key asked for something outside its scope (403 naming ``field``)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKey:
    """A stored key (its secret only as a hash)."""

    id: UUID
    name: str
    role: Role
    scope: KeyScope = UNSCOPED
    secret_hash: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    @property
    def actor(self) -> str:
        return f"{ACTOR_PREFIX}{self.name}"

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def usable(self, now: datetime) -> bool:
        return self.revoked_at is None and not self.expired(now)

    def audit(self) -> dict[str, object]:
        """The key as the audit log shows it (never its secret or hash)."""
        return {
            "id": str(self.id),
            "name": self.name,
            "role": self.role.value,
            **self.scope.to_json(),
            "expiresAt": None if self.expires_at is None else self.expires_at.isoformat(),
        }


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """32 random bytes, URL-safe base64 without padding (43 characters)."""
    return secrets.token_urlsafe(32)


def format_token(key_id: UUID, secret: str) -> str:
    return f"{KEY_PREFIX}{key_id.hex}_{secret}"


def looks_like_key(token: str) -> bool:
    """Whether a bearer token is an API key (``rota_…``) rather than an access token (a JWT,
    which starts with ``eyJ``)."""
    return token.startswith(KEY_PREFIX)


def parse_token(token: str) -> tuple[UUID, str] | None:
    """The id and the secret of a key token; ``None`` if it is not one."""
    match = _TOKEN.match(token)
    if match is None:
        return None
    return UUID(hex=match.group(1)), match.group(2)


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant-time comparison of the secret's hash with the stored one."""
    return hmac.compare_digest(hash_secret(secret), stored_hash)
