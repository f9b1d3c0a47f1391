"""What a due job does when the dispatcher fires it: pure rules, no I/O.

Given a job whose ``next_run_at`` has come, :func:`plan_fires` enumerates every fire from that
time up to now, decides which run and which are recorded Skipped (misfire policy, concurrency
policy, no worker), and computes the job's next fire.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import msgspec
from msgspec.structs import replace

from rota.core.cron import parse_cached
from rota.core.ids import new_id
from rota.core.intervals import IntervalSchedule, interval_anchor
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


class FirePlan(msgspec.Struct, frozen=True, kw_only=True):
    occurrences: tuple[Occurrence, ...]
    """In fire order: Queued ones to run, Skipped ones with their reason."""
    next_run_at: datetime | None
    is_active: bool
    skips_used: int = 0
    """How many of the job's ``skip_next`` fires it recorded Skipped (the store counts them
    down)."""
    run_count: int | None = None
    """The job's fires planned to run so far (its ``run_count`` after this plan): a recurring
    job's Queued fires are counted, Skipped ones are not."""
    sequential: bool = False
    """Its Queued fires run one after another, oldest first (each waits, as a Queue-policy
    fire does, until the one before it has ended): a Skip-policy job with several late fires
    due at once (a failover's backlog, ``catch_up``'s missed fires) runs them all, never two
    at the same time."""


class PlainFires(msgspec.Struct, frozen=True, kw_only=True):
    """What a store needs to fire a batch's *plain* one-time jobs by itself, set-based,
    exactly as :func:`plan_fires` would (the dispatcher's facts for the batch).

    A plain fire is that of a one-time job that is active and due by the horizon, not
    paused, with no ``skip_next`` and no jitter, under its ``max_runs``, on time (or late
    under a misfire policy that runs it), of a job type declared by a worker (of its group,
    if it names one), and with no occurrence Queued or Running. Its plan is one Queued
    occurrence at its ``next_run_at``, created ``now``, attempt 1, with the job's values
    over its type's declared defaults over the server's, uncounted; its job has no next
    fire. Every other job is planned by the planner."""

    now: datetime
    late_before: datetime
    """A fire before this is late by more than the server's misfire threshold."""
    default_max_retries: int
    declared: tuple[tuple[str, str], ...]
    """(job type, worker group): every type a worker of the group has ever declared."""
    type_defaults: tuple[tuple[str, int | None, float | None], ...]
    """(job type, ``maxRetries``, ``timeoutSeconds``) its live workers declare."""
    mark_skip: bool = False
    """A Skip-policy job's occurrence is inserted dispatched ``now`` (the embedded mode's
    ``mark_on_commit``)."""


class Recurrence(Protocol):
    """A recurring schedule: a cron (:class:`~rota.core.cron.CronSchedule`) or an interval
    (:class:`~rota.core.intervals.IntervalSchedule`)."""

    def next_after(self, moment: datetime) -> datetime: ...


def recurrence(job: Job) -> Recurrence | None:
    """The job's recurring schedule (``None``: a one-time job)."""
    if job.interval_seconds is not None:
        return IntervalSchedule(interval_anchor(job.start_at, job.created_at), job.interval_seconds)
    if job.cron_expression is not None:
        return parse_cached(job.cron_expression, job.time_zone)
    return None


def _start(job: Job) -> datetime | None:
    """No fire of a recurring job before this: its ``start_at``, and (the older form) the
    ``execute_at`` given with a cron expression."""
    legacy = job.execute_at if job.cron_expression is not None else None
    starts = [m for m in (job.start_at, legacy) if m is not None]
    return max(starts) if starts else None


def _within(job: Job, fire: datetime) -> datetime | None:
    """The fire, or ``None`` when it comes after the job's ``end_at``."""
    return None if job.end_at is not None and fire > job.end_at else fire


def runs_left(job: Job) -> int | None:
    """Fires the job may still run under its ``max_runs`` (``None``: no limit)."""
    if job.max_runs is None:
        return None
    return max(0, job.max_runs - (job.run_count or 0))


