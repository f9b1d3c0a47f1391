"""The overview page over a chosen time range (1 h, 24 h, 7 d): key figures, counts by status,
health, the latest unresolved failures, and the throughput charts' series."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse, Response

from rota.api.schemas.common import status_name
from rota.api.views import attention
from rota.core.models import OccurrenceStatus
from rota.core.records import FailedQuery
from rota.dashboard import session
from rota.dashboard.display import job_names
from rota.dashboard.pages import Runtime, User, live, page_url, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(session.require_csrf)])


@dataclass(frozen=True, slots=True)
class Range:
    key: str
    label: str
    seconds: int
    bucket_seconds: int
    bucket_label: str

    @property
    def buckets(self) -> int:
        return self.seconds // self.bucket_seconds


RANGES: Final = {
    r.key: r
    for r in (
        Range("1h", "1 h", 3600, 60, "minute"),
        Range("24h", "24 h", 86_400, 900, "15 minutes"),
        Range("7d", "7 d", 604_800, 3600, "hour"),
    )
}
"""The overview's time ranges, each with the width of its charts' buckets (the API's
``/stats/throughput`` defaults)."""
DEFAULT_RANGE: Final = "24h"
LATEST_FAILURES: Final = 5

RangeKey = Annotated[str, Query(alias="range", max_length=10)]


def _range(key: str) -> Range:
    return RANGES.get(key, RANGES[DEFAULT_RANGE])


@router.get("/")
async def overview(
    request: Request, user: User, runtime: Runtime, range_key: RangeKey = DEFAULT_RANGE
) -> Response:
    chosen = _range(range_key)
    now = datetime.now(UTC)
    stats = await runtime.store.overview(now - timedelta(seconds=chosen.seconds))
    by_name = {status_name(s): stats.by_status.get(s, 0) for s in OccurrenceStatus}
    finished = stats.completed + stats.failed
    workers = await runtime.coordination.workers()
    try:
        health = await runtime.health()
    except Exception as exc:
        health = {"runtime": f"error: {exc}"}
    warnings = (await attention(runtime)).warnings()
    unresolved = await runtime.store.list_failed(FailedQuery(resolved=False, limit=100))
    latest = unresolved.items[:LATEST_FAILURES]
    context = {
        "range": chosen,
        "ranges": [(r, page_url(request, range=r.key)) for r in RANGES.values()],
        "counts": by_name,
        "total": sum(by_name.values()),
        "ended": finished + stats.cancelled,
        "success_rate": None if finished == 0 else 100.0 * stats.completed / finished,
        "rate_note": f"of the executions that ended in the last {chosen.label}",
        "average_ms": stats.average_duration_ms,
        "average_note": f"over the executions completed in the last {chosen.label}",
        "instances": len(workers),
        "capacity": sum(w.concurrency for w in workers),
        "load": sum(w.current_load for w in workers),
        "health": health,
        "warnings": warnings,
        "unresolved": len(unresolved.items),
        "unresolved_more": unresolved.next_cursor is not None,
        "latest_failures": latest,
        "names": await job_names(runtime.store, (r.job_id for r in latest)),
        "live": live(request, types="occurrence.created,occurrence.updated,worker.changed"),
    }
    return render(request, user, "overview.html", context, fragments=("overview_stats",))


@router.get("/ui/series.json")
async def series(
    _request: Request, _user: User, runtime: Runtime, range_key: RangeKey = DEFAULT_RANGE
) -> Response:
    """Executions that ended Completed and Failed (or TimedOut) per bucket over the range,
    oldest first, empty buckets included (``x``: each bucket's start, epoch seconds)."""
    chosen = _range(range_key)
    step = chosen.bucket_seconds
    end = math.ceil(datetime.now(UTC).timestamp() / step) * step  # the last bucket holds now
    start = datetime.fromtimestamp(end - chosen.buckets * step, UTC)
    points = await runtime.store.throughput(start, step, chosen.buckets)
    data: dict[str, Any] = {
        "x": [int(p.start.timestamp()) for p in points],
        "completed": [p.completed for p in points],
        "failed": [p.failed for p in points],
        "bucket": step,
    }
    return JSONResponse(data)


@router.get("/ui/attention")
async def attention_banner(request: Request, user: User, runtime: Runtime) -> Response:
    """The banner of every page: dispatching stopped (who, when, why), silence alerts open;
    empty when nothing needs attention."""
    found = await attention(runtime)
    return render(request, user, "_attention.html", {"attention": found})
