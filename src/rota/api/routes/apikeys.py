"""API keys (Admin only, and not a scoped key): create (the key shown once), list, read,
revoke. See docs/security.md#api-keys."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Request, Response, status

from rota.api.deps import ApiKeys
from rota.api.paths import app_url
from rota.api.problems import problem_responses
from rota.api.schemas.apikeys import ApiKeyCreate, ApiKeyCreated, ApiKeyList, ApiKeyOut
from rota.api.security import AdminUser, requires
from rota.core.security import Role

router = APIRouter(prefix="/api-keys", tags=["api-keys"], dependencies=[requires(Role.ADMIN)])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(409, 413, 422, 503),
    summary="Create an API key (shown once)",
    description="The answer's `key` is the only time the key is shown: only its SHA-256 is "
    "kept. A scoped API key cannot manage keys (403). A name a live key has is a 409.",
)
async def create_api_key(
    body: ApiKeyCreate,
    keys: ApiKeys,
    admin: AdminUser,
    response: Response,
    request: Request,
) -> ApiKeyCreated:
    key, token = await keys.create(
        admin,
        name=body.name,
        role=body.role,
        job_types=body.job_types,
        tags=body.tags,
        expires_at=body.expires_at,
    )
    response.headers["Location"] = app_url(request, f"/api/v1/api-keys/{key.id}")
    response.headers["Cache-Control"] = "no-store"
    return ApiKeyCreated(**ApiKeyOut.of(key).model_dump(), key=token)


@router.get("", responses=problem_responses(503), summary="List API keys, newest first")
async def list_api_keys(keys: ApiKeys, admin: AdminUser) -> ApiKeyList:
    return ApiKeyList(items=[ApiKeyOut.of(k) for k in await keys.list(admin)])


@router.get("/{key_id}", responses=problem_responses(404, 422, 503), summary="Read an API key")
async def get_api_key(key_id: UUID, keys: ApiKeys, admin: AdminUser) -> ApiKeyOut:
    return ApiKeyOut.of(await keys.get(admin, key_id))


@router.delete(
    "/{key_id}",
    responses=problem_responses(404, 422, 503),
    summary="Revoke an API key",
    description="Requests made with the key are refused from now on. The key stays listed, "
    "with when and by whom it was revoked; revoking it again changes nothing.",
)
async def revoke_api_key(key_id: UUID, keys: ApiKeys, admin: AdminUser) -> ApiKeyOut:
    return ApiKeyOut.of(await keys.revoke(admin, key_id))
