"""A job's upcoming fires as an operator reads them, and the values that will govern its
runs with where each comes from (the job, its job type's declaration, the server's default).

Pure: the caller gives the job (with its ``next_run_at``), what a worker declared about its
type, and the server's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rota.core.models import Job
from rota.core.planning import recurrence, runs_left

Source = Literal["job", "job type", "server default", "worker default", "none"]


@dataclass(frozen=True, slots=True)
class UpcomingFire:
    at: datetime
    """UTC."""
    skipped: Literal["paused", "skip_next"] | None = None
    """Why this fire will be recorded Skipped instead of running, as things stand."""


def upcoming_fires(job: Job, count: int) -> list[UpcomingFire]:
    """The job's next ``count`` fires from its ``next_run_at`` (none for a disabled job or one
    with nothing left to fire), within its end and its ``max_runs``; each marked when its
    pause or a skip of its next fires will record it Skipped."""
    first = job.next_run_at
    if not job.is_active or first is None or count <= 0:
        return []
    schedule = recurrence(job)
    left = runs_left(job)
    limit = count if left is None else min(count, left)
    times: list[datetime] = []
    fire: datetime | None = first
    while fire is not None and len(times) < limit:
        if job.end_at is not None and fire > job.end_at:
            break
        times.append(fire)
        fire = None if schedule is None else schedule.next_after(fire)
    skips = job.skip_next or 0
    out: list[UpcomingFire] = []
    for at in times:
        if job.paused_for(at):
            out.append(UpcomingFire(at, "paused"))
        elif skips > 0:
            skips -= 1
            out.append(UpcomingFire(at, "skip_next"))
        else:
            out.append(UpcomingFire(at))
    return out


@dataclass(frozen=True, slots=True)
class Effective:
    value: Any
    source: Source


def effective_values(
    job: Job,
    declared: Mapping[str, Any] | None,
    *,
    default_max_retries: int,
    default_timeout_seconds: float | None,
) -> dict[str, Effective]:
    """Max retries, timeout, retry delay and per-worker concurrency of the job's runs: the
    job's own value over its type's declaration (``@rota.job`` options a worker registered)
    over the server's default (retries) or the worker's (timeout: none unless configured)."""
    declared = declared or {}

    def pick(own: Any, key: str, fallback: Any, fallback_source: Source) -> Effective:
        if own is not None:
            return Effective(own, "job")
        if declared.get(key) is not None:
            return Effective(declared[key], "job type")
        return Effective(fallback, fallback_source if fallback is not None else "none")

    return {
        "maxRetries": pick(job.max_retries, "maxRetries", default_max_retries, "server default"),
        "timeoutSeconds": pick(
            job.timeout_seconds, "timeoutSeconds", default_timeout_seconds, "worker default"
        ),
        "retryDelaySeconds": pick(job.retry_delay_seconds, "retryDelaySeconds", None, "none"),
        "concurrency": pick(None, "concurrency", None, "none"),
    }
