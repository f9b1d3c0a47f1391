"""The audit log (Admin only): every change, who made it, when, before and after."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rota.api.deps import Audit, Lookup, StoreDep
from rota.api.problems import problem_responses
from rota.api.schemas.common import MAX_LIMIT, NO_NUL, UtcDatetime
from rota.api.schemas.security import AuditOut, AuditPage
from rota.api.security import requires
from rota.core.security import AuditQuery, Role
from rota.services.names import audit_names

router = APIRouter(prefix="/audit", tags=["audit"], dependencies=[requires(Role.ADMIN)])


@router.get(
    "",
    responses=problem_responses(422, 503),
    summary="Audit entries, newest first",
    description="Actions: job.created, job.bulk_created, job.updated, job.deleted, "
    "job.triggered, job.backfilled, job.paused, job.resumed, job.skip_set, occurrence.cancelled, "
    "failed_occurrence.updated, "
    "failed_occurrence.retried, failed_occurrence.deleted, user.created, user.updated, "
    "user.password_reset, user.deleted, password.changed, login.succeeded, login.failed, "
    "logout, and the dispatcher's control actions. Each entry names its resource "
    "(resourceName: a job's display name, a user's username) read for the page at once.",
)
async def list_audit(
    audit: Audit,
    store: StoreDep,
    lookup: Lookup,
    actor: Annotated[str | None, Query(max_length=100, pattern=NO_NUL)] = None,
    action: Annotated[str | None, Query(max_length=100, pattern=NO_NUL)] = None,
    resource_type: Annotated[
        str | None, Query(alias="resourceType", max_length=50, pattern=NO_NUL)
    ] = None,
    resource_id: Annotated[
        str | None, Query(alias="resourceId", max_length=200, pattern=NO_NUL)
    ] = None,
    after: Annotated[
        UtcDatetime | None, Query(description="Entries at or after this time.")
    ] = None,
    before: Annotated[UtcDatetime | None, Query(description="Entries before this time.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(max_length=500, pattern=NO_NUL)] = None,
) -> AuditPage:
    page = await audit.list(
        AuditQuery(
            actor=actor,
            action=action,
            resource_type=resource_type,
            resource_id=resource_id,
            after=after,
            before=before,
            limit=limit,
            cursor=cursor or None,
        )
    )
    names = await audit_names(page.items, store, store, lookup)
    return AuditPage(
        items=[AuditOut.of(e, names.get(e.id)) for e in page.items], next_cursor=page.next_cursor
    )
