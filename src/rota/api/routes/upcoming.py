"""``GET /jobs/{job_id}/upcoming``: a job's next fires (UTC and its time zone, each marked
when its pause or a skip will record it Skipped) and the values that govern its runs with
where each comes from."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query
from pydantic import Field

from rota.api.deps import Jobs, Runtime
from rota.api.problems import problem_responses
from rota.api.schemas.common import ApiModel
from rota.api.security import requires
from rota.core.security import Role
from rota.services.jobs import MAX_PREVIEW

router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[requires(Role.VIEWER)])

DEFAULT_COUNT = 8


class UpcomingFireOut(ApiModel):
    at: datetime = Field(description="The fire time, UTC.")
    local: str = Field(description="The same instant in the job's time zone (ISO 8601).")
    skipped: Literal["paused", "skip_next"] | None = Field(
        description="Why it will be recorded Skipped instead of running, as things stand "
        "(the job is paused then; one of the next fires to skip); null: it runs."
    )


class EffectiveOut(ApiModel):
    value: Any = Field(description="The value its runs get (null: none, e.g. no timeout).")
    source: Literal["job", "job type", "server default", "worker default", "none"] = Field(
        description="Where it comes from: the job's own setting, its job type's declaration "
        "(@rota.job options a live worker registered), the server's or the worker's default."
    )


class UpcomingOut(ApiModel):
    time_zone: str
    fires: list[UpcomingFireOut] = Field(
        description="The next fires, oldest first; none for a disabled job or one with "
        "nothing left to fire (a one-time job that ran, past its end or its maxRuns)."
    )
    effective: dict[str, EffectiveOut] = Field(
        description="maxRetries, timeoutSeconds, retryDelaySeconds and concurrency (most "
        "runs of the type at once on one worker) with their sources."
    )


@router.get(
    "/{job_id}/upcoming",
    responses=problem_responses(404, 422, 503),
    summary="A job's next fires and the values that govern its runs",
)
async def upcoming(
    job_id: UUID,
    jobs: Jobs,
    runtime: Runtime,
    count: Annotated[int, Query(ge=1, le=MAX_PREVIEW)] = DEFAULT_COUNT,
) -> UpcomingOut:
    default_timeout = runtime.settings.worker.default_timeout_seconds
    job = await jobs.get_job(job_id)
    fires, values = await jobs.upcoming(job, count, default_timeout_seconds=default_timeout)
    zone = ZoneInfo(job.time_zone)
    return UpcomingOut(
        time_zone=job.time_zone,
        fires=[
            UpcomingFireOut(at=f.at, local=f.at.astimezone(zone).isoformat(), skipped=f.skipped)
            for f in fires
        ],
        effective={k: EffectiveOut(value=v.value, source=v.source) for k, v in values.items()},
    )
