"""Jobs: create (one or many), list, read, change, delete, trigger, versions; cron preview;
tags.

Also the reference's shapes: ``POST /jobs/job`` (create) and ``PUT /jobs/job`` with
``{"id": …, "<field>": {"value": …, "isUpdated": true}}`` partial updates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Header, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import Field
from pydantic import ValidationError as PydanticValidationError

from rota.api import scopes
from rota.api.deps import ApiRuntime, Audit, Idempotent, Jobs, Runtime, StoreDep, lookup_of
from rota.api.paths import app_url
from rota.api.problems import problem_responses
from rota.api.routes.dependencies import dependencies_out
from rota.api.schemas.common import MAX_LIMIT, NO_NUL, ApiModel, UtcDatetime, unwrap_partial_updates
from rota.api.schemas.dependencies import DependencyIn
from rota.api.schemas.jobs import (
    BackfillOut,
    BackfillRequest,
    BulkCreate,
    BulkCreatedIds,
    JobCreate,
    JobList,
    JobOut,
    JobPage,
    JobPatch,
    JobVersionList,
    JobVersionOut,
    JobWarningOut,
    PauseRequest,
    Preview,
    ReferenceTriggerRequest,
    SkipRequest,
    TriggerRequest,
    item_spec,
)
from rota.api.schemas.occurrences import OccurrenceDetail
from rota.api.security import JobDataShown, OperatorUser, ViewerUser, requires
from rota.api.strict import KNOWN_QUERY, QUERY_MAX, list_filter
from rota.api.views import job_out
from rota.core.dependencies import Dependency
from rota.core.errors import ValidationError
from rota.core.models import Job
from rota.core.security import Role
from rota.services.audit import AuditNote, JobView
from rota.services.dependencies import JobDependencies
from rota.services.idempotency import HEADER, MAX_KEY, Answer, Idempotency, kept_headers
from rota.services.jobs import MAX_PREVIEW, JobService
from rota.services.jobwarnings import name_warnings

Headers = tuple[tuple[str, str], ...]

APPLIED = "Preference-Applied"
"""The answer header naming the ``Prefer`` preference it followed (RFC 7240)."""

REPLAYED = "Idempotent-Replayed"
"""The answer header that says whether it is a repeat's kept answer."""

JSON = "application/json"

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[requires(Role.VIEWER)])
schedules = APIRouter(prefix="/schedules", tags=["jobs"], dependencies=[requires(Role.VIEWER)])
tags = APIRouter(prefix="/tags", tags=["jobs"], dependencies=[requires(Role.VIEWER)])
AUDITED_IDS = 1000
"""A bulk create's audit entry names at most this many job ids."""

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=HEADER,
        max_length=MAX_KEY,
        description="A key of your choice (e.g. a UUID) that makes the creation idempotent: "
        "a repeat with the same key within 24 h gets the first answer "
        "(`Idempotent-Replayed: true`) instead of creating again; the same key with another "
        "body is refused (422), and a repeat while the first is still handled (409).",
    ),
]


Prefer = Annotated[
    str | None,
    Header(
        max_length=200,
        description="`return=minimal` (RFC 7240): the answer lists the new jobs' ids only "
        '(`{"count": …, "ids": […]}`, `Preference-Applied: return=minimal`), not every job '
        "in full: about a fifth less of the server's time per job, and much less to read, "
        "for large loads. Other preferences are ignored.",
    ),
]


def prefers_minimal(prefer: str | None) -> bool:
    """Whether a ``Prefer`` header (RFC 7240: preferences separated by commas, each
    ``name[=value]`` with ``;`` parameters, names case-insensitive) asks for
    ``return=minimal``."""
    if not prefer:
        return False
    for preference in prefer.split(","):
        name, _, value = preference.split(";", 1)[0].partition("=")
        if name.strip().lower() == "return" and value.strip().strip('"').lower() == "minimal":
            return True
    return False


def _audit_view(job: JobOut) -> dict[str, Any]:
    return job.model_dump(mode="json", by_alias=True, exclude={"warnings"})


