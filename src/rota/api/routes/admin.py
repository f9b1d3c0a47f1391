"""Administration: bucket ownership and health of the schedule's partitions; reliability
counters (late reports, zombies, probe runs); queue depths; the dispatchers' stop switch; the
effective configuration (secrets masked)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, cast

from fastapi import APIRouter, Body
from pydantic import Field, StringConstraints
from pydantic.alias_generators import to_camel

from rota.api.deps import Audit, Runtime
from rota.api.problems import problem_responses
from rota.api.schemas.admin import BucketOut, BucketsOut, InstanceOut, ReliabilityOut
from rota.api.schemas.common import NO_NUL, ApiModel, InputModel
from rota.api.security import OperatorUser, requires
from rota.core.models import DispatcherState, utcnow
from rota.core.redact import is_secret_name, mask_urls
from rota.core.security import Role
from rota.services.buckets import bucket_overview
from rota.services.control import switch_dispatcher
from rota.services.dispatcher import Dispatcher
from rota.services.probes import ProbeReleaser
from rota.services.tracker import StatusTracker
from rota.services.zombies import ZombieDetector

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[requires(Role.VIEWER)])


def _utc(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


@router.get(
    "/buckets",
    responses=problem_responses(503),
    summary="Every bucket's owner, state, lease, lag and index size; the live instances",
)
async def buckets(runtime: Runtime) -> BucketsOut:
    overview = await bucket_overview(
        runtime.coordination, runtime.index, runtime.settings.scheduler.bucket_count
    )
    return BucketsOut(
        bucket_count=overview.bucket_count,
        instances=[
            InstanceOut(instance_id=i.instance_id, state=i.state, buckets=i.buckets)
            for i in overview.instances
        ],
        buckets=[
            BucketOut(
                bucket=b.bucket,
                owner=b.owner,
                state=b.state,
                lease_expires_at=_utc(b.lease_expires_at),
                lag=round(b.lag, 3),
                indexed=b.indexed,
            )
            for b in overview.buckets
        ],
    )


class _Services(Protocol):
    """The runtime's services whose counters the reliability endpoint shows."""

    @property
    def tracker(self) -> StatusTracker: ...

    @property
    def zombies(self) -> ZombieDetector: ...

    @property
    def probes(self) -> ProbeReleaser: ...


@router.get(
    "/reliability",
    responses=problem_responses(503),
    summary="This server's reliability counters: late reports, zombies, probe runs",
)
async def reliability(runtime: Runtime) -> ReliabilityOut:
    services = cast(_Services, runtime)
    tracker = services.tracker.stats
    return ReliabilityOut(
        status_batches=tracker.batches,
        status_applied=tracker.applied,
        status_ignored=tracker.ignored,
        late_reports=tracker.late,
        heartbeats=tracker.heartbeats,
        store_errors=tracker.errors,
        zombies_requeued=services.zombies.requeued,
        zombies_failed=services.zombies.failed,
        probes_released=services.probes.released,
    )


# --- queues ----------------------------------------------------------------------------------


class QueueOut(ApiModel):
    name: str
    messages: int = Field(description="Messages waiting (ready) in the queue.")


class QueueList(ApiModel):
    items: list[QueueOut]


@router.get(
    "/queues",
    responses=problem_responses(503),
    summary="Messages waiting in each broker queue (job queues of live groups, status, logs, "
    "dead letters)",
)
async def queues(runtime: Runtime) -> QueueList:
    groups = sorted({w.worker_id for w in await runtime.coordination.workers()})
    depths = await runtime.broker.queue_depths(groups)
    return QueueList(items=[QueueOut(name=n, messages=depths[n]) for n in sorted(depths)])


# --- the dispatchers' stop switch ---------------------------------------------------------


class DispatcherOut(ApiModel):
    paused: bool = Field(description="true: no server dispatches fires (stopped).")
    reason: str | None
    by: str | None
    changed_at: datetime | None
    this_server_paused: bool | None = Field(
        description="Whether this server's dispatcher follows the switch yet (every server "
        "reads it within 2 s); null when this server runs no dispatcher."
    )


