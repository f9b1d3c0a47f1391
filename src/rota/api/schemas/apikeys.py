"""Bodies of the API keys endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field, StringConstraints

from rota.api.schemas.common import ApiModel, InputModel, UtcDatetime
from rota.api.schemas.security import RoleIn
from rota.core.apikeys import MAX_SCOPE_ITEMS, ApiKey
from rota.core.security import Role

ScopeItem = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]*$")]


class ApiKeyCreate(InputModel):
    name: Annotated[str, StringConstraints(min_length=1, max_length=100)] = Field(
        description="Letters, digits and _ . @ -; unique among the keys not revoked. The key "
        "acts as `key:<name>` (audit log, createdBy)."
    )
    role: RoleIn = Field(description="Viewer, Operator or Admin.")
    job_types: list[ScopeItem] | None = Field(
        None,
        max_length=MAX_SCOPE_ITEMS,
        description="Scope: the key sees and acts only on jobs of these job types.",
    )
    tags: list[ScopeItem] | None = Field(
        None,
        max_length=MAX_SCOPE_ITEMS,
        description="Scope: the key sees and acts only on jobs with at least one of these tags "
        "(with jobTypes too: both must match).",
    )
    expires_at: UtcDatetime | None = Field(
        None, description="When the key stops working (ISO-8601; none: it never expires)."
    )


class ApiKeyOut(ApiModel):
    id: UUID
    name: str
    role: Role
    job_types: list[str] = Field(description="Scope by job type (empty: any).")
    tags: list[str] = Field(description="Scope by tag (empty: any).")
    prefix: str = Field(description="The start of the key's token: rota_<id>_ (not secret).")
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    last_used_at: datetime | None = Field(
        description="The last request made with the key (written at most once a minute)."
    )
    revoked_at: datetime | None
    revoked_by: str | None

    @classmethod
    def of(cls, key: ApiKey) -> ApiKeyOut:
        return cls(
            id=key.id,
            name=key.name,
            role=key.role,
            job_types=list(key.scope.job_types),
            tags=list(key.scope.tags),
            prefix=f"rota_{key.id.hex}_",
            created_at=key.created_at,
            created_by=key.created_by,
            expires_at=key.expires_at,
            last_used_at=key.last_used_at,
            revoked_at=key.revoked_at,
            revoked_by=key.revoked_by,
        )


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(
        description="The key itself, rota_<id>_<secret>: shown this once, never again. Send "
        "it as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'."
    )


class ApiKeyList(ApiModel):
    items: list[ApiKeyOut]
