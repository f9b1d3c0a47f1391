"""What a due job does when the dispatcher fires it: pure rules, no I/O.

Given a job whose ``next_run_at`` has come, :func:`plan_fires` enumerates every fire from that
time up to now, decides which run and which are recorded Skipped (misfire policy, concurrency
policy, no worker), and computes the job's next fire.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from rota.core.cron import parse_cached
from rota.core.ids import new_id
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    MisfirePolicy,
    Occurrence,
    OccurrenceStatus,
    SkipReason,
    StatusChange,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanSettings:
    misfire_threshold: timedelta = timedelta(seconds=60)
    """A fire later than this is *missed* and follows the misfire policy; earlier, it runs late."""
    catch_up_cap: int = 100
    """``catch_up`` runs at most this many missed fires (the latest ones)."""
    max_recorded_misses: int = 1000
    """At most this many missed fires of one job are recorded one by one per dispatch; the
    schedule then jumps to the next fire after now."""
    default_max_retries: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FirePlan:
    occurrences: tuple[Occurrence, ...]
    """In fire order: Queued ones to run, Skipped ones with their reason."""
    next_run_at: datetime | None
    is_active: bool


def enumerate_fires(job: Job, now: datetime, limit: int) -> tuple[list[datetime], datetime | None]:
    """Fires from ``job.next_run_at`` up to ``now`` (at most ``limit``) and the next fire after
    them. One-time jobs fire once and have no next fire; a cron job with an ``execute_at``
    has no fire before it."""
    first = job.next_run_at
    if first is None or first > now:
        return [], first
    if job.cron_expression is None:
        return [first], None
    schedule = parse_cached(job.cron_expression, job.time_zone)
    if job.execute_at is not None and first < job.execute_at:
        # A cron job that starts at execute_at never fires before it, whatever next_run_at says.
        first = schedule.next_after(job.execute_at - _TICK)
        if first > now:
            return [], first
    fires = [first]
    nxt = schedule.next_after(first)
    while nxt <= now:
        if len(fires) >= limit:
            return fires, schedule.next_after(now)
        fires.append(nxt)
        nxt = schedule.next_after(nxt)
    return fires, nxt


def _choose_runs(fires: list[datetime], now: datetime, job: Job, s: PlanSettings) -> list[bool]:
    """For each fire, whether the misfire policy lets it run."""
    on_time = [now - f <= s.misfire_threshold for f in fires]
    if all(on_time):
        return on_time
    missed = [i for i, ok in enumerate(on_time) if not ok]
    runs = list(on_time)
    if job.misfire_policy is MisfirePolicy.CATCH_UP:
        for i in missed[-s.catch_up_cap :]:
            runs[i] = True
    elif job.misfire_policy is MisfirePolicy.FIRE_ONCE and not any(on_time):
        runs[missed[-1]] = True
    return runs


def plan_fires(
    job: Job,
    active: int,
    now: datetime,
    settings: PlanSettings,
    *,
    has_worker: bool = True,
    dispatched_at: datetime | None = None,
    horizon: datetime | None = None,
) -> FirePlan:
    """Plan the fires of a due job. ``active``: its occurrences Queued or Running now.
    The Skip policy, and a job that is ``probing``, run a fire only when none is active;
    BufferOne when at most one is (it then waits for it).
    ``has_worker``: whether any worker has ever declared the job's type (of its group, if it
    names one); if not, every fire is recorded Skipped ``no_worker``.
    ``dispatched_at``: record the Queued occurrences as handed to the broker at that time.
    ``horizon`` (default ``now``): plan the fires up to it, those after ``now`` ahead of
    their due time (the dispatch lead); each keeps its own fire time as ``scheduled_for``,
    and a fire not yet due is never missed, nor skipped as overlapping: it is left for
    when it is due (the job's next fire)."""
    until = now if horizon is None else max(now, horizon)
    fires, next_run = enumerate_fires(job, until, settings.max_recorded_misses)
    runs = _choose_runs(fires, now, job, settings)
    occurrences: list[Occurrence] = []
    running_now = active
    policy = ConcurrencyPolicy(job.concurrency_policy)
    limit, cancels = policy.limit, policy is ConcurrencyPolicy.CANCEL_OTHER
    for fire, run in zip(fires, runs, strict=True):
        reason: SkipReason | None = None
        if not run:
            reason = SkipReason.MISFIRE
        elif not has_worker:
            reason = SkipReason.NO_WORKER
        elif running_now > 0 and (
            job.probing or (limit is not None and running_now > limit) or (cancels and fire > now)
        ):
            if fire > now:
                # Not due yet (planned ahead by the dispatch lead): whether it overlaps (or,
                # CancelOther, cancels the one running) is decided when it is due, not now.
                # It stays the job's next fire.
                next_run = fire
                break
            # A probing job (auto-disabled, let through after its cooldown) runs one probe at
            # a time whatever its policy: the first to end decides, so later fires meanwhile
            # are Skipped as overlapping.
            reason = SkipReason.OVERLAP
        else:
            running_now += 1
        occurrences.append(
            new_occurrence(
                job,
                fire,
                now,
                settings,
                skip_reason=reason,
                dispatched_at=dispatched_at if reason is None else None,
            )
        )
    return FirePlan(
        occurrences=tuple(occurrences),
        next_run_at=next_run,
        is_active=job.is_active,
    )


def new_occurrence(
    job: Job,
    scheduled_for: datetime,
    now: datetime,
    settings: PlanSettings,
    *,
    skip_reason: SkipReason | None = None,
    trigger_reason: str | None = None,
    job_data: object = None,
    dispatched_at: datetime | None = None,
) -> Occurrence:
    """A new occurrence of ``job`` for the fire at ``scheduled_for``: Queued, or Skipped with
    ``skip_reason``; its creation is its first status change."""
    status = OccurrenceStatus.QUEUED if skip_reason is None else OccurrenceStatus.SKIPPED
    max_retries = job.max_retries if job.max_retries is not None else settings.default_max_retries
    skip = None if skip_reason is None else skip_reason.value
    change = StatusChange(
        timestamp=now, from_status=None, to_status=status, reason=skip or trigger_reason
    )
    return Occurrence(
        id=new_id(),
        job_id=job.id,
        job_type=job.job_type,
        worker_id=job.worker_id,
        status=status,
        scheduled_for=scheduled_for,
        due_at=scheduled_for,
        created_at=now,
        max_retries=max_retries,
        priority=job.priority,
        timeout_seconds=job.timeout_seconds,
        retry_delay_seconds=job.retry_delay_seconds,
        job_version=job.version,
        job_data=job.job_data if job_data is None else job_data,
        skip_reason=skip,
        trigger_reason=trigger_reason,
        end_time=now if skip_reason is not None else None,
        dispatched_at=dispatched_at,
        status_changes=(change,),
    )


def with_type_defaults(job: Job, description: Mapping[str, Any] | None) -> Job:
    """The job with what it leaves unset taken from its job type's declared defaults
    (``maxRetries``, ``timeoutSeconds`` as a worker registers them): job over job type over
    global settings."""
    if description is None:
        return job
    changes: dict[str, Any] = {}
    if job.max_retries is None and description.get("maxRetries") is not None:
        changes["max_retries"] = int(description["maxRetries"])
    if job.timeout_seconds is None and description.get("timeoutSeconds") is not None:
        changes["timeout_seconds"] = float(description["timeoutSeconds"])
    return replace(job, **changes) if changes else job


def first_run_at(job: Job, now: datetime) -> datetime | None:
    """The first fire of a new (or rescheduled) job: ``execute_at`` for a one-time job (even if
    past: it runs at once), else the first cron fire after ``now`` and, when the job has both
    (a cron job that starts at ``execute_at``), not before ``execute_at``."""
    return first_fire(job.cron_expression, job.time_zone, job.execute_at, now)


_TICK = timedelta(microseconds=1)


def is_fire(job: Job, at: datetime) -> bool:
    """Whether ``at`` is one of ``job``'s fires, by its schedule as it is now."""
    return first_fire(job.cron_expression, job.time_zone, job.execute_at, at - _TICK) == at


def first_fire(
    cron_expression: str | None, time_zone: str, execute_at: datetime | None, now: datetime
) -> datetime | None:
    """:func:`first_run_at` of a schedule given by its fields: with a cron expression, its
    first fire after ``now`` that is at or after ``execute_at`` (if given); else
    ``execute_at``."""
    if cron_expression is not None:
        after = now if execute_at is None or execute_at <= now else execute_at - _TICK
        return parse_cached(cron_expression, time_zone).next_after(after)
    return execute_at
