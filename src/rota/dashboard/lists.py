"""The lists of executions and failed executions (and one execution's page): each row names
its job (one batched read per page), and a job is picked by name, not by its id."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from rota.api.deps import ApiRuntime
from rota.api.schemas.common import status_name
from rota.api.security import exception_view
from rota.api.strict import QUERY_MAX
from rota.api.views import parse_statuses
from rota.core.errors import NotFoundError, RotaError, ValidationError
from rota.core.models import FailedOccurrence, FailureType, Occurrence, OccurrenceStatus
from rota.core.query import narrow_failed, narrow_occurrences
from rota.core.records import FailedQuery, JobQuery, OccurrenceQuery, Page
from rota.core.security import ExceptionText
from rota.core.security import Role as CoreRole
from rota.dashboard import session
from rota.dashboard.display import job_names
from rota.dashboard.pages import (
    PAGE_SIZE,
    RESOLUTION_ACTIONS,
    STATUS_NAMES,
    Cursor,
    Runtime,
    User,
    live,
    not_found,
    page_url,
    paging,
    render,
    shows_job_data,
)
from rota.dashboard.querying import query_field, read_query
from rota.dashboard.session import DashboardUser
from rota.services.limits import waiting_for

router = APIRouter(include_in_schema=False, dependencies=[Depends(session.require_csrf)])

JobText = Annotated[str, Query(alias="job", max_length=200)]
PICKER_OPTIONS = 20
"""How many jobs the job picker offers for what was typed."""


# --- the job picker -----------------------------------------------------------------------------


def job_label(name: str, job_type: str) -> str:
    return name or job_type


async def pick_job(
    runtime: ApiRuntime, job_id: str, text: str
) -> tuple[UUID | None, str, str | None]:
    """The job a list is filtered by: the picker's id (set when a name was picked from its
    list), else the one job whose name or type the text names; with its label, and an error
    when the text names no job or several."""
    text = text.replace("\x00", "").strip()
    if job_id.strip():
        try:
            wanted = UUID(job_id.strip())
        except ValueError:
            return None, text, "That is no job id: showing every job."
        names = await job_names(runtime.store, [wanted])
        found = names.get(wanted)
        return wanted, found.name if found else text or job_id.strip(), None
    if not text:
        return None, "", None
    page = await runtime.store.list_jobs(JobQuery(search=text, limit=PICKER_OPTIONS))
    exact = [j for j in page.items if text.lower() in (j.display_name.lower(), j.job_type.lower())]
    matches = exact if exact else page.items
    if len(matches) == 1:
        return matches[0].id, job_label(matches[0].display_name, matches[0].job_type), None
    if not matches:
        return None, text, f"No job is named like “{text}”: showing every job."
    return None, text, f"{len(matches)} jobs match “{text}”: pick one from the list."


@router.get("/ui/jobs/options")
async def job_options(
    request: Request, user: User, runtime: Runtime, job: JobText = ""
) -> Response:
    """The job picker's ``<option>``s for what was typed (name, type or description)."""
    text = job.replace("\x00", "").strip()
    page = await runtime.store.list_jobs(JobQuery(search=text or None, limit=PICKER_OPTIONS))
    return render(request, user, "_job_options.html", {"jobs": page.items})


# --- executions -------------------------------------------------------------------------------