def enumerate_fires(job: Job, now: datetime, limit: int) -> tuple[list[datetime], datetime | None]:
    """Fires from ``job.next_run_at`` up to ``now`` (at most ``limit``) and the next fire after
    them. One-time jobs fire once and have no next fire; a recurring job has no fire before
    its start (``start_at``, or ``execute_at`` with a cron) nor after its ``end_at``."""
    first = job.next_run_at
    if first is None or first > now:
        return [], first
    schedule = recurrence(job)
    if schedule is None:
        return [first], None
    start = _start(job)
    if start is not None and first < start:
        # A job that starts later never fires before its start, whatever next_run_at says.
        first = schedule.next_after(start - _TICK)
        if first > now:
            return [], _within(job, first)
    if _within(job, first) is None:
        return [], None
    fires = [first]
    nxt = schedule.next_after(first)
    while nxt <= now and _within(job, nxt) is not None:
        if len(fires) >= limit:
            return fires, _within(job, schedule.next_after(now))
        fires.append(nxt)
        nxt = schedule.next_after(nxt)
    return fires, _within(job, nxt)


def _choose_runs(fires: list[datetime], now: datetime, job: Job, s: PlanSettings) -> list[bool]:
    """For each fire, whether the misfire policy lets it run (late by more than the job's own
    misfire window, else the server's threshold: missed)."""
    window = s.misfire_threshold
    if job.misfire_window_seconds is not None:
        window = timedelta(seconds=job.misfire_window_seconds)
    on_time = [now - f <= window for f in fires]
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
    rng: Callable[[], float] = random.random,
) -> FirePlan:
    """Plan the fires of a due job. ``active``: its occurrences Queued or Running now, all
    from before this plan: the runs really in progress.
    The Skip policy runs a due fire only when none is active, judged against those runs
    alone, never against a fire of this same plan: the fires due at once (late ones after a
    failover, ``catch_up``'s missed ones) all run, one after another (``sequential``).
    A job that is ``probing`` runs one fire at a time, this plan's included; BufferOne a
    fire when at most one is active, this plan's included (it then waits for it).
    ``has_worker``: whether any worker has ever declared the job's type (of its group, if it
    names one); if not, every fire is recorded Skipped ``no_worker``.
    ``dispatched_at``: record the Queued occurrences as handed to the broker at that time.
    ``horizon`` (default ``now``): plan the fires up to it, those after ``now`` ahead of
    their due time (the dispatch lead); each keeps its own fire time as ``scheduled_for``,
    and a fire not yet due is never missed, nor skipped as overlapping: it is left for
    when it is due (the job's next fire).
    A fire while the job is paused (before its ``paused_until``) is recorded Skipped
    ``paused``, and one of its ``skip_next`` fires Skipped ``skip_next`` (one counted in
    ``skips_used``), each with the note in its reason: before the no-worker and overlap rules,
    after the misfire policy (a missed fire counts no skip). Such a fire not due yet is left
    for when it is due: a resume or a new count may come meanwhile.
    ``max_runs``: once the job's Queued fires reach it, the job has no next fire.
    ``jitter_seconds``: each Queued fire is due ``rng() × jitter`` later (recorded as its
    ``jitter_seconds``); its ``scheduled_for`` stays the nominal fire time (its identity)."""
    until = now if horizon is None else max(now, horizon)
    left = runs_left(job)
    if left == 0:
        return FirePlan(
            occurrences=(), next_run_at=None, is_active=job.is_active, run_count=job.run_count
        )
    fires, next_run = enumerate_fires(job, until, settings.max_recorded_misses)
    runs = _choose_runs(fires, now, job, settings)
    occurrences: list[Occurrence] = []
    running_now = active
    policy = ConcurrencyPolicy(job.concurrency_policy)
    limit, cancels = policy.limit, policy is ConcurrencyPolicy.CANCEL_OTHER
    skips_left, skips_used = job.skip_next or 0, 0
    # Skip: a due fire is judged against the runs from before this plan only; the fires of
    # this plan that run wait for each other (sequential). A fire not due yet is judged with
    # them (left for its due time behind one of this plan): it may then run on time.
    own_runs_count = job.probing or policy is not ConcurrencyPolicy.SKIP
    queued = 0
    for fire, run in zip(fires, runs, strict=True):
        reason: SkipReason | None = None
        note: str | None = None
        if run and (job.paused_for(fire) or skips_left > 0) and fire > now:
            next_run = fire  # paused or skipped: decided when it is due
            break
        if not run:
            reason = SkipReason.MISFIRE
        elif job.paused_for(fire):
            reason, note = SkipReason.PAUSED, job.pause_note
        elif skips_left > 0:
            reason, note = SkipReason.SKIP_NEXT, job.skip_note
            skips_left, skips_used = skips_left - 1, skips_used + 1
        elif not has_worker:
            reason = SkipReason.NO_WORKER
        elif (busy := running_now if own_runs_count or fire > now else active) > 0 and (
            job.probing or (limit is not None and busy > limit) or (cancels and fire > now)
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
        jitter = _jitter(job, rng) if reason is None else None
        # the second and later runs of a Skip plan wait their turn: not sent at once
        waits = reason is None and not own_runs_count and queued > 0
        queued += reason is None
        occurrences.append(
            new_occurrence(
                job,
                fire,
                now,
                settings,
                skip_reason=reason,
                dispatched_at=dispatched_at
                if reason is None and jitter is None and not waits
                else None,
                note=note,
                jitter_seconds=jitter,
            )
        )
        if reason is None and left is not None:
            left -= 1
            if left == 0:  # its last run: nothing after it
                next_run = None
                break
    return FirePlan(
        occurrences=tuple(occurrences),
        next_run_at=next_run,
        is_active=job.is_active,
        skips_used=skips_used,
        run_count=_run_count(job, occurrences),
        sequential=not own_runs_count and queued > 1,
    )


def stored_policy(job: Job, plan: FirePlan) -> ConcurrencyPolicy:
    """The concurrency policy the store keeps with the plan's occurrences (what the sweep
    reads to hold one behind an earlier one): Queue for a sequential plan, else the job's."""
    return ConcurrencyPolicy.QUEUE if plan.sequential else ConcurrencyPolicy(job.concurrency_policy)


def _jitter(job: Job, rng: Callable[[], float]) -> float | None:
    """The random delay of a fire of ``job`` that runs (``None``: the job has no jitter)."""
    return round(rng() * job.jitter_seconds, 3) if job.jitter_seconds else None


def _run_count(job: Job, planned: list[Occurrence]) -> int | None:
    """The job's ``run_count`` after ``planned``: a recurring job's Queued fires counted."""
    queued = sum(1 for o in planned if o.skip_reason is None)
    if queued and recurrence(job) is not None:
        return (job.run_count or 0) + queued
    return job.run_count


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
    note: str | None = None,
    jitter_seconds: float | None = None,
) -> Occurrence:
    """A new occurrence of ``job`` for the fire at ``scheduled_for``: Queued, or Skipped with
    ``skip_reason``; its creation is its first status change, whose reason is the skip
    reason (with ``note`` after it: ``paused: <note>``) or the trigger reason. With
    ``jitter_seconds`` it is due that much after its fire time (and left for the sweep to
    send when due)."""
    status = OccurrenceStatus.QUEUED if skip_reason is None else OccurrenceStatus.SKIPPED
    max_retries = job.max_retries if job.max_retries is not None else settings.default_max_retries
    skip = None if skip_reason is None else skip_reason.value
    said = f"{skip}: {note}" if skip and note else skip
    change = StatusChange(
        timestamp=now, from_status=None, to_status=status, reason=said or trigger_reason
    )
    return Occurrence(
        id=new_id(),
        job_id=job.id,
        job_type=job.job_type,
        worker_id=job.worker_id,
        status=status,
        scheduled_for=scheduled_for,
        due_at=scheduled_for + timedelta(seconds=jitter_seconds or 0),
        jitter_seconds=jitter_seconds,
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
    past: it runs at once); for a recurring one its first fire after ``now`` and not before its
    start (``start_at``, or ``execute_at`` with a cron); ``None`` past its ``end_at`` or once
    it has run ``max_runs`` fires."""
    schedule = recurrence(job)
    if schedule is None:
        return job.execute_at
    if runs_left(job) == 0:
        return None
    start = _start(job)
    after = now if start is None or start <= now else start - _TICK
    return _within(job, schedule.next_after(after))


_TICK = timedelta(microseconds=1)


def is_fire(job: Job, at: datetime) -> bool:
    """Whether ``at`` is one of ``job``'s fires, by its schedule as it is now."""
    if recurrence(job) is None:
        return job.execute_at == at
    return first_run_at(replace(job, run_count=None), at - _TICK) == at


def first_fire(
    cron_expression: str | None, time_zone: str, execute_at: datetime | None, now: datetime
) -> datetime | None:
    """The first fire after ``now`` of a cron schedule given by its fields (not before
    ``execute_at``, if given); without a cron, ``execute_at``."""
    if cron_expression is not None:
        after = now if execute_at is None or execute_at <= now else execute_at - _TICK
        return parse_cached(cron_expression, time_zone).next_after(after)
    return execute_at
