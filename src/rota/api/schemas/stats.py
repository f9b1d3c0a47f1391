"""Bodies of the statistics endpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from rota.api.schemas.common import ApiModel


class OccurrenceCounts(ApiModel):
    total: int
    by_status: dict[str, int] = Field(description="Status name -> occurrences, all time.")


class JobCounts(ApiModel):
    total: int
    active: int


class WindowStats(ApiModel):
    """What ended in the last 24 hours (by end time)."""

    since: datetime
    executions: int = Field(description="Completed + failed + cancelled.")
    completed: int
    failed: int = Field(description="Failed or TimedOut.")
    cancelled: int
    success_rate: float | None = Field(
        description="Percent of completed among completed and failed; null when none ended."
    )
    average_duration_ms: float | None = Field(description="Mean over the completed ones.")


class WorkerCounts(ApiModel):
    groups: int
    instances: int = Field(description="Live worker instances (online).")
    capacity: int = Field(description="Their concurrency together.")
    load: int = Field(description="Jobs they run now (as of their last heartbeats).")


class Overview(ApiModel):
    occurrences: OccurrenceCounts
    jobs: JobCounts
    last24h: WindowStats = Field(alias="last24h")
    workers: WorkerCounts
    generated_at: datetime


class ThroughputPointOut(ApiModel):
    start: datetime
    completed: int
    failed: int


class Throughput(ApiModel):
    window_seconds: int
    bucket_seconds: int
    start: datetime
    end: datetime
    points: list[ThroughputPointOut] = Field(description="Oldest first, empty buckets included.")
