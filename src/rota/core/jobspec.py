"""What a caller gives to create a job, and the pure helpers its checks share with the API.

Kept apart from :mod:`rota.services.jobs` so that the API's request bodies (and through them
the client, and ``import rota``) need no service, and no settings, to describe a job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from rota.core.models import (
    ConcurrencyPolicy,
    JobSource,
    JsonValue,
    MisfirePolicy,
    Priority,
    ZombiePolicy,
)

MAX_SECONDS: Final = 315_576_000
"""The longest duration a job setting takes (10 years): far beyond any real need, and
still a date when added to now."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What a caller gives to create a job; the service adds id, bucket, times and version."""

    job_type: str
    worker_id: str | None = None
    display_name: str = ""
    description: str = ""
    tags: Sequence[str] | str = ()
    """Tags, or one comma-separated string (``"a,b"``)."""
    job_data: JsonValue = None
    cron_expression: str | None = None
    time_zone: str = "UTC"
    execute_at: datetime | None = None
    """A naive datetime is taken as UTC."""
    is_active: bool = True
    priority: Priority | int = Priority.MEDIUM
    concurrency_policy: ConcurrencyPolicy | int = ConcurrencyPolicy.SKIP
    misfire_policy: MisfirePolicy | str = MisfirePolicy.FIRE_ONCE
    timeout_seconds: float | None = None
    max_retries: int | None = None
    retry_delay_seconds: float | None = None
    created_by: str | None = None
    source: JobSource = JobSource.API
    declared_spec: Mapping[str, JsonValue] | None = None
    auto_disable_threshold: int | None = None
    auto_disable_window_seconds: float | None = None
    auto_disable_cooldown_seconds: float | None = None
    zombie_policy: ZombiePolicy | str | None = None
    zombie_threshold_seconds: float | None = None
    interval_seconds: int | str | None = None
    """API ``every``: a duration (``"90m"``, ``"1h30m"``) or whole seconds."""
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    jitter_seconds: float | None = None
    misfire_window_seconds: float | None = None


def as_utc(moment: datetime) -> datetime:
    """The same instant in UTC; a naive datetime is taken as UTC."""
    if moment.tzinfo is UTC:  # already (a body's date-time is made UTC as it is read)
        return moment
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("date-time out of range once converted to UTC") from exc
