"""Administration: bucket ownership and health of the schedule's partitions."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas import BucketOut, BucketsOut, InstanceOut
from rota.services.buckets import bucket_overview

router = APIRouter(prefix="/admin", tags=["admin"])


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
