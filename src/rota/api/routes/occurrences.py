"""Occurrences: list by job, status and time; detail with status history; logs; cancel."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Query, Response
from fastapi import status as http

from rota.api.deps import Audit, Runtime, StoreDep
from rota.api.problems import problem_responses
from rota.api.schemas.common import MAX_FILTER_VALUES, MAX_LIMIT, FilterToken, UtcDatetime
from rota.api.schemas.occurrences import (
    DETAIL_LOG_LINES,
    CancelRequest,
    LogLine,
    LogPage,
    OccurrenceDetail,
    OccurrenceOut,
    OccurrencePage,
)
from rota.api.security import JobDataShown, OperatorUser, ShownException, requires
from rota.api.strict import KNOWN_QUERY, QUERY_MAX, list_filter
from rota.api.views import parse_statuses
from rota.core.models import OccurrenceStatus, utcnow
from rota.core.query import narrow_occurrences
from rota.core.records import OccurrenceQuery
from rota.core.security import Role
from rota.services import cancellation
from rota.services.limits import waiting_for
from rota.services.names import job_display_names

router = APIRouter(
    prefix="/occurrences", tags=["occurrences"], dependencies=[requires(Role.VIEWER)]
)

MAX_SEQ = 2**63 - 1
"""Log line numbers are 64-bit: a larger ``after`` is refused, not sent to the store."""


@router.get(
    "",
    responses=problem_responses(400, 422, 503),
    summary="List occurrences, newest first",
    dependencies=[KNOWN_QUERY],
)
async def list_occurrences(
    store: StoreDep,
    shown: ShownException,
    with_data: JobDataShown,
    job_id: Annotated[UUID | None, Query(alias="jobId")] = None,
    status: Annotated[
        list[FilterToken],
        Query(
            max_length=MAX_FILTER_VALUES,
            description="Status codes or names; repeat or comma-separate: 0,1 or failed.",
        ),
    ] = [],  # noqa: B006  (FastAPI copies query defaults)
    scheduled_after: Annotated[UtcDatetime | None, Query(alias="scheduledAfter")] = None,
    scheduled_before: Annotated[UtcDatetime | None, Query(alias="scheduledBefore")] = None,
    q: Annotated[
        str | None,
        Query(max_length=QUERY_MAX, description="Query filter: type:report status:failed ..."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> OccurrencePage:
    query = OccurrenceQuery(
        job_id=job_id,
        statuses=parse_statuses(status),
        scheduled_after=scheduled_after,
        scheduled_before=scheduled_before,
        limit=limit,
        cursor=cursor or None,
    )
    query = narrow_occurrences(query, list_filter(q, "occurrences", with_data))
    page = await store.list_occurrences(query)
    names = await job_display_names(store, (o.job_id for o in page.items))
    return OccurrencePage(
        items=[
            OccurrenceOut.of(o, shown).model_copy(update={"job_display_name": names.get(o.job_id)})
            for o in page.items
        ],
        next_cursor=page.next_cursor,
    )


@router.get(
    "/{occurrence_id}",
    responses=problem_responses(404, 422, 503),
    summary="An occurrence with its status history",
)
async def get_occurrence(
    occurrence_id: UUID,
    store: StoreDep,
    shown: ShownException,
    runtime: Runtime,
    with_data: JobDataShown,
) -> OccurrenceDetail:
    occurrence = await store.get_occurrence(occurrence_id)
    lines = await store.occurrence_logs(occurrence_id, after=0, limit=DETAIL_LOG_LINES)
    logs = [LogLine.of(seq, record) for seq, record in lines]
    waiting = None
    if occurrence.status is OccurrenceStatus.QUEUED:
        token = str(occurrence_id)
        waiting = (await waiting_for(runtime.coordination, [token])).get(token)
    detail = OccurrenceDetail.of(occurrence, shown, logs, waiting)
    detail.graph_run_id = await runtime.dependencies.graph_run_of(occurrence_id)
    names = await job_display_names(store, [occurrence.job_id])
    detail.job_display_name = names.get(occurrence.job_id)
    return detail if with_data else detail.redacted()


@router.get(
    "/{occurrence_id}/logs",
    responses=problem_responses(404, 422, 503),
    summary="An occurrence's log lines in order of arrival",
)
async def occurrence_logs(
    occurrence_id: UUID,
    store: StoreDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_SEQ, description="Lines with a higher seq than this.")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = MAX_LIMIT,
) -> LogPage:
    await store.get_occurrence(occurrence_id)
    lines = await store.occurrence_logs(occurrence_id, after=after, limit=limit)
    items = [LogLine.of(seq, record) for seq, record in lines]
    return LogPage(items=items, next_after=items[-1].seq if items else after)


@router.post(
    "/{occurrence_id}/cancel",
    responses={
        202: {
            "description": "Running: its worker was asked to cancel it.",
            "model": OccurrenceDetail,
        },
        **problem_responses(404, 409, 413, 422, 503),
    },
    summary="Cancel a queued or running occurrence",
)
async def cancel_occurrence(
    occurrence_id: UUID,
    runtime: Runtime,
    response: Response,
    user: OperatorUser,
    audit: Audit,
    body: Annotated[CancelRequest | None, Body()] = None,
) -> OccurrenceDetail:
    """A Queued occurrence is Cancelled at once (200). A Running one is cancelled through its
    worker (202): it ends Cancelled when the worker reports. One that has ended: 409."""
    reason = (body or CancelRequest()).reason
    outcome = await cancellation.cancel_occurrence(
        runtime.store,
        runtime.coordination,
        occurrence_id,
        reason=reason,
        now=utcnow(),
        events=runtime.jobs.events,
    )
    if outcome.requested:
        response.status_code = http.HTTP_202_ACCEPTED
    detail = OccurrenceDetail.of(outcome.occurrence)
    await audit.record(
        user.username,
        "occurrence.cancelled",
        "occurrence",
        occurrence_id,
        after={
            "jobId": str(detail.job_id),
            "status": detail.status,
            "requested": outcome.requested,
            "reason": reason,
        },
    )
    return detail