@router.post(
    "",
    response_model=JobOut,
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(409, 413, 422, 503),
    summary="Create a job",
)
async def create_job(
    body: JobCreate,
    jobs: Jobs,
    response: Response,
    user: OperatorUser,
    idempotency: Idempotent,
    runtime: Runtime,
    request: Request,
    key: IdempotencyKey = None,
) -> Any:
    scopes.check_new_job(user, body.job_type, body.tags, depends_on=body.depends_on)

    async def handle() -> tuple[ApiModel, Headers]:
        # the job, its upstreams and its audit entry: one transaction (all or nothing)
        created = await jobs.create_job(
            body.to_spec(created_by=user.username),
            depends_on=_upstreams(body.depends_on),
            audit=AuditNote(
                actor=user.username, action="job.created", after=_job_view(runtime, jobs)
            ),
        )
        job = await _with_dependencies(runtime, out(created, jobs, response))
        job.warnings += await _name_warnings(runtime, created)
        response.headers["Location"] = app_url(request, f"/api/v1/jobs/{job.id}")
        return job, kept_headers(response.headers.items())

    return await _idempotent(idempotency, key, user.username, "jobs.create", body, handle)


async def _idempotent(
    idempotency: Idempotency,
    key: str | None,
    caller: str,
    operation: str,
    body: ApiModel,
    handle: Callable[[], Awaitable[tuple[ApiModel, Headers]]],
) -> Any:
    """``handle()``'s body (a 201, its headers set on the route's response), or with a
    ``key`` its answer kept for repeats with ``handle()``'s headers (a repeat gets the first
    answer, ``Idempotent-Replayed: true``)."""
    if key is None:
        made, _ = await handle()
        return made

    async def answered() -> Answer:
        made, headers = await handle()
        return Answer(201, made.model_dump_json(by_alias=True).encode(), headers)

    fingerprint = (
        body.canonical_json()
        if isinstance(body, BulkCreate)
        else body.model_dump_json(by_alias=True).encode()
    )
    answer = await idempotency.answer(key, caller, operation, fingerprint, answered)
    return Response(
        content=answer.body,
        status_code=answer.status,
        media_type=JSON,
        headers={**dict(answer.headers), REPLAYED: "true" if answer.replayed else "false"},
    )


def _upstreams(depends_on: list[DependencyIn] | None) -> list[dict[str, Any]]:
    return [{"jobId": d.job_id, "on": d.on} for d in depends_on or ()]


def _job_view(runtime: ApiRuntime, jobs: JobService) -> JobView:
    """A job's audit view as the API shows the job, from the values about to be stored and
    its upstreams (its dependents as they are)."""

    async def view(changed: Sequence[Job], upstreams: Sequence[Dependency]) -> dict[str, Any]:
        (job,) = changed
        service = runtime.dependencies
        now = await service.dependencies(job.id)
        deps = JobDependencies(job_id=job.id, depends_on=list(upstreams), dependents=now.dependents)
        shown = out(job, jobs)
        full = await dependencies_out(service, deps)
        shown.depends_on, shown.dependents = full.depends_on, full.dependents
        return _audit_view(shown)

    return view


def out(job: Any, jobs: JobService, response: Response | None = None) -> JobOut:
    """The job as the API shows it, with its warnings (from the worker registry as last
    read); with ``response``, its entity tag as the ``ETag``."""
    if response is not None:
        response.headers["ETag"] = job.etag
    return job_out(job, jobs)


IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        max_length=500,
        description="The job's ETag as last read: the change is refused (412) if the job has "
        "changed since (an edit, or an auto-disable).",
    ),
]


@router.post(
    "/job",
    response_model=JobOut,
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(409, 413, 422, 503),
    summary="Create a job (the reference's path; same as POST /jobs)",
)
async def create_job_reference(
    body: JobCreate,
    jobs: Jobs,
    response: Response,
    user: OperatorUser,
    idempotency: Idempotent,
    runtime: Runtime,
    request: Request,
    key: IdempotencyKey = None,
) -> Any:
    return await create_job(body, jobs, response, user, idempotency, runtime, request, key)


def unwrap_update(body: dict[str, Any]) -> tuple[UUID, dict[str, Any]]:
    """``{"id": …, "isActive": {"value": true, "isUpdated": true}, "priority": 3}`` -> the job
    id and the fields to change, by :func:`~rota.api.schemas.common.unwrap_partial_updates`
    (the same rules as ``PUT /failed-occurrences/{id}``): a ``{value, isUpdated}`` wrapper
    counts only when ``isUpdated`` is true; any other value (``jobData`` objects too) is a
    change as it is."""
    raw_id = body.get("id")
    if raw_id is None:
        raise ValidationError("id is required", field="id")
    try:
        job_id = UUID(str(raw_id))
    except ValueError:
        raise ValidationError("id must be a UUID", field="id") from None
    fields: dict[str, Any] = unwrap_partial_updates(
        {key: value for key, value in body.items() if key != "id"}
    )
    return job_id, fields


