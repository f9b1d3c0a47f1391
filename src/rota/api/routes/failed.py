"""Failed occurrences (dead letters): list, read, resolve, retry, delete."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response, status

from rota.api.deps import Audit, Runtime, StoreDep
from rota.api.problems import problem_responses
from rota.api.schemas.common import MAX_FILTER_VALUES, MAX_LIMIT, FilterToken, UtcDatetime
from rota.api.schemas.failed import (
    FailedOccurrenceOut,
    FailedOccurrencePage,
    FailedOccurrenceUpdate,
)
from rota.api.schemas.occurrences import OccurrenceDetail
from rota.api.security import JobDataShown, OperatorUser, ShownException, requires
from rota.api.strict import KNOWN_QUERY, QUERY_MAX, list_filter
from rota.core.errors import ValidationError
from rota.core.models import FailureType
from rota.core.query import narrow_failed
from rota.core.records import FailedQuery
from rota.core.security import Role
from rota.services.deadletters import resolve_failed, retry_failed
from rota.services.names import job_display_names

router = APIRouter(
    prefix="/failed-occurrences",
    tags=["failed occurrences"],
    dependencies=[requires(Role.VIEWER)],
)


def _audit_view(record: FailedOccurrenceOut) -> dict[str, Any]:
    return record.model_dump(mode="json", by_alias=True, exclude={"raw_message", "exception"})


def parse_failure_types(values: list[str]) -> tuple[FailureType, ...]:
    """``["timed_out,zombie", "poison"]``: names, repeated or comma-separated."""
    found: dict[FailureType, None] = {}
    for value in values:
        for token in (t.strip() for t in value.split(",")):
            if not token:
                continue
            try:
                found[FailureType(token.lower())] = None
            except ValueError:
                names = ", ".join(t.value for t in FailureType)
                raise ValidationError(
                    f"unknown failure type {token!r} (one of {names})", field="failureType"
                ) from None
    return tuple(found)


@router.get(
    "",
    responses=problem_responses(400, 422, 503),
    summary="List failed occurrences, newest first",
    dependencies=[KNOWN_QUERY],
)
async def list_failed(
    store: StoreDep,
    shown: ShownException,
    with_data: JobDataShown,
    job_id: Annotated[UUID | None, Query(alias="jobId")] = None,
    failure_type: Annotated[
        list[FilterToken],
        Query(
            alias="failureType",
            max_length=MAX_FILTER_VALUES,
            description="Failure types; repeat or comma-separate: timed_out,zombie.",
        ),
    ] = [],  # noqa: B006  (FastAPI copies query defaults)
    resolved: Annotated[bool | None, Query()] = None,
    failed_after: Annotated[UtcDatetime | None, Query(alias="failedAfter")] = None,
    failed_before: Annotated[UtcDatetime | None, Query(alias="failedBefore")] = None,
    q: Annotated[
        str | None,
        Query(max_length=QUERY_MAX, description="Query filter: type:report status:failed ..."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> FailedOccurrencePage:
    query = FailedQuery(
        job_id=job_id,
        failure_types=parse_failure_types(failure_type),
        resolved=resolved,
        failed_after=failed_after,
        failed_before=failed_before,
        limit=limit,
        cursor=cursor or None,
    )
    query = narrow_failed(query, list_filter(q, "failed", with_data))
    page = await store.list_failed(query)
    names = await job_display_names(store, (r.job_id for r in page.items))
    items = [
        FailedOccurrenceOut.of(r, shown).model_copy(
            update={"job_display_name": names.get(r.job_id) if r.job_id else None}
        )
        for r in page.items
    ]
    return FailedOccurrencePage(
        items=items if with_data else [item.redacted() for item in items],
        next_cursor=page.next_cursor,
    )


@router.get(
    "/{failed_id}", responses=problem_responses(404, 422, 503), summary="A failed occurrence"
)
async def get_failed(
    failed_id: UUID, store: StoreDep, shown: ShownException, with_data: JobDataShown
) -> FailedOccurrenceOut:
    found = await store.get_failed(failed_id)
    record = FailedOccurrenceOut.of(found, shown)
    names = await job_display_names(store, [found.job_id])
    record.job_display_name = names.get(found.job_id) if found.job_id else None
    return record if with_data else record.redacted()


@router.put(
    "/{failed_id}",
    responses=problem_responses(404, 409, 413, 422, 503),
    summary="Resolve a failed occurrence (note, action), or reopen it",
)
async def update_failed(
    failed_id: UUID,
    body: FailedOccurrenceUpdate,
    runtime: Runtime,
    user: OperatorUser,
    audit: Audit,
) -> FailedOccurrenceOut:
    before = FailedOccurrenceOut.of(await runtime.store.get_failed(failed_id))
    record = await resolve_failed(
        runtime.store,
        failed_id,
        resolution_note=body.resolution_note,
        resolution_action=body.resolution_action,
        resolved=body.resolved,
        by=user.username,
        now=runtime.jobs.now(),
    )
    after = FailedOccurrenceOut.of(record)
    await audit.record(
        user.username,
        "failed_occurrence.updated",
        "failed_occurrence",
        failed_id,
        before=_audit_view(before),
        after=_audit_view(after),
    )
    return after


@router.post(
    "/{failed_id}/retry",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(404, 409, 422, 503),
    summary="Run the failed occurrence again as a new attempt (resolves the record)",
)
async def retry(
    failed_id: UUID, runtime: Runtime, user: OperatorUser, audit: Audit
) -> OccurrenceDetail:
    occurrence = await retry_failed(
        runtime.store,
        runtime.coordination,
        failed_id,
        by=user.username,
        now=runtime.jobs.now(),
        events=runtime.jobs.events,
    )
    await audit.record(
        user.username,
        "failed_occurrence.retried",
        "failed_occurrence",
        failed_id,
        after={"occurrenceId": str(occurrence.id), "attempt": occurrence.attempt},
    )
    return OccurrenceDetail.of(occurrence)


@router.delete(
    "/{failed_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(404, 422, 503),
    summary="Delete a failed-occurrence record (the occurrence is kept)",
)
async def delete_failed(
    failed_id: UUID, store: StoreDep, user: OperatorUser, audit: Audit
) -> Response:
    before = FailedOccurrenceOut.of(await store.get_failed(failed_id))
    await store.delete_failed(failed_id)
    await audit.record(
        user.username,
        "failed_occurrence.deleted",
        "failed_occurrence",
        failed_id,
        before=_audit_view(before),
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
