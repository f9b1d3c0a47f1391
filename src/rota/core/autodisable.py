"""Auto-disable (the circuit breaker of a failing job), pure rules.

A job's *consecutive failures* count its final failures (Failed with no retry left, TimedOut,
a zombie failed by its policy) in a row: a Completed occurrence resets the count to 0, and a
failure more than the window after the previous one starts a new count at 1. When the count
reaches the threshold the job is disabled (the store does it in the transaction that records
the failure) with a reason and a time. After an optional cooldown one probe run is let
through: its success re-enables the job, its failure disables it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.core.models import Job

REASON_HEAD_CHARS = 200
"""Characters of the last exception's first line kept in a disabled job's reason."""


@dataclass(frozen=True, slots=True)
class AutoDisableDefaults:
    """The global defaults a job's own settings (``None``: not set) fall back to."""

    threshold: int = 5
    """Consecutive failures that disable a job; 0: never."""
    window_seconds: float = 3600.0
    cooldown_seconds: float | None = None
    """``None``: no probe; a disabled job stays disabled until re-enabled by hand."""


@dataclass(frozen=True, slots=True)
class EffectiveAutoDisable:
    threshold: int
    window_seconds: float
    cooldown_seconds: float | None


def effective(job: Job, defaults: AutoDisableDefaults) -> EffectiveAutoDisable:
    """The job's settings with the defaults filled in."""
    return EffectiveAutoDisable(
        threshold=defaults.threshold
        if job.auto_disable_threshold is None
        else job.auto_disable_threshold,
        window_seconds=defaults.window_seconds
        if job.auto_disable_window_seconds is None
        else job.auto_disable_window_seconds,
        cooldown_seconds=defaults.cooldown_seconds
        if job.auto_disable_cooldown_seconds is None
        else job.auto_disable_cooldown_seconds,
    )


def next_count(count: int, last_failure_at: datetime | None, at: datetime, window: float) -> int:
    """The consecutive-failure count after a failure at ``at``: one more, or 1 when the
    previous failure is more than ``window`` seconds before it (or there is none). Reports
    that arrive out of order (``at`` before the last failure) continue the count."""
    if count <= 0 or last_failure_at is None:
        return 1
    if at - last_failure_at > timedelta(seconds=window):
        return 1
    return count + 1


def exception_head(exception: str | None) -> str:
    """The first line of an exception text, cut to :data:`REASON_HEAD_CHARS`."""
    if not exception:
        return "no exception recorded"
    head = exception.strip().splitlines()[0] if exception.strip() else ""
    if len(head) > REASON_HEAD_CHARS:
        head = head[: REASON_HEAD_CHARS - 1] + "…"
    return head or "no exception recorded"


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def disable_reason(count: int, window_seconds: float, exception: str | None) -> str:
    """``5 consecutive failures within 60 min; last: ValueError: boom``."""
    within = _duration(window_seconds)
    return f"{count} consecutive failures within {within}; last: {exception_head(exception)}"


def probe_failed_reason(exception: str | None) -> str:
    return f"probe run failed after the cooldown; last: {exception_head(exception)}"


def probe_due(job: Job, defaults: AutoDisableDefaults, now: datetime) -> bool:
    """Whether an auto-disabled job's cooldown has passed: one probe run may go through.
    Only recurring jobs are probed (a one-time job has no next fire to let through)."""
    if job.is_active or job.probing or job.disabled_at is None or job.disabled_reason is None:
        return False
    if not job.is_recurring:
        return False
    cooldown = effective(job, defaults).cooldown_seconds
    if cooldown is None:
        return False
    return now >= job.disabled_at + timedelta(seconds=cooldown)
