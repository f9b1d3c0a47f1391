"""Bodies of the auth, users and audit endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BeforeValidator, Field, StringConstraints

from rota.api.schemas.common import ApiModel, InputModel
from rota.core.errors import ValidationError
from rota.core.security import MAX_PASSWORD_LENGTH, AuditEntry, Role, User


def _role(value: Any) -> Any:
    """Role names are case-insensitive on input (``admin``, ``Admin``)."""
    if isinstance(value, str):
        try:
            return Role.parse(value)
        except ValidationError as exc:
            raise ValueError(exc.message) from None
    return value


RoleIn = Annotated[Role, BeforeValidator(_role)]

Password = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PASSWORD_LENGTH)]
Username = Annotated[str, StringConstraints(min_length=1, max_length=100)]
OpaqueToken = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class LoginRequest(InputModel):
    username: Username
    password: Password


class TokenOut(ApiModel):
    access_token: str = Field(description="A JWT: send it as 'Authorization: Bearer <token>'.")
    refresh_token: str = Field(
        description="Opaque; POST it to /auth/refresh for new tokens. Single use."
    )
    token_type: Literal["Bearer"] = "Bearer"
    expires_in: int = Field(description="Seconds the access token lives.")


class RefreshRequest(InputModel):
    refresh_token: OpaqueToken | None = Field(
        None,
        description="The refresh token; omitted: the rota_refresh cookie (then the header "
        "X-Rota-CSRF: 1 is needed).",
    )


class PasswordChange(InputModel):
    current_password: Password
    new_password: Password = Field(
        description="At least 12 characters, not the username, not a common password."
    )


class UserOut(ApiModel):
    id: UUID
    username: str
    role: Role
    is_active: bool
    locked_until: datetime | None = Field(
        description="Set while the account is locked after failed logins."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, user: User) -> UserOut:
        return cls(
            id=user.id,
            username=user.username,
            role=user.role,
            is_active=user.is_active,
            locked_until=user.locked_until,
            created_at=user.created_at,
            updated_at=user.updated_at,
        )

    def audit(self) -> dict[str, Any]:
        """The user as the audit log keeps it (never a password hash)."""
        return self.model_dump(mode="json", by_alias=True)


class UserPage(ApiModel):
    items: list[UserOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class UserCreate(InputModel):
    username: Username = Field(description="Letters, digits and _ . @ -; case-insensitive.")
    password: Password = Field(
        description="At least 12 characters, not the username, not a common password."
    )
    role: RoleIn = Role.VIEWER


class UserPatch(InputModel):
    role: RoleIn | None = None
    is_active: bool | None = Field(
        None, description="false: the user can no longer sign in (its tokens stop working)."
    )
    password: Password | None = Field(
        None, description="A password reset: also unlocks the user and ends its sessions."
    )
    current_password: Password | None = Field(
        None,
        description="The caller's current password: needed when an Admin sets its own "
        "password here (else 422 on currentPassword).",
    )


class AuditOut(ApiModel):
    id: UUID
    at: datetime
    actor: str = Field(description="The username that made the change.")
    action: str = Field(description="e.g. job.updated, user.created, login.failed.")
    resource_type: str
    resource_id: str | None
    resource_name: str | None = Field(
        None,
        description="What people call the resource: the job's display name (for an entry on "
        "a job, or on an occurrence or failure of one), the user's username, the API key's "
        "name; null when it has none or is no longer known.",
    )
    before: Any = Field(description="The resource before the change (null: none).")
    after: Any = Field(description="The resource after the change (null: none).")

    @classmethod
    def of(cls, entry: AuditEntry, name: str | None = None) -> AuditOut:
        return cls(
            id=entry.id,
            at=entry.at,
            actor=entry.actor,
            action=entry.action,
            resource_type=entry.resource_type,
            resource_id=entry.resource_id,
            resource_name=name,
            before=entry.before,
            after=entry.after,
        )


class AuditPage(ApiModel):
    items: list[AuditOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")
