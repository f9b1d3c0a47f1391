"""``GET /admin/alerts``: the silence alerts (missed fires, a stalled dispatcher) of every live
server — this one's, and those the others publish in their heartbeats."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, cast
from uuid import UUID

from fastapi import APIRouter
from pydantic import Field, ValidationError

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas.common import ApiModel
from rota.api.security import requires
from rota.core.security import Role
from rota.services.silence import Alert, SilenceMonitor, shared_alerts

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[requires(Role.VIEWER)])


class AlertOut(ApiModel):
    kind: str = Field(description="missed_fire, fire_overdue or dispatcher_stalled.")
    key: str = Field(description="job:<id> or dispatcher:<instance id>.")
    message: str
    raised_at: datetime
    resolved_at: datetime | None = None
    instance_id: str = Field(description="The server that raised it.")
    job_id: UUID | None = None
    job_type: str | None = None
    expected_at: datetime | None = Field(
        None,
        description="missed_fire: the first fire the job's cron expected in the window; "
        "fire_overdue: the first fire not recorded.",
    )


class AlertsOut(ApiModel):
    active: list[AlertOut] = Field(
        description="Alerts raised and not resolved, of every live server, newest first."
    )
    recent: list[AlertOut] = Field(
        description="Alerts this server resolved (the last 200), newest first."
    )
    checks: int = Field(description="Silence checks this server has made since it started.")


class _WithSilence(Protocol):
    @property
    def silence(self) -> SilenceMonitor: ...

    @property
    def instance_id(self) -> str: ...


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
    wired = cast(_WithSilence, runtime)
    monitor = wired.silence
    active = [_out(a) for a in monitor.active]
    others = {
        name: info
        for name, info in (await runtime.coordination.instances()).items()
        if name != wired.instance_id
    }
    for shared in shared_alerts(others):
        try:
            active.append(AlertOut.model_validate(shared))
        except ValidationError:
            continue  # written by another version: left out
    active.sort(key=lambda a: a.raised_at, reverse=True)
    return AlertsOut(
        active=active,
        recent=[_out(a) for a in monitor.recent],
        checks=monitor.checks,
    )
