"""API keys for services: created by an Admin (shown once), verified on each request without
a password hash (the SHA-256 of a 256-bit secret, compared in constant time), scoped,
expiring, revocable (refused at once), and audited.

A key acts as a :class:`~rota.core.security.Principal` like a signed-in user: its name
(``key:<name>``), its role and its scope. Its last use is written at most once per
``touch_every`` (a conditional update, so servers racing write it once), not per request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Final
from uuid import UUID

from rota.core.apikeys import (
    KEY_NAME_PATTERN,
    MAX_SCOPE_ITEMS,
    ApiKey,
    KeyScope,
    format_token,
    hash_secret,
    looks_like_key,
    new_secret,
    parse_token,
    secret_matches,
)
from rota.core.errors import (
    AuthenticationError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from rota.core.ids import new_id
from rota.core.ports import ApiKeyStore
from rota.core.security import Principal, Role
from rota.services.audit import AuditService

TOUCH_EVERY: Final = timedelta(minutes=1)
INVALID: Final = "invalid API key"
_SCOPE_ITEM: Final = re.compile(r"^[^\s\x00-\x1f][^\x00-\x1f]{0,199}$")


def _scope_items(values: Sequence[str] | None, field: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(v.strip() for v in values or ()))
    if len(items) > MAX_SCOPE_ITEMS:
        raise ValidationError(f"at most {MAX_SCOPE_ITEMS} items", field=field)
    for i, item in enumerate(items):
        if not _SCOPE_ITEM.match(item):
            raise ValidationError(
                "an item has 1-200 characters and no control characters", field=f"{field}[{i}]"
            )
    return items


class ApiKeyService:
    """API keys over the store's ``ApiKeyStore`` slice."""

    def __init__(
        self,
        store: ApiKeyStore,
        audit: AuditService,
        clock: Callable[[], datetime],
        *,
        touch_every: timedelta = TOUCH_EVERY,
    ) -> None:
        self._store = store
        self._audit = audit
        self._clock = clock
        self._touch_every = touch_every

    @staticmethod
    def is_key(token: str) -> bool:
        """Whether a bearer token is an API key (``rota_…``), not an access token."""
        return looks_like_key(token)

    # --- administration -------------------------------------------------------------------------

    @staticmethod
    def _may_manage(by: Principal) -> None:
        if by.scoped:
            raise PermissionDeniedError("a scoped API key cannot manage API keys")
        if not by.role.allows(Role.ADMIN):
            raise PermissionDeniedError(f"managing API keys needs the Admin role ({by.username})")

    async def create(
        self,
        by: Principal,
        *,
        name: str,
        role: Role,
        job_types: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key and its token (``rota_<id>_<secret>``, shown once: only its hash is
        kept). ``ValidationError`` naming the field; ``ConflictError`` if a live key has the
        name; ``PermissionDeniedError`` for a caller that is not an unscoped Admin."""
        self._may_manage(by)
        name = name.strip()
        if not re.fullmatch(KEY_NAME_PATTERN, name):
            raise ValidationError(
                "a key's name has 1-100 characters: letters, digits and _ . @ - (not first)",
                field="name",
            )
        now = self._clock()
        if expires_at is not None and expires_at <= now:
            raise ValidationError("the expiry must be in the future", field="expiresAt")
        scope = KeyScope(
            job_types=_scope_items(job_types, "jobTypes"), tags=_scope_items(tags, "tags")
        )
        secret = new_secret()
        key = ApiKey(
            id=new_id(),
            name=name,
            role=role,
            scope=scope,
            secret_hash=hash_secret(secret),
            created_at=now,
            created_by=by.username,
            expires_at=expires_at,
        )
        await self._store.create_api_key(key)
        await self._audit.record(
            by.username, "apikey.created", "api_key", key.id, after=key.audit()
        )
        return key, format_token(key.id, secret)

    async def list(self, by: Principal) -> list[ApiKey]:
        self._may_manage(by)
        return await self._store.list_api_keys()

    async def get(self, by: Principal, key_id: UUID) -> ApiKey:
        self._may_manage(by)
        key = await self._store.get_api_key(key_id)
        if key is None:
            raise NotFoundError("API key", key_id)
        return key

    async def revoke(self, by: Principal, key_id: UUID) -> ApiKey:
        """Revoke the key: every request made with it is refused from now on (a revoked key
        stays listed, with when and by whom it was revoked)."""
        self._may_manage(by)
        before = await self.get(by, key_id)
        key = await self._store.revoke_api_key(key_id, self._clock(), by.username)
        if before.revoked_at is None:
            await self._audit.record(
                by.username, "apikey.revoked", "api_key", key.id, before=before.audit()
            )
        return key

    # --- verification ---------------------------------------------------------------------------

    async def authenticate(self, token: str) -> Principal:
        """The principal of a key token: ``AuthenticationError`` for a malformed, unknown,
        wrong, revoked or expired key. One read by id and a SHA-256, no password hash."""
        parsed = parse_token(token.strip())
        if parsed is None:
            raise AuthenticationError(
                f"{INVALID}: an API key has the form rota_<32 hex digits>_<43 characters>"
            )
        key_id, secret = parsed
        key = await self._store.get_api_key(key_id)
        if key is None or not secret_matches(secret, key.secret_hash):
            raise AuthenticationError(INVALID)
        now = self._clock()
        if key.revoked_at is not None:
            raise AuthenticationError(f"{INVALID}: it was revoked")
        if key.expired(now):
            raise AuthenticationError(f"{INVALID}: it has expired")
        if key.last_used_at is None or key.last_used_at < now - self._touch_every:
            await self._store.touch_api_key(key.id, now, now - self._touch_every)
        return Principal(
            key.id,
            key.actor,
            key.role,
            key.id.hex,
            key_id=key.id,
            scope=key.scope if key.scope.scoped else None,
        )
