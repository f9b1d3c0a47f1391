"""Administration: bucket ownership and health of the schedule's partitions; reliability
counters (late reports, zombies, probe runs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol, cast

from fastapi import APIRouter

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas import BucketOut, BucketsOut, InstanceOut, ReliabilityOut
from rota.api.security import requires
from rota.core.security import Role
from rota.services.buckets import bucket_overview
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
