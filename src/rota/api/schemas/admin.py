"""Bodies of the admin endpoints: buckets, scheduler instances, reliability counters."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from rota.api.schemas.common import ApiModel
from rota.core.records import BucketStateName, InstanceStateName


class BucketOut(ApiModel):
    bucket: int
    owner: str | None = Field(description="The scheduler instance holding its lease, if any.")
    state: BucketStateName = Field(
        description="Active: dispatched by its owner. Completing: the owner is stopping "
        "gracefully and releases it after its in-flight dispatch. Lost: no live lease (or "
        "its owner stopped heartbeating): another instance takes it over."
    )
    lease_expires_at: datetime | None
    lag: float = Field(
        description="Seconds the earliest due entry of the bucket is behind now (0: none overdue)."
    )
    indexed: int = Field(description="Entries of the bucket in the hot window (the index).")


class InstanceOut(ApiModel):
    instance_id: str
    state: InstanceStateName
    buckets: list[int] = Field(description="Buckets it holds leases on.")


class BucketsOut(ApiModel):
    bucket_count: int
    instances: list[InstanceOut] = Field(description="Live scheduler instances.")
    buckets: list[BucketOut]


class ReliabilityOut(ApiModel):
    """Counters of this server since it started (each server keeps its own)."""

    status_batches: int = Field(description="Status batches the tracker stored.")
    status_applied: int = Field(description="Status records applied.")
    status_ignored: int = Field(description="Status records ignored, all reasons.")
    late_reports: int = Field(
        description="Reports from an older attempt than the occurrence's (a superseded "
        "attempt, e.g. of a requeued zombie): ignored and counted, never applied."
    )
    heartbeats: int
    store_errors: int = Field(description="Failed store writes the tracker retried.")
    zombies_requeued: int
    zombies_failed: int
    probes_released: int = Field(description="Auto-disabled jobs let through for a probe run.")
