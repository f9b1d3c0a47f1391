"""Domain records: jobs, occurrences, failed occurrences, and the records that travel the wire.

Records are frozen dataclasses; change them with :func:`dataclasses.replace`. The ones every
job's path builds (:class:`Job`, :class:`Occurrence`, :class:`StatusChange`) and the three
that travel the wire (:class:`JobMessage`, :class:`StatusRecord`, :class:`LogRecord`, which
:mod:`rota.core.wire` decodes and encodes) are frozen msgspec Structs, built and copied in C
(a tenth of a frozen dataclass's cost); change them with :func:`msgspec.structs.replace`.
All datetimes are timezone-aware UTC. Status codes are part of the API and wire format
(DESIGN.md §2).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec
from msgspec import Meta

JsonValue = Any
"""Anything :mod:`orjson` can encode."""
AwareDatetime = Annotated[datetime, Meta(tz=True)]
"""A datetime that must carry its time zone when read from the wire."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class OccurrenceStatus(enum.IntEnum):
    QUEUED = 0
    RUNNING = 1
    COMPLETED = 2
    FAILED = 3
    CANCELLED = 4
    TIMED_OUT = 5
    UNKNOWN = 6
    SKIPPED = 7

    @property
    def is_terminal(self) -> bool:
        return not TRANSITIONS[self]

    @property
    def is_active(self) -> bool:
        """Queued or Running: the occurrence still holds its job's turn."""
        return self in (OccurrenceStatus.QUEUED, OccurrenceStatus.RUNNING)


S = OccurrenceStatus

