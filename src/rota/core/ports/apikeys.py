"""The store's slice for API keys (:mod:`rota.services.apikeys`, docs/security.md#api-keys)."""

from __future__ import annotations

import abc
from datetime import datetime
from uuid import UUID

from rota.core.apikeys import ApiKey


class ApiKeyStore(abc.ABC):
    """API keys: created, read by id (every request made with one), listed, revoked, and
    their last use noted (at most once per ``every`` per key)."""

    @abc.abstractmethod
    async def create_api_key(self, key: ApiKey) -> None:
        """Store a new key. :class:`~rota.core.errors.ConflictError` if a key that is not
        revoked has the same name."""

    @abc.abstractmethod
    async def get_api_key(self, key_id: UUID) -> ApiKey | None:
        """The key (revoked or expired ones too); ``None`` if there is none."""

    @abc.abstractmethod
    async def list_api_keys(self) -> list[ApiKey]:
        """Every key, revoked ones included, newest first."""

    @abc.abstractmethod
    async def revoke_api_key(self, key_id: UUID, at: datetime, by: str) -> ApiKey:
        """Revoke the key (a revoked one stays as it was): the key as it is now.
        :class:`~rota.core.errors.NotFoundError` if there is none."""

    @abc.abstractmethod
    async def touch_api_key(self, key_id: UUID, at: datetime, older_than: datetime) -> bool:
        """Set the key's ``last_used_at`` to ``at`` if it is unset or before ``older_than``
        (one conditional update: servers racing write it once). Whether it was written."""
