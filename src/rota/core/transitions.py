"""Applying a batch of status records to occurrences, pure: which record wins, what it changes,
the statistics it adds and the auto-disable streak it moves.

The store reads the occurrences a batch names (:class:`Current`, one per occurrence), runs
:func:`apply_records`, writes the outcome (:class:`StatusBatch`) in the same transaction, then
folds each failing job's outcomes into its :class:`Streak` (read under lock) and writes that.
Nothing here does I/O; the rules are tested directly in ``tests/unit/test_transitions.py``.

The rules (DESIGN.md §2, the store's contract in ``tests/contract/test_store*.py``):

- a record of an older attempt than the occurrence's is ``late``; one the transition table
  (:func:`~rota.core.models.can_transition`) forbids is ``transition``; one for an occurrence
  the store does not hold is ``unknown``: all three are ignored (counted, never applied);
- Running on Running of the same attempt is a heartbeat (only ``last_heartbeat`` moves; and
  the reporting instance is named the holder of an occurrence Running for the unknown holder,
  :data:`~rota.core.models.UNKNOWN_HOLDER`);
- Failed with a ``retry_at`` requeues the occurrence as the next attempt, due at ``retry_at``;
  Queued of a newer attempt (a zombie requeued) does the same, due at the record's time;
- a final status counts in the job's statistics; Completed and final failures (Failed,
  TimedOut) fold into its consecutive-failure streak in order (auto-disable);
- a worker's report of a run that arrives for a Queued occurrence (the worker folded
  ``Running`` into it) adds the implied Queued -> Running step to the history, at the run's
  start (:func:`folded_start`); the change applied is still the one record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from rota.core.autodisable import (
    AutoDisableDefaults,
    disable_reason,
    next_count,
    probe_failed_reason,
)
from rota.core.models import (
    UNKNOWN_HOLDER,
    WAITING_POLICIES,
    ConcurrencyPolicy,
    FailureType,
    OccurrenceStatus,
    StatusRecord,
    can_transition,
)
from rota.core.records import AppliedChange, IgnoredRecord

HEARTBEAT = "heartbeat"
"""What :func:`decide` returns for a Running report on an occurrence Running in that attempt."""
LATE = "late"
TRANSITION = "transition"
UNKNOWN = "unknown"

CURRENT_FIELDS = (
    "job_id",
    "job_type",
    "worker_id",
    "status",
    "attempt",
    "start_time",
    "duration_ms",
    "last_heartbeat",
    "scheduled_for",
    "concurrency_policy",
    "instance_id",
)
"""The occurrence fields :class:`Current` is built from, in its constructor's order."""

_RUNNING = OccurrenceStatus.RUNNING
_QUEUED = OccurrenceStatus.QUEUED
_FAILED = OccurrenceStatus.FAILED
_TERMINAL = frozenset(s for s in OccurrenceStatus if s.is_terminal)
_STATUSES = {int(s): s for s in OccurrenceStatus}
_FAILURE_TYPES = {t.value: t for t in FailureType}