@router.put(
    "/job",
    responses=problem_responses(404, 409, 412, 413, 422, 503),
    summary="Change some fields of a job (the reference's {value, isUpdated} form)",
)
async def update_job_reference(
    jobs: Jobs,
    user: OperatorUser,
    response: Response,
    runtime: Runtime,
    body: Annotated[
        dict[str, Any],
        Body(
            description='{"id": …, "isActive": {"value": true, "isUpdated": true}}; plain '
            "values are accepted too. Setting isActive true re-enables an auto-disabled job."
        ),
    ],
    if_match: IfMatch = None,
) -> JobOut:
    job_id, fields = unwrap_update(body)
    try:
        patch = JobPatch.model_validate(fields)
    except PydanticValidationError as exc:
        # As if FastAPI had read the body: every error, each naming its field in camelCase.
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(errors) from None
    return await _update(jobs, job_id, patch, user, response, if_match, runtime)


async def _update(
    jobs: JobService,
    job_id: UUID,
    patch: JobPatch,
    user: OperatorUser,
    response: Response,
    if_match: str | None,
    runtime: Runtime,
) -> JobOut:
    current = await jobs.get_job(job_id)
    scopes.check_change(user, current, patch.job_type, patch.tags)
    before = await _with_dependencies(runtime, out(current, jobs))
    # the change, the new upstreams and the audit entry: one transaction (all or nothing)
    changed = await jobs.update_job(
        job_id,
        patch.changes(),
        by=user.username,
        if_match=if_match,
        depends_on=None if patch.depends_on is None else _upstreams(patch.depends_on),
        audit=AuditNote(
            actor=user.username,
            action="job.updated",
            before=_audit_view(before),
            after=_job_view(runtime, jobs),
        ),
    )
    shown = await _with_dependencies(runtime, out(changed, jobs, response))
    if changed.display_name.lower() != current.display_name.lower():
        shown.warnings += await _name_warnings(runtime, changed)
    return shown


async def _name_warnings(runtime: ApiRuntime, job: Job) -> list[JobWarningOut]:
    found = await name_warnings(lookup_of(runtime), job)
    return [JobWarningOut(code=w.code, message=w.message, job_ids=list(w.job_ids)) for w in found]


@router.post(
    "/bulk",
    response_model=JobList | BulkCreatedIds,
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(409, 413, 422, 503),
    summary="Create many jobs at once (all or none)",
)
async def create_jobs(
    body: BulkCreate,
    jobs: Jobs,
    response: Response,
    user: OperatorUser,
    idempotency: Idempotent,
    key: IdempotencyKey = None,
    prefer: Prefer = None,
) -> Any:
    """Up to 10,000 jobs in one transaction: all are created or none. Every refused job is
    named in the 422 problem's ``errors`` (``jobs[17].cronExpression``). The answer lists
    the created jobs in full, in the request's order; with ``Prefer: return=minimal``,
    their ids only."""
    minimal = prefers_minimal(prefer)
    scopes.check_new_jobs(user, body.jobs)

    for i, item in enumerate(body.jobs):
        if item.get("depends_on"):
            raise ValidationError(
                "not taken by the bulk create: set it with PUT /api/v1/jobs/{id}/dependencies",
                field=f"jobs[{i}].dependsOn",
            )

    async def listed(created: Sequence[Job], _: object) -> dict[str, Any]:
        return {"count": len(created), "ids": [str(job.id) for job in created[:AUDITED_IDS]]}

    async def handle() -> tuple[ApiModel, Headers]:
        # the jobs and the audit entry: one transaction
        created = await jobs.create_jobs(
            [item_spec(item, user.username) for item in body.jobs],
            field_prefix="jobs",
            audit=AuditNote(actor=user.username, action="job.bulk_created", after=listed),
        )
        if minimal:
            response.headers[APPLIED] = "return=minimal"
            ids = BulkCreatedIds(count=len(created), ids=[job.id for job in created])
            return ids, ((APPLIED, "return=minimal"),)
        # each job as the single create shows it (the same model, the same serialisation)
        return JobList(items=[out(job, jobs) for job in created]), ()

    return await _idempotent(idempotency, key, user.username, "jobs.bulk", body, handle)