TRANSITIONS: Mapping[OccurrenceStatus, frozenset[OccurrenceStatus]] = {
    # A worker may pack Running and the final status into one flush, so the tracker can see
    # Queued followed directly by a final status.
    S.QUEUED: frozenset({S.RUNNING, S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.UNKNOWN}),
    # Running -> Queued is a retry: the next attempt waits for its due time.
    S.RUNNING: frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.UNKNOWN, S.QUEUED}),
    # A zombie is requeued as a new attempt, or failed, by its job's policy.
    S.UNKNOWN: frozenset({S.QUEUED, S.FAILED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.TIMED_OUT: frozenset(),
    S.SKIPPED: frozenset(),
}
"""The one table of allowed status transitions. Anything else is ignored and counted."""


def can_transition(current: OccurrenceStatus, new: OccurrenceStatus) -> bool:
    return new in TRANSITIONS[current]


class Priority(enum.IntEnum):
    VERY_LOW = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4


class ConcurrencyPolicy(enum.IntEnum):
    """What a fire does while an earlier occurrence of the same job is Queued or Running."""

    SKIP = 0
    """Record the fire as Skipped (reason ``overlap``) and do not run it."""
    QUEUE = 1
    """Record it Queued; it is dispatched once the earlier one has finished (one at a time)."""
    ALLOW_ALL = 2
    """Run it at once, alongside the earlier ones (no limit)."""
    BUFFER_ONE = 3
    """Queue it if none waits yet (as ``QUEUE``), else record it Skipped (``overlap``): at
    most one run and one waiting."""
    CANCEL_OTHER = 4
    """Cancel the earlier ones (queued or running: reason ``superseded``) and run this one."""

    @property
    def waits(self) -> bool:
        """Whether a fire waits for the job's earlier occurrences to end before it is sent."""
        return self in (ConcurrencyPolicy.QUEUE, ConcurrencyPolicy.BUFFER_ONE)

    @property
    def limit(self) -> int | None:
        """How many occurrences may be active (Queued or Running) when a fire comes for it
        not to be skipped (``None``: no limit)."""
        return _OVERLAP_LIMITS.get(self)


_OVERLAP_LIMITS = {ConcurrencyPolicy.SKIP: 0, ConcurrencyPolicy.BUFFER_ONE: 1}
WAITING_POLICIES = (ConcurrencyPolicy.QUEUE, ConcurrencyPolicy.BUFFER_ONE)
"""The policies whose fires wait for the job's earlier occurrences (held until they end)."""


class MisfirePolicy(enum.StrEnum):
    """What to do with fires missed (later than the misfire threshold) while nothing dispatched."""

    FIRE_ONCE = "fire_once"
    """One catch-up occurrence for all missed fires; the others are recorded Skipped."""
    CATCH_UP = "catch_up"
    """Every missed fire runs (capped); fires beyond the cap are recorded Skipped."""
    SKIP = "skip"
    """No missed fire runs; each is recorded Skipped; the schedule resumes at the next fire."""


class SkipReason(enum.StrEnum):
    MISFIRE = "misfire"
    OVERLAP = "overlap"
    NO_WORKER = "no_worker"
    PAUSED = "paused"
    """The job was paused (``POST /jobs/{id}/pause``) when the fire came."""
    SKIP_NEXT = "skip_next"
    """The fire was one of the next N the job was told to skip (``POST /jobs/{id}/skip``)."""
    UPSTREAM = "upstream"
    """A dependent whose upstreams' outcome does not satisfy its rules (the occurrence's
    ``trigger_reason`` names the upstream and its status)."""


class JobSource(enum.StrEnum):
    """Who a job came from."""

    API = "api"
    """Created through the API, dashboard, SDK client or bulk endpoint."""
    CODE = "code"
    """Declared in worker code (``@rota.job(…, cron=…)``); at most one per job type."""


class ZombiePolicy(enum.StrEnum):
    """What becomes of an occurrence found without a sign of life past its threshold."""

    REQUEUE = "requeue"
    """A new attempt, Queued and due at once (at-least-once)."""
    FAIL = "fail"
    """Failed (failure type ``zombie``) with a dead-letter record; nothing runs again."""


class FailureType(enum.StrEnum):
    RETRIES_EXHAUSTED = "retries_exhausted"
    PERMANENT = "permanent"
    TIMED_OUT = "timed_out"
    ZOMBIE = "zombie"
    POISON = "poison"
    UNKNOWN_JOB_TYPE = "unknown_job_type"
    INVALID_DATA = "invalid_data"


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A job definition: what to run, with what data, when and how.

    Each field also has its row in :data:`rota.core.jobfields.JOB_FIELDS` (who may change
    it, whether it is versioned, how it is stored); a test holds the two in step."""

    id: UUID
    job_type: str
    worker_id: str | None = None
    """The worker group that runs it; ``None`` lets whichever group declares the type run it."""
    display_name: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()
    job_data: JsonValue = None
    cron_expression: str | None = None
    time_zone: str = "UTC"
    execute_at: datetime | None = None
    is_active: bool = True
    priority: Priority = Priority.MEDIUM
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.SKIP
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    timeout_seconds: float | None = None
    max_retries: int | None = None
    """``None``: the job type's default."""
    retry_delay_seconds: float | None = None
    next_run_at: datetime | None = None
    """The next fire (UTC); ``None`` when nothing is left to fire (inactive or finished)."""
    bucket: int = 0
    version: int = 1
    created_at: datetime = msgspec.field(default_factory=utcnow)
    updated_at: datetime = msgspec.field(default_factory=utcnow)
    created_by: str | None = None
    updated_by: str | None = None
    total_executions: int = 0
    success_count: int = 0
    failure_count: int = 0
    average_duration_ms: float | None = None
    source: JobSource = JobSource.API
    declared_spec: Mapping[str, JsonValue] | None = None
    """For a code-declared job: the declaration last applied to it (``cronExpression``,
    ``timeZone``, ``priority``); a new declaration is applied only when it differs."""
    auto_disable_threshold: int | None = None
    """Consecutive failures that disable the job; ``None``: the global default; 0: never."""
    auto_disable_window_seconds: float | None = None
    """Failures further apart than this do not count as consecutive; ``None``: the default."""
    auto_disable_cooldown_seconds: float | None = None
    """After this long disabled, one probe run is let through; ``None``: the default (which
    may be no probe: re-enable by hand)."""
    consecutive_failures: int = 0
    last_failure_at: datetime | None = None
    disabled_reason: str | None = None
    """Why the job was disabled automatically (``None``: it was not, or it was re-enabled)."""
    disabled_at: datetime | None = None
    probing: bool = False
    """Auto-disabled, its cooldown passed: the next fire is a probe (success re-enables)."""
    zombie_policy: ZombiePolicy | None = None
    """``None``: the global default."""
    zombie_threshold_seconds: float | None = None
    """Seconds without a sign of life before an occurrence is a zombie; ``None``: the default."""
    interval_seconds: int | None = None
    """An interval schedule (API ``every``): a fire every this many seconds, aligned to
    ``start_at`` or to the creation time; exclusive with ``cron_expression``/``execute_at``."""
    start_at: datetime | None = None
    """A recurring job never fires before it (``None``: from now)."""
    end_at: datetime | None = None
    """A recurring job never fires after it; past it, it has no next fire."""
    max_runs: int | None = None
    """After this many fires planned to run (``run_count``), the job has no next fire."""
    run_count: int | None = None
    """A recurring job's fires planned to run so far (kept by the dispatch; Skipped fires and
    manual triggers do not count); ``None``: none yet."""
    jitter_seconds: float | None = None
    """Each fire is sent a random delay in ``[0, jitter_seconds]`` after its fire time."""
    misfire_window_seconds: float | None = None
    """A fire later than this is missed (its misfire policy applies); ``None``: the server's
    misfire threshold."""
    paused_at: datetime | None = None
    """When the job was paused (``None``: it is not): its fires are recorded Skipped
    (``paused``) instead of running, until it is resumed or ``paused_until`` comes. Distinct
    from ``is_active`` (off: no fire at all) and from the auto-disable state; neither one
    changes the other (docs/concepts.md#pause-and-skip)."""
    paused_by: str | None = None
    pause_note: str | None = None
    paused_until: datetime | None = None
    """When a pause ends by itself (``None``: when resumed by hand)."""
    skip_next: int | None = None
    """How many of the job's next fires to record Skipped (``skip_next``) instead of running
    (``None``: none)."""
    skip_note: str | None = None

    @property
    def is_paused(self) -> bool:
        return self.paused_at is not None

    def paused_for(self, fire: datetime) -> bool:
        """Whether the fire at ``fire`` falls in the job's pause (before its end, if any)."""
        return self.paused_at is not None and (
            self.paused_until is None or fire < self.paused_until
        )

    @property
    def is_recurring(self) -> bool:
        return self.cron_expression is not None or self.interval_seconds is not None

    @property
    def success_rate(self) -> float | None:
        finished = self.success_count + self.failure_count
        return None if finished == 0 else 100.0 * self.success_count / finished

    @property
    def etag(self) -> str:
        """An entity tag for conditional changes (``If-Match``): it changes with every edit
        (version, update time) and with every change of state the scheduler makes on its own
        (auto-disable, probe, re-enable), so a client holding an older copy is refused
        instead of overwriting what it has not seen."""
        disabled = "" if self.disabled_at is None else self.disabled_at.isoformat()
        state = f"{int(self.is_active)}{int(self.probing)}{disabled}"
        return f'"{self.version}-{self.updated_at.timestamp():.6f}-{state}"'


@dataclass(frozen=True, slots=True, kw_only=True)
class JobVersion:
    job_id: UUID
    version: int
    snapshot: Mapping[str, JsonValue]
    """The job's versioned fields (API names) as they were in that version."""
    created_at: datetime


class StatusChange(msgspec.Struct, frozen=True, kw_only=True):
    timestamp: datetime
    from_status: OccurrenceStatus | None
    """``None`` for the record that created the occurrence."""
    to_status: OccurrenceStatus
    attempt: int = 1
    reason: str | None = None


class Occurrence(msgspec.Struct, frozen=True, kw_only=True):
    """One fire of a job. Its id is a UUIDv7 and doubles as the correlation id."""

    id: UUID
    job_id: UUID
    job_type: str
    worker_id: str | None
    """The worker group the job names (or ``None``)."""
    status: OccurrenceStatus
    scheduled_for: datetime
    """The fire time this occurrence belongs to; unique per job."""
    due_at: datetime
    """When it is to be dispatched: the fire time, or the retry time of a later attempt."""
    created_at: datetime
    attempt: int = 1
    max_retries: int = 0
    priority: Priority = Priority.MEDIUM
    timeout_seconds: float | None = None
    job_version: int = 1
    job_data: JsonValue = None
    dispatched_at: datetime | None = None
    instance_id: str | None = None
    """The worker instance that reported on it last."""
    start_time: datetime | None = None
    end_time: datetime | None = None
    duration_ms: float | None = None
    result: JsonValue = None
    exception: str | None = None
    skip_reason: str | None = None
    last_heartbeat: datetime | None = None
    trigger_reason: str | None = None
    """Why it exists when not scheduled: a manual trigger's reason."""
    retry_delay_seconds: float | None = None
    """The job's retry delay override when it fired (``None``: the job type's)."""
    traceparent: str | None = None
    """The W3C trace context of the span that created it (tracing on): every attempt's
    message carries it, so retries join the same trace."""
    jitter_seconds: float | None = None
    """The random delay its job's jitter added: it was due this long after ``scheduled_for``
    (which stays the nominal fire time); ``None``: no jitter."""
    status_changes: tuple[StatusChange, ...] = ()

    @property
    def retry_count(self) -> int:
        return self.attempt - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedOccurrence:
    """The dead-letter record of an occurrence that will not run again by itself."""

    id: UUID
    occurrence_id: UUID | None
    """``None`` for a poison message that names no occurrence (see ``raw_message``)."""
    job_id: UUID | None
    job_type: str
    failure_type: FailureType
    exception: str | None
    job_data: JsonValue
    attempts: int
    failed_at: datetime
    created_at: datetime = field(default_factory=utcnow)
    resolved: bool = False
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    resolution_note: str | None = None
    resolution_action: str | None = None
    raw_message: str | None = None
    """The message body as received (truncated), when it could not be read."""


# --- records on the wire (DESIGN.md §5) -------------------------------------------------------


class JobMessage(msgspec.Struct, frozen=True, kw_only=True):
    """What the dispatcher publishes for a worker to run (its body on the wire: ``_JobBody`` of
    :mod:`rota.core.wire`; the last two fields travel as AMQP headers)."""

    occurrence_id: UUID
    job_id: UUID
    job_type: str
    job_data: JsonValue
    scheduled_for: datetime
    timestamp: datetime
    retry_count: int = 0
    max_retries: int = 0
    priority: Priority = Priority.MEDIUM
    timeout_seconds: float | None = None
    """Seconds the attempt may run (the job's, else its job type's as the scheduler knows it);
    ``None``: the worker decides (its job type's timeout, else its default)."""
    job_version: int = 1
    worker_id: str | None = None
    original_correlation_id: UUID | None = None
    retry_delay_seconds: float | None = None
    """The job's base retry delay; ``None``: the worker's job type's ``retry_delay``."""
    traceparent: str | None = None
    """W3C trace context (the ``traceparent`` header), when tracing is on."""

    @property
    def correlation_id(self) -> UUID:
        return self.occurrence_id

    @property
    def attempt(self) -> int:
        return self.retry_count + 1


UNKNOWN_HOLDER = ""
"""The ``instance_id`` of a ``Running`` report for an attempt whose holder nobody knows: a
redelivered copy whose claim was lost with the claim memory (or could not be read), which the
reporting worker did not run (``docs/protocol.md`` §12). No worker instance has this id, so
the occurrence is one of a worker that is not registered: unless a real holder reports it
(and is then named its holder), the dead-worker sweep gives it its next attempt once it has
been silent for the dead-worker silence (5 s), not the zombie threshold."""


class StatusRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A worker's (or the scheduler's own) report on an occurrence. Its fields, camelCased and
    in this order, are the keys of ``docs/protocol.md`` §6; their types are what a reader takes."""

    occurrence_id: UUID
    status: OccurrenceStatus
    timestamp: AwareDatetime
    instance_id: str | None = None
    attempt: Annotated[int, Meta(ge=1)] = 1
    result: JsonValue = None
    exception: str | None = None
    duration_ms: Annotated[float, Meta(ge=0)] | None = None
    retry_at: AwareDatetime | None = None
    """With status Failed: the attempt failed but another is due at this time."""
    failure_type: FailureType | None = None
    started_at: AwareDatetime | None = None
    """On a worker's final report that carries its Running report folded in (both in one
    flush, the Running one dropped): when the worker started the attempt, the time that
    Running report had."""


class LogRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One log line of an attempt; its fields, camelCased, are the keys of ``docs/protocol.md``
    §7."""

    occurrence_id: UUID
    timestamp: AwareDatetime
    level: str
    message: str
    data: Mapping[str, JsonValue] | None = None
    category: str | None = None
    attempt: Annotated[int, Meta(ge=1)] | None = None
    """The attempt that wrote the line (with ``line``: the line's identity)."""
    line: Annotated[int, Meta(ge=1)] | None = None
    """The line's number within its attempt, from 1. A line that arrives twice (a replayed
    outbox, a redelivered batch) with the same ``(attempt, line)`` is stored once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """One worker instance as it registers itself (heartbeats refresh it)."""

    instance_id: str
    worker_id: str
    """The group."""
    host: str
    pid: int
    job_types: Mapping[str, Mapping[str, JsonValue]]
    """Job type name -> description: ``{"schema": <JSON Schema or None>, "maxRetries": …}``."""
    concurrency: int
    version: str = ""
    current_load: int = 0
    started_at: datetime = field(default_factory=utcnow)
    last_heartbeat: datetime = field(default_factory=utcnow)
    envelope_jobs: int = 0
    """The most jobs it takes in one envelope (``0``: every job as a message of its own)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatcherState:
    """Whether the dispatchers of every server are stopped (no fire is dispatched while they
    are), why, by whom and since when."""

    paused: bool = False
    reason: str | None = None
    by: str | None = None
    changed_at: datetime | None = None
