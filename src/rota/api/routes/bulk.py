"""Bulk actions (Operator): ``POST /failed-occurrences/bulk`` (retry, resolve, reopen,
delete failed-run records) and ``POST /occurrences/bulk`` (cancel, re-run runs), on a list of
ids or on what a filter matches, at most 1,000 a call (``more`` says when the filter matched more);
``dryRun`` counts without acting. Each call is one audit entry with its filter and counts."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter
from pydantic import Field, StringConstraints, model_validator

from rota.api.deps import Audit, Runtime
from rota.api.problems import problem_responses
from rota.api.routes.failed import parse_failure_types
from rota.api.schemas.common import (
    MAX_FILTER_VALUES,
    NO_NUL,
    ApiModel,
    FilterToken,
    InputModel,
    UtcDatetime,
)
from rota.api.security import OperatorUser, requires
from rota.api.strict import QUERY_MAX, list_filter
from rota.api.views import parse_statuses
from rota.core.errors import ValidationError
from rota.core.models import utcnow
from rota.core.query import ListName, QueryFilter, narrow_failed, narrow_occurrences
from rota.core.records import FailedQuery, OccurrenceQuery
from rota.core.security import Role
from rota.services.bulk import MAX_BULK, BulkActions, BulkOutcome

failed_router = APIRouter(
    prefix="/failed-occurrences", tags=["failed occurrences"], dependencies=[requires(Role.VIEWER)]
)
runs_router = APIRouter(
    prefix="/occurrences", tags=["occurrences"], dependencies=[requires(Role.VIEWER)]
)

Text = Annotated[str, StringConstraints(max_length=2000, pattern=NO_NUL)]
Ids = Annotated[list[UUID], Field(min_length=1, max_length=MAX_BULK)]


class FailedFilter(InputModel):
    job_id: UUID | None = None
    failure_type: Annotated[list[FilterToken], Field(max_length=MAX_FILTER_VALUES)] = Field(
        default_factory=list, description="Failure types: timed_out, zombie, …"
    )
    resolved: bool | None = Field(
        None, description="Default: the open (unresolved) ones; for reopen, the resolved ones."
    )
    failed_after: UtcDatetime | None = None
    failed_before: UtcDatetime | None = None
    q: str | None = Field(
        None, max_length=QUERY_MAX, description="Query filter, as the list's ?q= (docs/api.md)."
    )


class RunFilter(InputModel):
    job_id: UUID | None = None
    status: Annotated[list[FilterToken], Field(max_length=MAX_FILTER_VALUES)] = Field(
        default_factory=list, description="Names or codes: Queued, Running, Failed, …"
    )
    scheduled_after: UtcDatetime | None = None
    scheduled_before: UtcDatetime | None = None
    q: str | None = Field(
        None, max_length=QUERY_MAX, description="Query filter, as the list's ?q= (docs/api.md)."
    )


class _Selection(InputModel):
    ids: Ids | None = Field(None, description="These, at most 1,000; or give filter.")
    dry_run: bool = Field(False, description="Count what would be acted on; change nothing.")

    @model_validator(mode="after")
    def _one_selection(self) -> Any:
        chosen = getattr(self, "filter", None)
        if (self.ids is None) == (chosen is None):
            raise ValueError("give ids or filter, one of them")
        return self


class FailedBulkRequest(_Selection):
    action: Literal["retry", "resolve", "reopen", "delete"]
    filter: FailedFilter | None = None
    note: Text | None = Field(None, description="resolve: the resolution note.")
    resolution_action: Annotated[str, StringConstraints(max_length=100, pattern=NO_NUL)] | None = (
        Field(None, description="resolve: a short action name (ignored, fixed-data, …).")
    )


class RunBulkRequest(_Selection):
    action: Literal["cancel", "rerun"]
    filter: RunFilter | None = None
    reason: Text | None = Field(None, description="Kept with each cancel or re-run.")
    force: bool = Field(
        False, description="rerun: run a Skip-policy job even while one of its runs is on."
    )
    per_second: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="rerun: pace the new runs, this many a second (each scheduled in turn and "
        "sent when due); default: all at once.",
    )
    start_after_seconds: float = Field(
        0.0,
        ge=0,
        le=30 * 86_400,
        description="rerun with perSecond: the first new run this many seconds from now (a "
        "caller continuing a paced replay passes what it has scheduled so far).",
    )


class BulkErrorOut(ApiModel):
    id: UUID
    message: str


class BulkOut(ApiModel):
    action: str
    matched: int = Field(description="Items selected (at most 1,000).")
    more: bool = Field(description="The filter matched more: call again for the rest.")
    done: int = Field(description="Items acted on (0 with dryRun).")
    dry_run: bool
    errors: list[BulkErrorOut] = Field(description="Items not done, each with why.")
    created: list[UUID] = Field(description="The runs a retry or a re-run queued.")

    @classmethod
    def of(cls, outcome: BulkOutcome) -> BulkOut:
        return cls(
            action=outcome.action,
            matched=outcome.matched,
            more=outcome.more,
            done=outcome.done,
            dry_run=outcome.dry_run,
            errors=[BulkErrorOut(id=e.id, message=e.message) for e in outcome.errors],
            created=outcome.created,
        )


def _filter(text: str | None, target: ListName) -> QueryFilter:
    """The filter's query (an Operator is shown job data); its errors name ``filter.q``."""
    try:
        return list_filter(text, target, with_data=True)
    except ValidationError as exc:
        raise ValidationError(exc.message, field="filter.q") from None