class StopRequest(InputModel):
    reason: Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=NO_NUL)] = Field(
        description="Why dispatching stops (shown to everyone)."
    )


class ResumeRequest(InputModel):
    reason: Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)] | None = None


class _Dispatching(Protocol):
    @property
    def dispatcher(self) -> Dispatcher: ...

    def apply_dispatcher_state(self, state: DispatcherState) -> None: ...


def _dispatcher_out(runtime: object, state: DispatcherState) -> DispatcherOut:
    local = cast(_Dispatching, runtime).dispatcher if hasattr(runtime, "dispatcher") else None
    return DispatcherOut(
        paused=state.paused,
        reason=state.reason,
        by=state.by,
        changed_at=state.changed_at,
        this_server_paused=None if local is None else local.paused_reason is not None,
    )


async def _switch(
    runtime: Runtime, audit: Audit, user: str, *, paused: bool, reason: str | None
) -> DispatcherOut:
    before = await runtime.store.dispatcher_state()
    state = await switch_dispatcher(
        runtime.store,
        paused=paused,
        reason=reason,
        by=user,
        now=utcnow(),
        events=runtime.jobs.events,
    )
    if hasattr(runtime, "apply_dispatcher_state"):  # this server at once; the others soon
        cast(_Dispatching, runtime).apply_dispatcher_state(state)
    action = "dispatcher.stopped" if paused else "dispatcher.resumed"
    await audit.record(
        user,
        action,
        "dispatcher",
        before={"paused": before.paused, "reason": before.reason},
        after={"paused": state.paused, "reason": state.reason},
    )
    return _dispatcher_out(runtime, state)


@router.get(
    "/dispatcher",
    responses=problem_responses(503),
    summary="Whether dispatching is stopped, why and since when",
)
async def dispatcher_state(runtime: Runtime) -> DispatcherOut:
    return _dispatcher_out(runtime, await runtime.store.dispatcher_state())


@router.post(
    "/dispatcher/stop",
    responses=problem_responses(413, 422, 503),
    summary="Stop dispatching on every server (no new fires are sent), with a reason",
)
async def stop_dispatcher(
    body: StopRequest, runtime: Runtime, user: OperatorUser, audit: Audit
) -> DispatcherOut:
    return await _switch(runtime, audit, user.username, paused=True, reason=body.reason)


@router.post(
    "/dispatcher/resume",
    responses=problem_responses(413, 422, 503),
    summary="Resume dispatching on every server",
)
async def resume_dispatcher(
    runtime: Runtime,
    user: OperatorUser,
    audit: Audit,
    body: Annotated[ResumeRequest | None, Body()] = None,
) -> DispatcherOut:
    reason = (body or ResumeRequest()).reason
    return await _switch(runtime, audit, user.username, paused=False, reason=reason)


# --- effective configuration --------------------------------------------------------------


@router.get(
    "/config",
    dependencies=[requires(Role.ADMIN)],
    responses=problem_responses(503),
    summary="The effective settings of this server, secrets masked",
)
async def config(runtime: Runtime) -> dict[str, Any]:
    """Every setting as this server runs with it (defaults, ``rota.toml`` and ``ROTA_…``
    variables merged). Values of fields named like a password, secret, token or key, and
    passwords inside URLs, are replaced by ``********``."""
    masked: dict[str, Any] = mask_secrets(runtime.settings.model_dump(mode="json"))
    masked["effectiveDatabaseUrl"] = mask_secrets({"url": runtime.settings.effective_database_url})[
        "url"
    ]
    masked["mode"] = "embedded" if runtime.settings.is_embedded else "distributed"
    return masked


MASK = "********"


def mask_secrets(value: Any, name: str = "") -> Any:
    """``value`` with secrets masked (the text of any field whose name says it is one; in
    URLs, passwords and secret query parameters: :mod:`rota.core.redact`) and its keys in
    camelCase."""
    if isinstance(value, dict):
        return {to_camel(str(k)): mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v, name) for v in value]
    if isinstance(value, str | bytes) and value and is_secret_name(name):
        return MASK
    if isinstance(value, str):
        return mask_urls(value, MASK)
    return value
