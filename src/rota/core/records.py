"""Records that cross the ports: queries, pages, results and the small values the adapters
hand back (:mod:`rota.core.ports` holds the ABCs that take and return them).

Frozen dataclasses with no behaviour beyond what the record itself needs; every datetime in
them is timezone-aware UTC.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, Literal, TypeVar
from uuid import UUID

import msgspec

from rota.core.models import (
    FailureType,
    Job,
    JsonValue,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    ZombiePolicy,
)
from rota.core.planning import FirePlan
from rota.core.wire import DeadLetter

T = TypeVar("T")


DataFilter = tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
"""Job data conditions of a query filter (:mod:`rota.core.query`): ``(path, values)`` pairs,
each true when the field at ``path`` (``("customer", "id")``), read as text, is one of
``values``; all pairs must hold."""

BucketStateName = Literal["Active", "Completing", "Lost"]
"""A bucket's life-cycle state as the API and dashboard show it."""
InstanceStateName = Literal["Active", "Stopping"]
"""A scheduler instance's state as the API and dashboard show it."""


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None = None
    """Opaque; pass it back to get the next page. ``None`` on the last page."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobQuery:
    search: str | None = None
    """Case-insensitive substring of display name, job type or description."""
    tag: str | None = None
    job_type: str | None = None
    is_active: bool | None = None
    auto_disabled: bool | None = None
    """``True``: only jobs disabled by auto-disable (with a ``disabled_reason``); ``False``:
    only the others."""
    ids: tuple[UUID, ...] = ()
    """Only these jobs (empty: any): one read for the names of the jobs a page of occurrences
    or failures shows. An id of no job is left out."""
    job_types: tuple[str, ...] = ()
    """Any of these job types (empty: any)."""
    job_refs: tuple[str, ...] = ()
    """Any of these jobs, each a display name (exact) or a job id (empty: any)."""
    tags: tuple[str, ...] = ()
    """Holding any of these tags (empty: any)."""
    worker_ids: tuple[str, ...] = ()
    """Of any of these worker groups (empty: any)."""
    data: DataFilter = ()
    states: tuple[str, ...] = ()
    """Any of ``active``, ``inactive``, ``paused``, ``auto-disabled`` (empty: any)."""
    created_after: datetime | None = None
    """``created_after <= created_at``."""
    created_before: datetime | None = None
    """``created_at < created_before``."""
    limit: int = 50
    cursor: str | None = None
    """Jobs are ordered newest first (by id, a UUIDv7)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OccurrenceQuery:
    job_id: UUID | None = None
    statuses: tuple[OccurrenceStatus, ...] = ()
    """Empty: any status."""
    scheduled_after: datetime | None = None
    scheduled_before: datetime | None = None
    job_types: tuple[str, ...] = ()
    """Any of these job types (empty: any)."""
    job_refs: tuple[str, ...] = ()
    """Of any of these jobs, each a display name (exact) or a job id (empty: any)."""
    tags: tuple[str, ...] = ()
    """Of a job holding any of these tags (empty: any)."""
    worker_ids: tuple[str, ...] = ()
    """Of any of these worker groups (empty: any)."""
    data: DataFilter = ()
    attempt_min: int | None = None
    attempt_max: int | None = None
    """The attempt number within ``[attempt_min, attempt_max]`` (``None``: unbounded)."""
    nothing: bool = False
    """The filters contradict each other: the page is empty."""
    limit: int = 50
    cursor: str | None = None
    """Occurrences are ordered newest first (by id, a UUIDv7)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedQuery:
    job_id: UUID | None = None
    failure_types: tuple[FailureType, ...] = ()
    """Empty: any failure type."""
    resolved: bool | None = None
    failed_after: datetime | None = None
    """``failed_after <= failed_at``."""
    failed_before: datetime | None = None
    """``failed_at < failed_before``."""
    job_types: tuple[str, ...] = ()
    """Any of these job types (empty: any)."""
    job_refs: tuple[str, ...] = ()
    """Of any of these jobs, each a display name (exact) or a job id (empty: any)."""
    tags: tuple[str, ...] = ()
    """Of a job holding any of these tags (empty: any)."""
    worker_ids: tuple[str, ...] = ()
    """Of a job of any of these worker groups (empty: any)."""
    data: DataFilter = ()
    attempt_min: int | None = None
    attempt_max: int | None = None
    """The number of attempts within ``[attempt_min, attempt_max]`` (``None``: unbounded)."""
    nothing: bool = False
    """The filters contradict each other: the page is empty."""
    limit: int = 50
    cursor: str | None = None
    """Failed occurrences are ordered newest first (by id, a UUIDv7)."""


FAILURE_TEXT_LIMIT = 10_000
"""Characters of an exception (and of a poison message's raw body) a failed-occurrence record
keeps; longer text is cut and ends with :data:`TRUNCATED_MARK`."""
TRUNCATED_MARK = "… [truncated]"


def truncate_text(text: str | None, limit: int = FAILURE_TEXT_LIMIT) -> str | None:
    """``text`` cut to at most ``limit`` characters (marked when cut)."""
    if text is None or len(text) <= limit:
        return text
    return text[: max(0, limit - len(TRUNCATED_MARK))] + TRUNCATED_MARK


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOverview:
    """Counts for the overview page (:meth:`Store.overview`)."""

    by_status: dict[OccurrenceStatus, int]
    """Every occurrence ever recorded, by status (every status present, zeros included)."""
    jobs: int
    active_jobs: int
    completed: int
    """Occurrences that ended Completed since the window's start."""
    failed: int
    """Occurrences that ended Failed or TimedOut since the window's start."""
    cancelled: int
    average_duration_ms: float | None
    """Mean duration of the window's Completed occurrences that have one."""


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    start: datetime
    """The bucket covers ``[start, start + bucket)``."""
    completed: int
    failed: int
    """Failed or TimedOut."""


@dataclass(frozen=True, slots=True)
class TagCount:
    tag: str
    jobs: int


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A request on the cancellation channel: stop this occurrence; ``reason`` is what the
    worker records as the Cancelled attempt's ``exception`` (``None``: ``cancelled``).

    With ``superseded_below``, it is not a cancel: the occurrence's job was edited before its
    due time and its message sent again with the new version; a worker holding a copy of a
    job version below this drops it unreported (a copy of the new version runs instead), and
    one running it lets it run."""

    occurrence_id: UUID
    reason: str | None = None
    superseded_below: int | None = None


class DueEntry(msgspec.Struct, frozen=True):
    """A job's next fire time as the schedule index holds it."""

    job_id: UUID
    bucket: int
    due_at: datetime


FirePlanner = Callable[[Job, int, datetime], FirePlan]
"""``planner(job, active_occurrences, now)`` -> what to record and the job's next fire.

``active_occurrences`` is how many occurrences of the job are Queued or Running right now.
The job carries its definition (type, group, data, schedule, policies, limits, next fire,
bucket, version); its display, audit and statistics fields are not loaded and hold defaults.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchResult:
    queued: list[Occurrence] = field(default_factory=list)
    """Occurrences inserted Queued and not held back: publish these, then mark them dispatched."""
    held: list[Occurrence] = field(default_factory=list)
    """Occurrences inserted Queued but waiting for an earlier one of the same job (Queue policy)."""
    skipped: list[Occurrence] = field(default_factory=list)
    """Occurrences inserted Skipped (misfire, overlap, no worker)."""
    next_runs: dict[UUID, DueEntry | None] = field(default_factory=dict)
    """For every requested job id that was not locked by another transaction: its next fire
    after this dispatch (``None``: nothing left to fire, or the job is gone or inactive)."""
    displacing: dict[UUID, UUID] = field(default_factory=dict)
    """CancelOther jobs that fired while an occurrence of theirs was active: job id -> its
    newest occurrence of this dispatch (the earlier active ones are to be cancelled)."""
    batch: UUID | None = None
    """With a claim: the store's record of ``queued`` (inserted dispatched), which the
    caller ends with ``mark_dispatched(…, batch=…)`` once it has published them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclinedResult:
    """What :meth:`~rota.core.ports.routing.RoutingStore.return_declined` did."""

    returned: list[UUID] = field(default_factory=list)
    """Handed back to the dispatcher, to be sent to a group that runs them."""
    unserved: list[UUID] = field(default_factory=list)
    """No group runs them now: the decline stands (their attempt fails)."""


class AppliedChange(msgspec.Struct, frozen=True, kw_only=True):
    occurrence_id: UUID
    job_id: UUID
    from_status: OccurrenceStatus
    to_status: OccurrenceStatus
    attempt: int
    """The attempt the occurrence is at after the change (a retry increments it)."""
    job_type: str = ""
    worker_id: str | None = None
    """The worker group the occurrence's job names."""
    instance_id: str | None = None
    """The worker instance whose report made the change (``None``: not a worker's)."""
    queue_policy: bool = False
    """Its job's concurrency policy is Queue or BufferOne: once it ends, an occurrence held
    behind it may go (the dispatcher's pending sweep releases it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IgnoredRecord:
    record: StatusRecord
    reason: str
    """``late`` (older attempt), ``transition`` (not allowed from the current status),
    ``unknown`` (no such occurrence)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusResult:
    applied: list[AppliedChange] = field(default_factory=list)
    ignored: list[IgnoredRecord] = field(default_factory=list)
    heartbeats: int = 0
    """Running reports on occurrences already Running: only ``last_heartbeat`` moved."""
    disabled: list[DisabledJob] = field(default_factory=list)
    """Jobs this batch disabled (auto-disable): drop them from the schedule index."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DisabledJob:
    """A job disabled by its consecutive failures (or a failed probe run)."""

    job_id: UUID
    bucket: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeScan:
    """One page of :meth:`Store.due_probes`."""

    due: list[Job]
    after: UUID | None = None
    """Pass back as ``after`` for the next page; ``None``: no candidates left."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedSchedule:
    """An active recurring (cron or interval) job as the missed-fire check reads it
    (:meth:`SilenceReader.watched_schedules`): its schedule and the latest fire recorded."""

    job_id: UUID
    job_type: str
    display_name: str
    cron_expression: str | None
    time_zone: str
    execute_at: datetime | None
    created_at: datetime
    updated_at: datetime
    last_fire: datetime | None
    """The latest ``scheduled_for`` of its scheduled occurrences (run, queued or Skipped; manual
    runs left out) in the window asked for; ``None``: none there."""
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    run_count: int | None = None
    """Its bounds: no fire is expected before its start, after its end or its last run."""
    interval_seconds: int | None = None
    """An interval job's interval (``cron_expression`` is then ``None``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeBatch:
    """One step of :meth:`Store.purge_occurrences`."""

    deleted: int
    next_after: UUID | None
    """Pass back as ``after`` for the next step; ``None``: nothing more to look at."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionUpkeep:
    """What :meth:`Store.maintain_partitions` does (a store partitioned by time)."""

    period: str = "month"
    """``day``, ``week`` or ``month``: the time range of one partition."""
    ahead: int = 2
    """Partitions created past the current period's."""
    drop: bool = True
    """Drop partitions that hold nothing retention keeps (else only create)."""
    occurrences_kept_since: Mapping[OccurrenceStatus, datetime | None] = field(default_factory=dict)
    """Final status -> occurrences created since then are kept (``None`` or missing: kept
    forever); non-final occurrences are always kept."""
    logs_before: datetime | None = None
    """Log lines older than this may go (``None``: kept as long as their occurrence)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReport:
    created: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StaleOccurrence:
    """An occurrence with no sign of life past its threshold, with its job's zombie settings
    (``None``: not set, or the job is gone: the defaults apply)."""

    occurrence: Occurrence
    zombie_policy: ZombiePolicy | None = None
    zombie_threshold_seconds: float | None = None


class IndexEntry(msgspec.Struct, frozen=True):
    job_id: UUID
    bucket: int
    due: float
    """Epoch seconds (UTC)."""


@dataclass(slots=True)
class Batch(Generic[T]):
    """Records consumed together. Call ``ack`` once they are safely stored; a batch never
    acknowledged is delivered again after the consumer goes away."""

    items: list[T]
    _ack: Callable[[], object] | None = None

    async def ack(self) -> None:
        if self._ack is not None:
            result = self._ack()
            if inspect.isawaitable(result):
                await result


def batch_due(arrived: float, asked: float, *, served: bool, max_wait: float) -> float:
    """When a batch not yet full is handed over (loop time), its oldest item having arrived at
    ``arrived`` and the consumer having asked at ``asked``: ``max_wait`` after that item came,
    or at once for a backlog (the item came while the consumer's last batch was out,
    ``served``: that batch's time did the gathering). The rule of ``Broker.consume_status``
    for every adapter."""
    return asked if served and arrived <= asked else arrived + max_wait


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceivedDeadLetter:
    """A message taken from the dead-letter queue."""

    body: bytes
    """The body as it reached the queue."""
    letter: DeadLetter | None = None
    """The job message (and the reason its sender gave); ``None`` if ``body`` cannot be
    decoded."""
    error: str | None = None
    """Why the body cannot be decoded (with ``letter`` ``None``)."""
    reason: str | None = None
    """Why the broker dead-lettered it, when it says (``rejected``, ``expired``, ``maxlen``,
    ``delivery_limit``)."""
    queue: str | None = None
    """The queue it was dead-lettered from, when known."""


@dataclass(frozen=True, slots=True)
class Lease:
    bucket: int
    owner: str
    fence: int
    """Increases every time the bucket changes hands; writes may carry it to be refused when
    stale."""
    expires_at: float
    """Epoch seconds."""


class ClaimOutcome(enum.StrEnum):
    """What :meth:`Coordination.claim_attempts` found for one attempt."""

    CLAIMED = "claimed"
    """Nobody held it: the caller holds it now."""
    OWNED = "owned"
    """The caller held it already: its expiry was renewed."""
    TAKEN = "taken"
    """Another instance holds it (``owner``; ``None``: an unknown one, see ``UNCERTAIN``)."""
    UNCERTAIN = "uncertain"
    """Nobody holds it, but the claim memory was lost lately (Redis flushed or restarted
    empty) and a claim from before the loss may have existed: the attempt is now marked taken
    by an unknown owner, so no copy of it runs."""


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One attempt to claim. ``careful``: the message may be a copy of one handed out before
    (a redelivery): while the claim memory may have lost claims, it is not claimed for the
    caller but marked taken by an unknown owner (outcome ``UNCERTAIN``)."""

    occurrence_id: UUID
    attempt: int
    careful: bool = False


@dataclass(frozen=True, slots=True)
class AttemptClaim:
    outcome: ClaimOutcome
    owner: str | None
    """The holder's instance id (``None``: unknown)."""
    claimed_at: float
    """When the holder claimed it (epoch seconds, the coordination's clock)."""


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    epoch: str
    """The token of the claim memory: a new one means every claim made before was lost."""
    claims: list[AttemptClaim]
    """One per request, in order."""
    uncertain_until: float | None = None
    """While the memory may miss claims made before it was lost (epoch seconds): until then
    a ``careful`` request is not claimed. ``None``: no loss known."""


@dataclass(frozen=True, slots=True)
class IdempotentResult:
    """What the store remembers of a request made with an ``Idempotency-Key``: the
    fingerprint of its body, and once it has succeeded, its answer (status, body, headers);
    ``status`` ``None``: the first request with the key is still being handled."""

    fingerprint: str
    created_at: datetime
    status: int | None = None
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PublishedSchema:
    """The data schema a worker group last published for a job type (``None``: the
    handler's data is untyped), and when a server first saw it published."""

    job_type: str
    worker_id: str
    schema: JsonValue
    published_at: datetime
