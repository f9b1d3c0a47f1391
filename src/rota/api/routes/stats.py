"""Statistics: the overview page's numbers and the throughput series, computed by aggregates
in the store (over indexed columns) and, for workers, from the live registry."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final

from fastapi import APIRouter, Query

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas.common import status_name
from rota.api.schemas.stats import (
    JobCounts,
    OccurrenceCounts,
    Overview,
    Throughput,
    ThroughputPointOut,
    WindowStats,
    WorkerCounts,
)
from rota.api.security import requires
from rota.core.errors import ValidationError
from rota.core.models import OccurrenceStatus, utcnow
from rota.core.security import Role

router = APIRouter(prefix="/stats", tags=["stats"], dependencies=[requires(Role.VIEWER)])

DAY: Final = timedelta(hours=24)
MAX_POINTS: Final = 1000
MIN_BUCKET_SECONDS: Final = 10
DEFAULT_BUCKETS: Final = {3600: 60, 86_400: 900, 604_800: 3600}
"""Window -> default bucket (seconds): 1h by minute, 24h by 15 minutes, 7d by hour."""
_DURATION: Final = re.compile(r"^\s*(\d{1,7})\s*([smhd]?)\s*$")
_UNITS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_duration(value: str, field: str) -> int:
    """``"90"``, ``"30s"``, ``"15m"``, ``"1h"``, ``"7d"`` -> seconds."""
    match = _DURATION.match(value)
    if match is None or int(match.group(1)) == 0:
        raise ValidationError(
            f"{field} must be a positive duration like 30s, 15m, 1h or 7d", field=field
        )
    return int(match.group(1)) * _UNITS[match.group(2)]


@router.get(
    "/overview",
    responses=problem_responses(503),
    summary="Counts for the overview: occurrences by status, jobs, the last 24 hours, workers",
)
async def overview(runtime: Runtime) -> Overview:
    now = utcnow()
    since = now - DAY
    stats = await runtime.store.overview(since)
    workers = await runtime.coordination.workers()
    finished = stats.completed + stats.failed
    rate = None if finished == 0 else round(100.0 * stats.completed / finished, 2)
    return Overview(
        occurrences=OccurrenceCounts(
            total=sum(stats.by_status.values()),
            by_status={status_name(s): stats.by_status.get(s, 0) for s in OccurrenceStatus},
        ),
        jobs=JobCounts(total=stats.jobs, active=stats.active_jobs),
        last24h=WindowStats(
            since=since,
            executions=finished + stats.cancelled,
            completed=stats.completed,
            failed=stats.failed,
            cancelled=stats.cancelled,
            success_rate=rate,
            average_duration_ms=stats.average_duration_ms,
        ),
        workers=WorkerCounts(
            groups=len({w.worker_id for w in workers}),
            instances=len(workers),
            capacity=sum(w.concurrency for w in workers),
            load=sum(w.current_load for w in workers),
        ),
        generated_at=now,
    )


@router.get(
    "/throughput",
    responses=problem_responses(422, 503),
    summary="Completed and failed occurrences per time bucket over a window",
)
async def throughput(
    runtime: Runtime,
    window: Annotated[
        str, Query(max_length=20, description="How far back: 1h, 24h, 7d (or e.g. 90m, 30d).")
    ] = "24h",
    bucket: Annotated[
        str | None,
        Query(
            max_length=20,
            description="Bucket width (e.g. 1m, 15m, 1h; at least 10s); default: 1m for 1h, "
            f"15m for 24h, 1h for 7d, else window/60. At most {MAX_POINTS} buckets.",
        ),
    ] = None,
) -> Throughput:
    window_seconds = parse_duration(window, "window")
    if window_seconds > 31 * 86_400:
        raise ValidationError("window may be at most 31d", field="window")
    if bucket is None:
        default = DEFAULT_BUCKETS.get(window_seconds, window_seconds // 60)
        bucket_seconds = max(MIN_BUCKET_SECONDS, default)
    else:
        bucket_seconds = parse_duration(bucket, "bucket")
    if bucket_seconds < MIN_BUCKET_SECONDS:
        raise ValidationError(f"bucket must be at least {MIN_BUCKET_SECONDS}s", field="bucket")
    if bucket_seconds > window_seconds:
        raise ValidationError("bucket may be at most the window", field="bucket")
    count = math.ceil(window_seconds / bucket_seconds)
    if count > MAX_POINTS:
        raise ValidationError(
            f"window/bucket gives {count} buckets; at most {MAX_POINTS}", field="bucket"
        )
    now = utcnow().timestamp()
    end_epoch = math.ceil(now / bucket_seconds) * bucket_seconds  # the last bucket holds now
    end = datetime.fromtimestamp(end_epoch, UTC)
    start = end - timedelta(seconds=count * bucket_seconds)
    points = await runtime.store.throughput(start, bucket_seconds, count)
    return Throughput(
        window_seconds=window_seconds,
        bucket_seconds=bucket_seconds,
        start=start,
        end=end,
        points=[
            ThroughputPointOut(start=p.start, completed=p.completed, failed=p.failed)
            for p in points
        ],
    )