class Current:
    """An occurrence's state while a status batch is applied to it, and the fields the batch
    changed (``changed``: occurrence field -> new value as stored, statuses as their codes)."""

    __slots__ = (
        "attempt",
        "changed",
        "concurrency_policy",
        "duration_ms",
        "instance_id",
        "job_id",
        "job_type",
        "last_heartbeat",
        "scheduled_for",
        "start_time",
        "status",
        "worker_id",
    )

    def __init__(
        self,
        job_id: UUID,
        job_type: str,
        worker_id: str | None,
        status: int,
        attempt: int,
        start_time: datetime | None,
        duration_ms: float | None,
        last_heartbeat: datetime | None,
        scheduled_for: datetime,
        concurrency_policy: int = int(ConcurrencyPolicy.SKIP),
        instance_id: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.job_type = job_type
        self.worker_id = worker_id
        self.status = _STATUSES[status]
        self.attempt = attempt
        self.start_time = start_time
        self.duration_ms = duration_ms
        self.last_heartbeat = last_heartbeat
        self.scheduled_for = scheduled_for
        """Part of the key: on PostgreSQL it names the time partition the row is in."""
        self.concurrency_policy = concurrency_policy
        """Its job's, as of its creation (Queue: its end may release the next one)."""
        self.instance_id = instance_id
        """The worker instance that reported it last (:data:`UNKNOWN_HOLDER`: a copy whose
        claim was lost reported it, its real holder unknown)."""
        self.changed: dict[str, Any] = {}


@dataclass(slots=True)
class JobStats:
    """What a batch adds to one job's statistics."""

    total: int = 0
    success: int = 0
    failure: int = 0
    duration_sum: float = 0.0
    duration_count: int = 0
    outcomes: list[tuple[bool, datetime, str | None]] = field(default_factory=list)
    """Completed (``False``) and final failures (``True``) in order, with their time and
    exception: the consecutive-failure count follows them (auto-disable)."""

    def count(
        self,
        status: OccurrenceStatus,
        duration_ms: float | None,
        at: datetime,
        exception: str | None,
    ) -> None:
        self.total += 1
        if status is OccurrenceStatus.COMPLETED:
            self.success += 1
            if duration_ms is not None:
                self.duration_sum += duration_ms
                self.duration_count += 1
            self.outcomes.append((False, at, None))
        elif status in (OccurrenceStatus.FAILED, OccurrenceStatus.TIMED_OUT):
            self.failure += 1
            self.outcomes.append((True, at, exception))

    @property
    def only_successes(self) -> bool:
        """Completed occurrences and no failure: the count goes back to 0 without a read."""
        return bool(self.outcomes) and not any(failed for failed, _, _ in self.outcomes)

    @property
    def any_failure(self) -> bool:
        return any(failed for failed, _, _ in self.outcomes)


def decide(current: Current, record: StatusRecord) -> tuple[OccurrenceStatus, int] | str:
    """What a status record does to an occurrence: ``(new status, new attempt)``,
    :data:`HEARTBEAT`, or the reason it is ignored (:data:`LATE`, :data:`TRANSITION`)."""
    if record.attempt < current.attempt:
        return LATE
    if record.status is _RUNNING and current.status is _RUNNING:
        return HEARTBEAT if record.attempt == current.attempt else TRANSITION
    if record.status is _FAILED and record.retry_at is not None:
        if can_transition(current.status, _FAILED):
            return _QUEUED, record.attempt + 1
        return TRANSITION
    if record.status is _QUEUED:
        if record.attempt > current.attempt and can_transition(current.status, _QUEUED):
            return _QUEUED, record.attempt
        return TRANSITION
    if not can_transition(current.status, record.status):
        return TRANSITION
    return record.status, record.attempt


def apply_change(
    current: Current, record: StatusRecord, to: OccurrenceStatus, attempt: int
) -> None:
    """Set the fields an applied record carries, on ``current`` and in its changed fields."""
    changed = current.changed
    current.status = to
    current.attempt = changed["attempt"] = attempt
    changed["status"] = int(to)
    if record.instance_id is not None:
        current.instance_id = changed["instance_id"] = record.instance_id
    if record.exception is not None or to is OccurrenceStatus.COMPLETED:
        changed["exception"] = record.exception  # a completed run clears an earlier attempt's
    if to is _QUEUED:  # a new attempt, due at its retry time
        changed["due_at"] = record.retry_at or record.timestamp
        changed["dispatched_at"] = changed["end_time"] = None
        current.start_time = current.last_heartbeat = current.duration_ms = None
        changed["start_time"] = changed["last_heartbeat"] = changed["duration_ms"] = None
        return
    if record.result is not None:
        changed["result"] = record.result
    if record.duration_ms is not None:
        current.duration_ms = changed["duration_ms"] = record.duration_ms
    if to is _RUNNING:
        current.start_time = current.last_heartbeat = record.timestamp
        changed["start_time"] = changed["last_heartbeat"] = record.timestamp
    if to in _TERMINAL:
        changed["end_time"] = record.timestamp
        if current.start_time is None and record.started_at is not None:
            current.start_time = changed["start_time"] = record.started_at
        elif current.start_time is None and current.duration_ms is not None:
            start = record.timestamp - timedelta(milliseconds=current.duration_ms)
            current.start_time = changed["start_time"] = start


_RAN = frozenset({OccurrenceStatus.COMPLETED, _FAILED, OccurrenceStatus.TIMED_OUT, _QUEUED})
"""What a worker's report after running an attempt takes a Queued occurrence to (Queued: the
failed attempt's retry)."""


def folded_start(current: Current, record: StatusRecord, to: OccurrenceStatus) -> datetime | None:
    """When a worker folded ``Running`` into its final report (a short run: both went out in
    one flush, the Running one dropped), the start of the run it implies, so the history shows
    Queued -> Running -> the end, each at its own time; else ``None``.

    That is a report with a duration from a worker instance (a run it measured) taking a
    Queued occurrence to Completed, Failed, TimedOut, or Queued again for a retry; the start
    is the folded Running report's time the report carries (``started_at``), else (a worker
    that does not send it) the report's time less the duration. Cancelled is left out: a
    worker cancels a Queued occurrence before it starts it."""
    if (
        current.status is not _QUEUED
        or to not in _RAN
        or (to is _QUEUED and record.status is not _FAILED)
        or record.duration_ms is None
        or record.instance_id is None
    ):
        return None
    if record.started_at is not None:  # the Running report's own time, sent along
        return record.started_at
    return record.timestamp - timedelta(milliseconds=record.duration_ms)


def change_reason(record: StatusRecord, to: OccurrenceStatus) -> str | None:
    """The reason the status history records for an applied change."""
    if record.status is _FAILED and to is _QUEUED:
        return "retry"
    if record.failure_type is not None:
        if to is OccurrenceStatus.UNKNOWN and record.exception:  # a zombie: why, kept here
            return f"{record.failure_type.value}: {record.exception}"
        return record.failure_type.value
    if to is OccurrenceStatus.CANCELLED:
        return record.exception  # why it was cancelled (the API's reason, or the worker's)
    return None


@dataclass(slots=True)
class StatusBatch:
    """The outcome of applying a batch in memory, ready to be written: the occurrences' changed
    fields (in ``current``), the status changes it appends to their histories (``changes``:
    occurrence_id, timestamp, from_status, to_status, attempt, reason; statuses as their
    codes) and the statistics by job id."""

    current: dict[UUID, Current]
    applied: list[AppliedChange] = field(default_factory=list)
    ignored: list[IgnoredRecord] = field(default_factory=list)
    heartbeats: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[UUID, JobStats] = field(default_factory=lambda: defaultdict(JobStats))

    def apply(self, record: StatusRecord) -> None:
        current = self.current.get(record.occurrence_id)
        if current is None:
            self.ignored.append(IgnoredRecord(record=record, reason=UNKNOWN))
            return
        outcome = decide(current, record)
        if outcome == HEARTBEAT:
            self.heartbeats += 1
            if current.last_heartbeat is None or record.timestamp > current.last_heartbeat:
                current.last_heartbeat = current.changed["last_heartbeat"] = record.timestamp
            if current.instance_id == UNKNOWN_HOLDER and record.instance_id:
                # the real holder of an attempt a copy reported for nobody: named, so that
                # its own registration and heartbeats tell whether it lives
                current.instance_id = current.changed["instance_id"] = record.instance_id
            return
        if isinstance(outcome, str):
            self.ignored.append(IgnoredRecord(record=record, reason=outcome))
            return
        to, attempt = outcome
        before = current.status
        started = folded_start(current, record, to)
        if started is not None:
            self.changes.append(
                {
                    "occurrence_id": record.occurrence_id,
                    "timestamp": started,
                    "from_status": int(_QUEUED),
                    "to_status": int(_RUNNING),
                    "attempt": record.attempt,
                    "reason": None,
                }
            )
        apply_change(current, record, to, attempt)
        self.applied.append(
            AppliedChange(
                occurrence_id=record.occurrence_id,
                job_id=current.job_id,
                from_status=before,
                to_status=to,
                attempt=attempt,
                job_type=current.job_type,
                worker_id=current.worker_id,
                instance_id=record.instance_id,
                queue_policy=current.concurrency_policy in WAITING_POLICIES,
            )
        )
        self.changes.append(
            {
                "occurrence_id": record.occurrence_id,
                "timestamp": record.timestamp,
                "from_status": int(_RUNNING if started is not None else before),
                "to_status": int(to),
                "attempt": attempt,
                "reason": change_reason(record, to),
            }
        )
        if to in _TERMINAL:
            self.stats[current.job_id].count(
                to, current.duration_ms, record.timestamp, record.exception
            )

    @property
    def failing_jobs(self) -> list[UUID]:
        """The jobs with a final failure in this batch, in id order: their streaks need a
        read (jobs with only successes are reset without one)."""
        return sorted(job_id for job_id, s in self.stats.items() if s.any_failure)


def apply_records(current: dict[UUID, Current], records: Iterable[StatusRecord]) -> StatusBatch:
    """Apply ``records`` in order to the occurrences in ``current`` (by id; changed in place)."""
    batch = StatusBatch(current=current)
    for record in records:
        batch.apply(record)
    return batch


def final_failures(
    changes: Sequence[dict[str, Any]],
) -> dict[UUID, tuple[FailureType, int, datetime]]:
    """The occurrences that reached a final failure among applied status changes (the
    ``changes`` of a :class:`StatusBatch`), with their failure type, attempt and time."""
    ends: dict[UUID, tuple[FailureType, int, datetime]] = {}
    for change in changes:
        to = change["to_status"]
        if to == int(OccurrenceStatus.FAILED):
            if change["from_status"] == int(OccurrenceStatus.UNKNOWN):
                default = FailureType.ZOMBIE
            else:
                default = FailureType.RETRIES_EXHAUSTED
        elif to == int(OccurrenceStatus.TIMED_OUT):
            default = FailureType.TIMED_OUT
        else:
            continue
        failure = _FAILURE_TYPES.get(change["reason"] or "", default)
        ends[change["occurrence_id"]] = (failure, change["attempt"], change["timestamp"])
    return ends


@dataclass(slots=True)
class Streak:
    """A job's auto-disable state while a batch's outcomes are folded into it."""

    threshold: int
    window: float
    count: int
    last_failure_at: datetime | None
    is_active: bool
    next_run_at: datetime | None
    probing: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    disabled_now: bool = False

    @classmethod
    def of(
        cls,
        defaults: AutoDisableDefaults,
        *,
        threshold: int | None,
        window_seconds: float | None,
        consecutive_failures: int,
        last_failure_at: datetime | None,
        is_active: bool,
        next_run_at: datetime | None,
        probing: bool,
        disabled_reason: str | None,
        disabled_at: datetime | None,
    ) -> Streak:
        """The streak of a job as stored, its unset threshold and window (``None``) taken
        from ``defaults``."""
        return cls(
            threshold=defaults.threshold if threshold is None else threshold,
            window=defaults.window_seconds if window_seconds is None else window_seconds,
            count=consecutive_failures,
            last_failure_at=last_failure_at,
            is_active=is_active,
            next_run_at=next_run_at,
            probing=probing,
            disabled_reason=disabled_reason,
            disabled_at=disabled_at,
        )

    def fold(self, failed: bool, at: datetime, exception: str | None) -> None:
        """One outcome: a success resets the count (and ends a probe: enabled for good); a
        failure counts (:func:`~rota.core.autodisable.next_count`) and, on an active job,
        disables it when probing or when the count reaches the threshold (0: never)."""
        if not failed:
            self.count = 0
            if self.probing:  # the probe succeeded: enabled for good
                self.probing = False
                self.disabled_reason = self.disabled_at = None
            return
        self.count = next_count(self.count, self.last_failure_at, at, self.window)
        if self.last_failure_at is None or at > self.last_failure_at:
            self.last_failure_at = at
        if not self.is_active:
            return
        if self.probing:
            reason = probe_failed_reason(exception)
        elif self.threshold > 0 and self.count >= self.threshold:
            reason = disable_reason(self.count, self.window, exception)
        else:
            return
        self.is_active = self.probing = False
        self.next_run_at = None
        self.disabled_reason = reason
        self.disabled_at = at
        self.disabled_now = True

    def fold_all(self, outcomes: Iterable[tuple[bool, datetime, str | None]]) -> None:
        """:meth:`fold` each of a batch's outcomes (:attr:`JobStats.outcomes`) in order."""
        for failed, at, exception in outcomes:
            self.fold(failed, at, exception)