@router.get(
    "",
    responses=problem_responses(400, 422, 503),
    summary="List jobs, newest first",
    dependencies=[KNOWN_QUERY],
)
async def list_jobs(
    jobs: Jobs,
    with_data: JobDataShown,
    caller: ViewerUser,
    search: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
    tag: Annotated[str | None, Query(max_length=100, pattern=NO_NUL)] = None,
    job_type: Annotated[str | None, Query(alias="jobType", max_length=200, pattern=NO_NUL)] = None,
    is_active: Annotated[bool | None, Query(alias="isActive")] = None,
    auto_disabled: Annotated[
        bool | None,
        Query(alias="autoDisabled", description="true: only jobs disabled by auto-disable."),
    ] = None,
    q: Annotated[
        str | None,
        Query(max_length=QUERY_MAX, description="Query filter: type:report worker:reports ..."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(max_length=500, pattern=NO_NUL)] = None,
) -> JobPage:
    where = list_filter(q, "jobs", with_data)
    for named in where.job_types:
        scopes.check_list_filter(caller, named)
    await jobs.refresh_workers()
    page = await jobs.list_jobs(
        search=search,
        tag=tag,
        job_type=scopes.check_list_filter(caller, job_type),
        is_active=is_active,
        auto_disabled=auto_disabled,
        limit=limit,
        cursor=cursor,
        where=where,
    )
    items = [out(job, jobs) for job in scopes.visible(caller, page.items)]
    if not with_data:
        items = [item.redacted() for item in items]
    return JobPage(items=items, next_cursor=page.next_cursor)


@router.get("/{job_id}", responses=problem_responses(404, 422, 503), summary="Read a job")
async def get_job(
    job_id: UUID, jobs: Jobs, response: Response, runtime: Runtime, with_data: JobDataShown
) -> JobOut:
    job = await jobs.get_job(job_id)
    await jobs.refresh_workers()
    shown = await _with_dependencies(runtime, out(job, jobs, response))
    return shown if with_data else shown.redacted()


async def _with_dependencies(runtime: ApiRuntime, shown: JobOut) -> JobOut:
    """One job's answer with its upstreams and dependents."""
    service = runtime.dependencies
    deps = await dependencies_out(service, await service.dependencies(shown.id))
    shown.depends_on, shown.dependents = deps.depends_on, deps.dependents
    return shown


@router.patch(
    "/{job_id}",
    responses=problem_responses(404, 409, 412, 413, 422, 503),
    summary="Change some fields of a job",
)
async def update_job(
    job_id: UUID,
    body: JobPatch,
    jobs: Jobs,
    response: Response,
    user: OperatorUser,
    runtime: Runtime,
    if_match: IfMatch = None,
) -> JobOut:
    return await _update(jobs, job_id, body, user, response, if_match, runtime)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(404, 412, 422, 503),
    summary="Delete a job (its occurrences are kept)",
)
async def delete_job(
    job_id: UUID, jobs: Jobs, user: OperatorUser, audit: Audit, if_match: IfMatch = None
) -> Response:
    before = out(await jobs.get_job(job_id), jobs)
    await jobs.delete_job(job_id, if_match=if_match)
    await audit.record(user.username, "job.deleted", "job", job_id, before=_audit_view(before))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{job_id}/backfill",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(404, 409, 422, 503),
    summary="Run a recurring job for the fires of a past window",
)
async def backfill_job(
    job_id: UUID, body: BackfillRequest, runtime: Runtime, user: OperatorUser, audit: Audit
) -> BackfillOut:
    """One run per fire of the job's cron expression in ``[from, to]`` (at most 1,000), except
    the fires it already has a run of; they run one after another, oldest first, whatever
    the job's overlap policy (docs/concepts.md#backfill)."""
    result = await runtime.backfill.backfill(job_id, body.start, body.end, reason=body.reason)
    out = BackfillOut(
        fires=result.fires,
        created=len(result.created),
        already_recorded=result.already_recorded,
        occurrence_ids=[o.id for o in result.created],
    )
    after = {"from": body.start.isoformat(), "to": body.end.isoformat(), "created": out.created}
    await audit.record(user.username, "job.backfilled", "job", job_id, after=after)
    return out


@router.post(
    "/{job_id}/pause",
    responses=problem_responses(404, 413, 422, 503),
    summary="Pause a job, with a note and an optional end",
)
async def pause_job(
    job_id: UUID,
    jobs: Jobs,
    runtime: Runtime,
    user: OperatorUser,
    body: Annotated[PauseRequest | None, Body()] = None,
) -> JobOut:
    """Its fires are recorded Skipped (reason ``paused``, with the note) instead of running,
    until it is resumed or ``until`` comes (then it resumes by itself). A paused job paused
    again gets the new note and end. Apart from ``isActive`` and auto-disable
    (docs/concepts.md#pause-and-skip)."""
    body = body or PauseRequest()
    job = await runtime.pausing.pause(job_id, by=user.username, note=body.note, until=body.until)
    return job_out(job, jobs)