@router.get("/executions")
async def executions_page(
    request: Request,
    user: User,
    runtime: Runtime,
    status: Annotated[str, Query(max_length=100)] = "",
    job_id: Annotated[str, Query(alias="jobId", max_length=40)] = "",
    job_text: JobText = "",
    after: Annotated[str, Query(max_length=30)] = "",
    before: Annotated[str, Query(max_length=30)] = "",
    q: Annotated[str, Query(max_length=QUERY_MAX)] = "",
    cursor: Cursor = None,
) -> Response:
    """Executions newest first, by status, job, scheduled time (``after``/``before``: UTC,
    as a ``datetime-local`` field sends them) and the query filter (``q``)."""
    error = None
    try:
        statuses = parse_statuses([status]) if status else ()
        since, until = _utc_or_none(after), _utc_or_none(before)
    except (RotaError, ValueError):
        statuses, since, until = (), None, None
        error = "Unknown status or time: showing every status and time."
    job, label, job_error = await pick_job(runtime, job_id, job_text)
    found, query_error = read_query(q, "occurrences", shows_job_data(user, runtime))
    query = OccurrenceQuery(
        job_id=job,
        statuses=statuses,
        scheduled_after=since,
        scheduled_before=until,
        limit=PAGE_SIZE,
        cursor=cursor or None,
    )
    query = narrow_occurrences(query, found) if found else replace(query, nothing=bool(q.strip()))
    try:
        page = await runtime.store.list_occurrences(query)
    except ValidationError as exc:  # a data filter while job data is sealed
        page, query_error = Page([]), f"Query not applied: {exc.message}."
    shown = status_name(statuses[0]) if len(statuses) == 1 else status
    bulk_filter = {
        "jobId": str(job) if job else None,
        "status": [status_name(s) for s in statuses],
        "scheduledAfter": since.isoformat() if since else None,
        "scheduledBefore": until.isoformat() if until else None,
        "q": q.strip() or None,
    }
    context = {
        "occurrences": page.items,
        "selectable": user.can_operate,
        "bulk_filter": {k: v for k, v in bulk_filter.items() if v},
        "waiting": await _waiting(runtime, page.items),
        "names": await job_names(runtime.store, (o.job_id for o in page.items)),
        **paging(request, cursor, page.next_cursor),
        "filters": {
            "status": shown,
            "jobId": str(job) if job else "",
            "job": label,
            "after": after,
            "before": before,
            "q": q,
        },
        "query": query_field("occurrences", q),
        "statuses": STATUS_NAMES,
        "status_counts": await _status_counts(runtime, job),
        "status_urls": {
            s: page_url(request, status=s or None, cursor=None) for s in ["", *STATUS_NAMES]
        },
        "error": error or job_error or query_error,
        "live": live(
            request,
            types="occurrence.created,occurrence.updated",
            jobId=str(job) if job else "",
        ),
    }
    return render(request, user, "executions.html", context, fragments=("occurrences_table",))


async def _status_counts(runtime: ApiRuntime, job: UUID | None) -> dict[str, int]:
    """How many executions each status chip stands for (of the job filtered by, if any): the
    store's maintained counts, so no scan of the executions ("" -> all of them)."""
    counts = {
        status_name(s): n for s, n in (await runtime.store.count_occurrences(job_id=job)).items()
    }
    return {"": sum(counts.values()), **counts}


def _utc_or_none(text: str) -> datetime | None:
    """``2026-01-02T03:04`` (naive: UTC) -> an aware datetime; empty -> ``None``."""
    if not text.strip():
        return None
    value = datetime.fromisoformat(text.strip())
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@router.get("/executions/{occurrence_id}")
async def occurrence_page(
    request: Request, user: User, runtime: Runtime, occurrence_id: UUID
) -> Response:
    try:
        occurrence = await runtime.store.get_occurrence(occurrence_id)
    except NotFoundError:
        return not_found(request, user, "execution")
    lines = await runtime.store.occurrence_logs(occurrence_id, after=0, limit=1000)
    record = await _failed_record(runtime, occurrence)
    context = {
        "occ": occurrence,
        "exception_text": _exception_text(user, runtime),
        "status": status_name(occurrence.status),
        "lines": lines,
        "last_seq": lines[-1][0] if lines else 0,
        "failed_record": record,
        "names": await job_names(runtime.store, [occurrence.job_id]),
        "graph_run_id": await runtime.dependencies.graph_run_of(occurrence_id),
        "job_data": json.dumps(occurrence.job_data, indent=2, default=str)
        if shows_job_data(user, runtime)
        else None,
        "result": None
        if occurrence.result is None
        else json.dumps(occurrence.result, indent=2, default=str),
        "live": live(request, occurrenceId=str(occurrence_id)),
        "waiting_for": await _waiting_for(runtime, occurrence),
    }
    return render(request, user, "occurrence.html", context, fragments=("occurrence_summary",))


async def _waiting_for(runtime: ApiRuntime, occurrence: Occurrence) -> str | None:
    """The limit a Queued occurrence waits for on a worker (``None``: none, or unknown)."""
    return (await _waiting(runtime, [occurrence])).get(str(occurrence.id))


