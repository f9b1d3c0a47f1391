"""Users (Admin only): create, list, read, change role / active flag / password, delete.

The last active Admin can be neither demoted, deactivated nor deleted (409)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response, status

from rota.api.deps import Audit, Auth
from rota.api.paths import app_url
from rota.api.problems import problem_responses
from rota.api.schemas.common import MAX_LIMIT, NO_NUL
from rota.api.schemas.security import UserCreate, UserOut, UserPage, UserPatch
from rota.api.security import AdminUser, requires
from rota.core.security import Role

router = APIRouter(prefix="/users", tags=["users"], dependencies=[requires(Role.ADMIN)])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(409, 413, 422, 503),
    summary="Create a user",
    description="The password must have at least 12 characters, differ from the username "
    "and not be a common one. Usernames are case-insensitive (stored lowercased); a taken "
    "one is a 409.",
)
async def create_user(
    body: UserCreate,
    auth: Auth,
    audit: Audit,
    admin: AdminUser,
    response: Response,
    request: Request,
) -> UserOut:
    user = UserOut.of(await auth.create_user(body.username, body.password, body.role))
    await audit.record(admin.username, "user.created", "user", user.id, after=user.audit())
    response.headers["Location"] = app_url(request, f"/api/v1/users/{user.id}")
    return user


@router.get("", responses=problem_responses(422, 503), summary="List users, oldest first")
async def list_users(
    auth: Auth,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(max_length=500, pattern=NO_NUL)] = None,
) -> UserPage:
    page = await auth.list_users(limit, cursor or None)
    return UserPage(items=[UserOut.of(u) for u in page.items], next_cursor=page.next_cursor)


@router.get("/{user_id}", responses=problem_responses(404, 422, 503), summary="Read a user")
async def get_user(user_id: UUID, auth: Auth) -> UserOut:
    return UserOut.of(await auth.get_user(user_id))


@router.patch(
    "/{user_id}",
    responses=problem_responses(404, 409, 413, 422, 503),
    summary="Change a user's role or active flag, or reset its password",
    description="A password reset also unlocks the user; a reset, a role change or a "
    "deactivation ends the user's sessions at once (its access tokens, dashboard sessions "
    "and refresh tokens). Setting one's own password here needs currentPassword (422 "
    "without it or with a wrong one). Demoting or deactivating the last active Admin is a "
    "409.",
)
async def update_user(
    user_id: UUID, body: UserPatch, auth: Auth, audit: Audit, admin: AdminUser
) -> UserOut:
    before = UserOut.of(await auth.get_user(user_id))
    after = UserOut.of(
        await auth.update_user(
            user_id,
            role=body.role,
            is_active=body.is_active,
            password=body.password,
            actor=admin,
            current_password=body.current_password,
        )
    )
    secret = {"password", "current_password"}
    changes = body.model_dump(exclude_unset=True, exclude=secret, by_alias=True)
    action = "user.password_reset" if body.password is not None and not changes else "user.updated"
    after_view = after.audit() | ({"passwordReset": True} if body.password else {})
    await audit.record(
        admin.username, action, "user", user_id, before=before.audit(), after=after_view
    )
    return after


@router.delete(
    "/{user_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(404, 409, 422, 503),
    summary="Delete a user (not the last active Admin)",
)
async def delete_user(user_id: UUID, auth: Auth, audit: Audit, admin: AdminUser) -> Response:
    before = UserOut.of(await auth.delete_user(user_id))
    await audit.record(admin.username, "user.deleted", "user", user_id, before=before.audit())
    return Response(status_code=status.HTTP_204_NO_CONTENT)