@router.post(
    "/{job_id}/resume",
    responses=problem_responses(404, 409, 503),
    summary="Resume a paused job",
)
async def resume_job(job_id: UUID, jobs: Jobs, runtime: Runtime, user: OperatorUser) -> JobOut:
    """Its next fires run again. 409 if it is not paused. A job also disabled (``isActive``
    off, or auto-disabled) stays disabled."""
    job = await runtime.pausing.resume(job_id, by=user.username)
    return job_out(job, jobs)


@router.post(
    "/{job_id}/skip",
    responses=problem_responses(404, 413, 422, 503),
    summary="Skip a job's next fires",
)
async def skip_job(
    job_id: UUID, body: SkipRequest, jobs: Jobs, runtime: Runtime, user: OperatorUser
) -> JobOut:
    """Its next ``count`` fires (1..1000) are recorded Skipped (reason ``skip_next``, with the
    note) instead of running; ``skipNext`` on the job counts down. ``count`` 0 clears it."""
    job = await runtime.pausing.skip(job_id, body.count, by=user.username, note=body.note)
    return job_out(job, jobs)


@router.post(
    "/job/trigger",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(404, 409, 413, 422, 503),
    summary="Run a job now (the reference's path: the job id in the body)",
)
async def trigger_job_reference(
    body: ReferenceTriggerRequest, jobs: Jobs, user: OperatorUser, audit: Audit
) -> OccurrenceDetail:
    """``{"jobId": …, "reason": …}``: the same as ``POST /jobs/{jobId}/trigger``. Declared
    before it, so ``job`` is not read as a job id."""
    request = TriggerRequest(reason=body.reason, job_data=body.job_data, force=body.force)
    return await trigger_job(body.job_id, jobs, user, audit, request)


@router.post(
    "/{job_id}/trigger",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(404, 409, 413, 422, 503),
    summary="Run a job now",
)
async def trigger_job(
    job_id: UUID,
    jobs: Jobs,
    user: OperatorUser,
    audit: Audit,
    body: Annotated[TriggerRequest | None, Body()] = None,
) -> OccurrenceDetail:
    request = body or TriggerRequest()
    occurrence = await jobs.trigger(
        job_id, reason=request.reason, job_data=request.job_data, force=request.force
    )
    detail = OccurrenceDetail.of(occurrence)
    await audit.record(
        user.username,
        "job.triggered",
        "job",
        job_id,
        after={"occurrenceId": str(detail.id), "reason": request.reason, "force": request.force},
    )
    return detail


@router.get(
    "/{job_id}/versions",
    responses=problem_responses(404, 422, 503),
    summary="Earlier versions of a job",
)
async def job_versions(job_id: UUID, jobs: Jobs, with_data: JobDataShown) -> JobVersionList:
    items = [JobVersionOut.of(v) for v in await jobs.job_versions(job_id)]
    return JobVersionList(items=items if with_data else [item.redacted() for item in items])


@schedules.get(
    "/preview",
    responses=problem_responses(422),
    summary="The next fires of a cron expression or an interval",
)
async def preview(
    jobs: Jobs,
    cron: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    time_zone: Annotated[str, Query(alias="timeZone", max_length=200)] = "UTC",
    after: Annotated[UtcDatetime | None, Query(description="Default: now. Naive: UTC.")] = None,
    count: Annotated[int, Query(ge=1, le=MAX_PREVIEW)] = 5,
    every: Annotated[
        str | None,
        Query(max_length=40, description="An interval ('90m') instead of cron."),
    ] = None,
    start_at: Annotated[
        UtcDatetime | None,
        Query(alias="startAt", description="With every: the interval's alignment."),
    ] = None,
) -> Preview:
    """The next fires of ``cron`` (in ``timeZone``) or of ``every`` (aligned to ``startAt``,
    else to ``after``): one of the two."""
    return Preview(
        fires=jobs.preview(cron, time_zone, after, count, every=every, start_at=start_at)
    )


class TagOut(ApiModel):
    tag: str
    jobs: int = Field(description="Jobs carrying the tag.")


class TagList(ApiModel):
    items: list[TagOut] = Field(description="Every tag in use, by name.")


@tags.get("", responses=problem_responses(503), summary="Tags in use, with their job counts")
async def list_tags(store: StoreDep) -> TagList:
    """Every tag of any job with how many jobs carry it. List a tag's jobs with
    ``GET /jobs?tag=``."""
    return TagList(items=[TagOut(tag=t.tag, jobs=t.jobs) for t in await store.tags()])