def _bulk(runtime: Runtime) -> BulkActions:
    jobs = runtime.jobs

    async def trigger(job_id: UUID, data: Any, reason: str, force: bool, delay: float) -> Any:
        return await jobs.trigger(
            job_id, reason=reason, job_data=data, force=force, delay_seconds=delay
        )

    store = runtime.store
    return BulkActions(store, store, runtime.coordination, jobs.events, trigger)


def _audit_after(body: _Selection, outcome: BulkOutcome) -> dict[str, Any]:
    chosen = getattr(body, "filter", None)
    return {
        "filter": None if chosen is None else chosen.model_dump(mode="json", by_alias=True),
        "ids": None if body.ids is None else [str(i) for i in body.ids],
        "matched": outcome.matched,
        "done": outcome.done,
        "errors": len(outcome.errors),
        "more": outcome.more,
    }


@failed_router.post(
    "/bulk",
    responses=problem_responses(413, 422, 503),
    summary="Retry, resolve, reopen or delete failed-run records: a selection or a filter",
)
async def failed_bulk(
    body: FailedBulkRequest, runtime: Runtime, user: OperatorUser, audit: Audit
) -> BulkOut:
    query = None
    if body.filter is not None:
        f = body.filter
        query = FailedQuery(
            job_id=f.job_id,
            failure_types=parse_failure_types(f.failure_type),
            resolved=(f.resolved if f.resolved is not None else body.action == "reopen"),
            failed_after=f.failed_after,
            failed_before=f.failed_before,
        )
        query = narrow_failed(query, _filter(f.q, "failed"))
    outcome = await _bulk(runtime).failed(
        body.action,
        ids=body.ids,
        query=query,
        note=body.note,
        resolution=body.resolution_action,
        by=user.username,
        now=runtime.jobs.now(),
        dry_run=body.dry_run,
    )
    if not body.dry_run:
        await audit.record(
            user.username,
            f"failed_occurrence.bulk_{body.action}",
            "failed_occurrence",
            after=_audit_after(body, outcome),
        )
    return BulkOut.of(outcome)


@runs_router.post(
    "/bulk",
    responses=problem_responses(413, 422, 503),
    summary="Cancel or re-run runs: a selection or a filter",
)
async def runs_bulk(
    body: RunBulkRequest, runtime: Runtime, user: OperatorUser, audit: Audit
) -> BulkOut:
    query = None
    if body.filter is not None:
        f = body.filter
        query = OccurrenceQuery(
            job_id=f.job_id,
            statuses=parse_statuses(f.status),
            scheduled_after=f.scheduled_after,
            scheduled_before=f.scheduled_before,
        )
        query = narrow_occurrences(query, _filter(f.q, "occurrences"))
    outcome = await _bulk(runtime).runs(
        body.action,
        ids=body.ids,
        query=query,
        reason=body.reason,
        force=body.force,
        per_second=body.per_second,
        start_after=body.start_after_seconds,
        now=utcnow(),
        dry_run=body.dry_run,
    )
    if not body.dry_run:
        await audit.record(
            user.username,
            f"occurrence.bulk_{body.action}",
            "occurrence",
            after=_audit_after(body, outcome),
        )
    return BulkOut.of(outcome)
