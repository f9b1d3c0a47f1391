"""``GET /admin/alerts``: this server's silence alerts (missed fires, a stalled dispatcher)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, cast
from uuid import UUID

from fastapi import APIRouter
from pydantic import Field

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas import ApiModel
from rota.services.silence import Alert, SilenceMonitor

router = APIRouter(prefix="/admin", tags=["admin"])


class AlertOut(ApiModel):
    kind: str = Field(description="missed_fire or dispatcher_stalled.")
    key: str = Field(description="job:<id> or dispatcher:<instance id>.")
    message: str
    raised_at: datetime
    resolved_at: datetime | None = None
    instance_id: str = Field(description="The server that raised it.")
    job_id: UUID | None = None
    job_type: str | None = None
    expected_at: datetime | None = Field(
        None, description="missed_fire: the first fire the job's cron expected in the window."
    )


class AlertsOut(ApiModel):
    active: list[AlertOut] = Field(description="Alerts raised and not resolved, newest first.")
    recent: list[AlertOut] = Field(description="Resolved alerts (the last 200), newest first.")
    checks: int = Field(description="Silence checks this server has made since it started.")


class _WithSilence(Protocol):
    @property
    def silence(self) -> SilenceMonitor: ...


def _out(alert: Alert) -> AlertOut:
    return AlertOut(
        kind=alert.kind,
        key=alert.key,
        message=alert.message,
        raised_at=alert.raised_at,
        resolved_at=alert.resolved_at,
        instance_id=alert.instance_id,
        job_id=alert.job_id,
        job_type=alert.job_type,
        expected_at=alert.expected_at,
    )


@router.get(
    "/alerts",
    responses=problem_responses(503),
    summary="Silence alerts of this server: cron jobs that missed fires, a stalled dispatcher",
)
async def alerts(runtime: Runtime) -> AlertsOut:
    monitor = cast(_WithSilence, runtime).silence
    return AlertsOut(
        active=[_out(a) for a in monitor.active],
        recent=[_out(a) for a in monitor.recent],
        checks=monitor.checks,
    )
