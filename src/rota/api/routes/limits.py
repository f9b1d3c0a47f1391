"""Cluster-wide limits of job types (docs/concepts.md "Limits"): at most N concurrent
occurrences per job type (or per value of a field of the job data) and at most R starts per
second, across every worker. Read by every role, set by Admins."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Response, status

from rota.api.deps import Audit, Runtime, lookup_of
from rota.api.problems import problem_responses
from rota.api.schemas.limits import (
    LimitFields,
    LimitOut,
    LimitsIn,
    LimitsOut,
    Name,
    SlotOut,
    WaitingOut,
)
from rota.api.security import AdminUser, requires
from rota.core.limits import JobLimit
from rota.core.security import Role
from rota.services.limits import LimitOverview, LimitService
from rota.services.names import occurrence_job_names

router = APIRouter(prefix="/limits", tags=["limits"], dependencies=[requires(Role.VIEWER)])


def _of(job_type: str, key: str) -> bool:
    return key == job_type or key.startswith(job_type + "|")


async def _out(runtime: Runtime, overview: LimitOverview) -> LimitsOut:
    usage = overview.usage
    items = []
    for limit in overview.limits:
        slots = [(k, n) for k, n in usage.running.items() if _of(limit.job_type, k)]
        slots.sort(key=lambda s: (-s[1], s[0]))
        items.append(
            LimitOut(
                job_type=limit.job_type,
                max_concurrent=limit.max_concurrent,
                key=limit.key,
                rate_per_second=limit.rate,
                running=sum(n for _, n in slots),
                waiting=sum(1 for w in usage.waiting if _of(limit.job_type, w.label)),
                slots=[SlotOut(key=k, running=n) for k, n in slots[:100]],
            )
        )
    shown = usage.waiting[:1000]
    tokens = filter(None, (_uuid(w.token) for w in shown))
    jobs = await occurrence_job_names(tokens, runtime.store, lookup_of(runtime))
    waiting = []
    for w in shown:
        occurrence_id = _uuid(w.token)
        job_id, name = jobs.get(occurrence_id, (None, None)) if occurrence_id else (None, None)
        waiting.append(
            WaitingOut(
                occurrence_id=w.token,
                job_id=job_id,
                job_display_name=name,
                limit=w.label,
                since=w.since,
            )
        )
    return LimitsOut(limits=items, waiting=waiting)


def _uuid(token: str) -> UUID | None:
    try:
        return UUID(token)
    except ValueError:
        return None


def _service(runtime: Runtime) -> LimitService:
    return LimitService(runtime.store, runtime.coordination)


def _limit(body: LimitFields, job_type: str) -> JobLimit:
    return JobLimit(job_type, body.max_concurrent, body.key, body.rate_per_second)


@router.get(
    "",
    responses=problem_responses(503),
    summary="The limits, the slots held and the occurrences waiting",
)
async def list_limits(runtime: Runtime) -> LimitsOut:
    return await _out(runtime, await _service(runtime).overview())


async def _changed(
    runtime: Runtime, audit: Audit, user: str, target: str, after: list[JobLimit]
) -> LimitsOut:
    await audit.record(user, "limits.changed", "limits", target, after=[x.to_json() for x in after])
    return await _out(runtime, await _service(runtime).overview())


@router.put(
    "",
    responses=problem_responses(413, 422, 503),
    summary="Replace every limit (Admin)",
)
async def replace_limits(
    body: LimitsIn, runtime: Runtime, user: AdminUser, audit: Audit
) -> LimitsOut:
    limits = [_limit(x, x.job_type) for x in body.limits]
    after = await _service(runtime).replace(limits)
    return await _changed(runtime, audit, user.username, "*", after)


@router.put(
    "/{job_type}",
    responses=problem_responses(413, 422, 503),
    summary="Set the limits of one job type (Admin)",
)
async def put_limit(
    job_type: Annotated[Name, Path(description="The job type.")],
    body: LimitFields,
    runtime: Runtime,
    user: AdminUser,
    audit: Audit,
) -> LimitsOut:
    after = await _service(runtime).put(_limit(body, job_type))
    return await _changed(runtime, audit, user.username, job_type, after)


@router.delete(
    "/{job_type}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(404, 503),
    summary="Lift the limits of one job type (Admin)",
)
async def delete_limit(
    job_type: Annotated[Name, Path(description="The job type.")],
    runtime: Runtime,
    user: AdminUser,
    audit: Audit,
) -> Response:
    after = await _service(runtime).delete(job_type)
    await audit.record(
        user.username, "limits.changed", "limits", job_type, after=[x.to_json() for x in after]
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