async def _waiting(runtime: ApiRuntime, occurrences: Iterable[Occurrence]) -> dict[str, str]:
    """Of these occurrences, the Queued ones a worker holds back for a limit -> the limit."""
    queued = [str(o.id) for o in occurrences if o.status is OccurrenceStatus.QUEUED]
    return await waiting_for(runtime.coordination, queued)


def _exception_text(user: DashboardUser, runtime: ApiRuntime) -> ExceptionText:
    """The API's rule: a Viewer sees no traceback when ``api.viewer_tracebacks`` is off."""
    return exception_view(CoreRole.parse(user.role.label), runtime.settings.api.viewer_tracebacks)


async def _failed_record(runtime: ApiRuntime, occurrence: Occurrence) -> FailedOccurrence | None:
    """The dead-letter record of a finished occurrence: among its job's records from around
    the time it ended."""
    if not occurrence.status.is_terminal or occurrence.status is OccurrenceStatus.COMPLETED:
        return None
    ended = occurrence.end_time or occurrence.created_at
    page = await runtime.store.list_failed(
        FailedQuery(
            job_id=occurrence.job_id,
            failed_after=ended - timedelta(minutes=5),
            failed_before=ended + timedelta(minutes=5),
            limit=500,
        )
    )
    return next((r for r in page.items if r.occurrence_id == occurrence.id), None)


@router.get("/ui/occurrences/{occurrence_id}/logs")
async def occurrence_log_lines(
    request: Request,
    user: User,
    runtime: Runtime,
    occurrence_id: UUID,
    after: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    """Log lines after ``after`` (appended to the tail by htmx)."""
    lines = await runtime.store.occurrence_logs(occurrence_id, after=after, limit=1000)
    return render(request, user, "_log_lines.html", {"lines": lines})


# --- failed executions ------------------------------------------------------------------------


@router.get("/failed")
async def failed_page(
    request: Request,
    user: User,
    runtime: Runtime,
    resolved: Annotated[str, Query(max_length=10)] = "no",
    failure_type: Annotated[str, Query(alias="failureType", max_length=40)] = "",
    job_id: Annotated[str, Query(alias="jobId", max_length=40)] = "",
    job_text: JobText = "",
    q: Annotated[str, Query(max_length=QUERY_MAX)] = "",
    cursor: Cursor = None,
) -> Response:
    try:
        types = (FailureType(failure_type),) if failure_type else ()
    except ValueError:
        types = ()
    job, label, job_error = await pick_job(runtime, job_id, job_text)
    found, query_error = read_query(q, "failed", shows_job_data(user, runtime))
    query = FailedQuery(
        job_id=job,
        failure_types=types,
        resolved={"yes": True, "no": False}.get(resolved),
        limit=PAGE_SIZE,
        cursor=cursor or None,
    )
    query = narrow_failed(query, found) if found else replace(query, nothing=bool(q.strip()))
    try:
        page = await runtime.store.list_failed(query)
    except ValidationError as exc:  # a data filter while job data is sealed
        page, query_error = Page([]), f"Query not applied: {exc.message}."
    bulk_filter: dict[str, Any] = {"failureType": [t.value for t in types]}
    if job:
        bulk_filter["jobId"] = str(job)
    if resolved in ("yes", "no"):
        bulk_filter["resolved"] = resolved == "yes"
    if q.strip():
        bulk_filter["q"] = q.strip()
    context = {
        "bulk_filter": bulk_filter,
        "records": page.items,
        "names": await job_names(runtime.store, (r.job_id for r in page.items)),
        "exception_text": _exception_text(user, runtime),
        **paging(request, cursor, page.next_cursor),
        "filters": {
            "resolved": resolved,
            "failureType": failure_type,
            "jobId": str(job) if job else "",
            "job": label,
            "q": q,
        },
        "query": query_field("failed", q),
        "error": job_error or query_error,
        "failure_types": list(FailureType),
        "actions": RESOLUTION_ACTIONS,
        "live": live(request, types="occurrence.updated"),
    }
    return render(request, user, "failed.html", context, fragments=("failed_table",))
