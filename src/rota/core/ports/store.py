"""The store port: the source of truth, cut into one slice per use case.

Each service takes the slice it uses, so the type checker proves what it touches; :class:`Store`
is the composite every store adapter implements (its contract: ``tests/contract/test_store.py``).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from rota.core.autodisable import AutoDisableDefaults
from rota.core.models import (
    DispatcherState,
    FailedOccurrence,
    Job,
    JobVersion,
    LogRecord,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
)
from rota.core.notifications import (
    DeliveryAttempt,
    DeliveryState,
    NotificationDelivery,
    Subscription,
)
from rota.core.planning import PlainFires
from rota.core.ports.idempotency import IdempotencyStore
from rota.core.ports.limits import LimitStore
from rota.core.ports.pausing import PauseStore
from rota.core.records import (
    DispatchResult,
    DueEntry,
    FailedQuery,
    FirePlanner,
    JobQuery,
    OccurrenceQuery,
    Page,
    PartitionReport,
    PartitionUpkeep,
    ProbeScan,
    PurgeBatch,
    StaleOccurrence,
    StatusResult,
    StoreOverview,
    TagCount,
    ThroughputPoint,
    WatchedSchedule,
)
from rota.core.security import (
    AuditEntry,
    AuditQuery,
    LoginReservation,
    RefreshOutcome,
    RefreshToken,
    User,
)


class JobStore(abc.ABC):
    """Jobs, their versions and auto-disable probes, and manual triggers (the job service)."""

    @abc.abstractmethod
    async def create_jobs(self, jobs: Sequence[Job]) -> None:
        """Insert jobs in one transaction. A duplicate id raises ``ConflictError`` and inserts
        nothing."""

    @abc.abstractmethod
    async def get_job(self, job_id: UUID) -> Job:
        """The job, or ``NotFoundError``."""

    @abc.abstractmethod
    async def list_jobs(self, query: JobQuery) -> Page[Job]:
        """Jobs matching every given filter, newest first, at most ``query.limit``."""

    @abc.abstractmethod
    async def update_job(self, job: Job, *, expected_version: int, with_state: bool = False) -> Job:
        """Replace the job's definition (not its statistics) and return it as stored.

        The auto-disable state (``consecutive_failures``, ``last_failure_at``,
        ``disabled_reason``, ``disabled_at``, ``probing``) belongs to the status tracker and is
        written only with ``with_state`` (a manual enable or disable, a probe let through).

        If the stored version is not ``expected_version`` raise ``ConflictError``. If
        ``job.version`` is greater than ``expected_version``, keep a :class:`JobVersion` snapshot
        of the stored job's versioned fields under the old version number. ``NotFoundError``
        if the job does not exist.
        """

    @abc.abstractmethod
    async def delete_job(self, job_id: UUID) -> None:
        """Delete the job with its versions; its occurrences and logs are kept.
        ``NotFoundError`` if it does not exist."""

    @abc.abstractmethod
    async def job_versions(self, job_id: UUID) -> list[JobVersion]:
        """Snapshots of earlier versions, oldest first (empty for a job never changed)."""

    @abc.abstractmethod
    async def code_jobs(self) -> list[Job]:
        """Every job declared by worker code (``source`` code), in job type order. There is
        at most one per job type: :meth:`create_jobs` raises ``ConflictError`` for a second."""

    @abc.abstractmethod
    async def insert_occurrences(
        self, occurrences: Sequence[Occurrence], *, sequential: bool = False
    ) -> None:
        """Insert occurrences (manual triggers, backfills) with their creation status change,
        in one transaction; ``sequential``: each waits for the job's earlier ones to end (the
        Queue policy, whatever the job's). A duplicate (job, scheduled_for) raises
        ``ConflictError``."""

    @abc.abstractmethod
    async def recorded_fires(self, job_id: UUID, start: datetime, end: datetime) -> set[datetime]:
        """The fire times (``scheduled_for``) in ``[start, end]`` the job has an occurrence
        of."""

    @abc.abstractmethod
    async def due_probes(
        self,
        now: datetime,
        defaults: AutoDisableDefaults,
        *,
        after: UUID | None = None,
        limit: int = 500,
    ) -> ProbeScan:
        """Auto-disabled recurring jobs whose cooldown has passed at ``now``: not active, not
        ``probing``, with a ``disabled_reason``, and a cooldown (the job's, else ``defaults``')
        with ``disabled_at + cooldown <= now`` (:func:`~rota.core.autodisable.probe_due`).

        Looks at up to ``limit`` candidate jobs in id order after ``after``; the result holds
        the due ones among them and, when more candidates may follow, the id to pass as
        ``after`` next (so a caller reads all of them, page by page)."""

    @abc.abstractmethod
    async def release_probe(
        self,
        job_id: UUID,
        *,
        seen_disabled_at: datetime,
        seen_version: int,
        next_run_at: datetime | None,
        at: datetime,
    ) -> Job | None:
        """Let one probe run through, in one conditional write: the job becomes active and
        ``probing`` with ``next_run_at`` (and ``updated_at`` ``at``), only if it is still
        auto-disabled as the caller saw it: not active, not probing, a ``disabled_reason``,
        ``disabled_at`` equal to ``seen_disabled_at`` and its definition at ``seen_version``.
        Returns the job as stored, or ``None`` if it did not apply (enabled, disabled by hand,
        edited, released by someone else, disabled again by a failed probe, or gone). Only
        those state fields change: nothing else of the job is written."""


class OccurrenceReader(abc.ABC):
    """Reading occurrences, their history and their logs."""

    @abc.abstractmethod
    async def get_occurrence(self, occurrence_id: UUID) -> Occurrence:
        """The occurrence with its status changes (oldest first), or ``NotFoundError``."""

    @abc.abstractmethod
    async def list_occurrences(self, query: OccurrenceQuery) -> Page[Occurrence]:
        """Occurrences matching every filter, newest first; without status changes."""

    @abc.abstractmethod
    async def occurrence_logs(
        self, occurrence_id: UUID, *, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, LogRecord]]:
        """Log lines with their sequence numbers (> ``after``), in order of arrival."""

    @abc.abstractmethod
    async def count_occurrences(
        self, statuses: Sequence[OccurrenceStatus] = (), job_id: UUID | None = None
    ) -> dict[OccurrenceStatus, int]:
        """How many occurrences there are by status (only the given statuses if any)."""


class StatusStore(abc.ABC):
    """Writing what workers report, and the zombie detector's query (tracker, zombies)."""

    @abc.abstractmethod
    async def apply_status(self, records: Sequence[StatusRecord]) -> StatusResult:
        """Apply a batch of status reports in one transaction, in order.

        A record for an older attempt than the occurrence's is ignored (``late``); one for an
        unknown occurrence is ignored (``unknown``); a Running report on a Running occurrence
        of the same attempt only moves ``last_heartbeat``. ``Failed`` with ``retry_at`` means
        "this attempt failed, the next is due then": the occurrence goes to Queued with
        ``attempt + 1``, ``due_at = retry_at`` and no ``dispatched_at``. A ``Queued`` record
        with ``attempt`` greater than the current one requeues (zombie): same effect, due at
        ``retry_at`` or the record's timestamp. Any other change not allowed by
        :data:`~rota.core.models.TRANSITIONS` is ignored (``transition``).

        An applied change sets the fields the record carries (instance, result, exception,
        duration; ``start_time`` on Running, ``end_time`` on a final status; a final status with
        no start time gets ``end - duration``) and appends a status change. Reaching a final
        status updates the job's statistics: ``total_executions`` (+1 for every final status),
        ``success_count`` (Completed), ``failure_count`` (Failed, TimedOut, Unknown→Failed),
        ``average_duration_ms`` (mean over Completed with a duration).

        It also keeps the job's auto-disable state (:mod:`rota.core.autodisable`, with the
        defaults the store was given): a final failure (Failed without ``retry_at``, TimedOut,
        Unknown→Failed) counts in ``consecutive_failures`` (``last_failure_at``), Completed
        resets it. An active job whose count reaches its threshold, or a probing job whose
        probe fails, is disabled in the same transaction (``is_active`` false, no next fire,
        ``disabled_reason``, ``disabled_at``) and listed in ``disabled``; a probing job whose
        occurrence completes is enabled for good (``probing`` and the reason cleared).

        Reaching a final failure also records a :class:`~rota.core.models.FailedOccurrence`
        (the dead letter), in the same transaction: Failed without ``retry_at`` (failure type:
        the record's, else ``zombie`` from Unknown, else ``retries_exhausted``), TimedOut
        (``timed_out``, unless the record names another), Unknown→Failed (``zombie``). It holds
        the occurrence's job id and type, job data, attempt number, exception (cut to
        :data:`FAILURE_TEXT_LIMIT`) and ``failed_at`` (the record's timestamp). An occurrence
        has at most one unresolved record: a repeated report adds nothing.
        """

    @abc.abstractmethod
    async def append_logs(self, records: Sequence[LogRecord]) -> None:
        """Store log lines in one statement; lines of unknown occurrences are dropped."""

    @abc.abstractmethod
    async def stale_occurrences(
        self,
        now: datetime,
        *,
        running_threshold: float,
        queued_threshold: float,
        limit: int,
    ) -> list[StaleOccurrence]:
        """The zombie detector's query: occurrences with no sign of life past their threshold,
        longest silent first, at most ``limit``; without status changes.

        Running: silent (``last_heartbeat``, else ``start_time``) for longer than the job's
        ``zombie_threshold_seconds``, else ``running_threshold``. Queued and handed to the
        broker (``dispatched_at`` set) but not started: dispatched longer ago than
        ``queued_threshold`` and than the job's own threshold (whichever is longer)."""

    @abc.abstractmethod
    async def orphaned_occurrences(
        self,
        now: datetime,
        *,
        live_instances: Sequence[str],
        silent_for: float,
        limit: int,
    ) -> list[StaleOccurrence]:
        """The dead-worker query: occurrences whose worker is gone, longest silent first, at
        most ``limit``; without status changes.

        Running on a worker instance (``instance_id`` set) that is not among
        ``live_instances`` and silent (``last_heartbeat``, else ``start_time``) for longer than
        ``silent_for`` seconds, whatever the job's own zombie threshold; and Unknown (an
        attempt its worker reported interrupted at stop)."""


class DispatchStore(abc.ABC):
    """Filling the schedule index, firing due jobs and handing occurrences to the broker
    (loader, dispatcher, pending sweep, embedded recovery).
    """

    @abc.abstractmethod
    async def due_jobs(
        self, until: datetime, buckets: Sequence[int] | None, limit: int
    ) -> list[DueEntry]:
        """Active jobs with ``next_run_at <= until`` in the given buckets (``None``: all),
        earliest first, at most ``limit``. Used by the loader to fill the schedule index."""

    @abc.abstractmethod
    async def dispatch_due(
        self,
        job_ids: Sequence[UUID],
        now: datetime,
        planner: FirePlanner,
        *,
        claim_until: datetime | None = None,
        plain: PlainFires | None = None,
    ) -> DispatchResult:
        """Fire the given jobs that are due, in one write transaction. For each job active
        with ``next_run_at <= now`` (rows another transaction has locked are passed over),
        call ``planner(job, active, now)``; insert the planned occurrences (a fire whose (job,
        scheduled_for) exists is not inserted again: no double dispatch); set the job's
        ``next_run_at`` (and ``is_active``) from the plan. A Queued occurrence of a Queue-policy
        job with an earlier active occurrence is *held*. Report every requested job's next
        fire. ``claim_until``: ``queued`` (the caller sends them) are inserted dispatched with
        one record, ``batch``, ended by :meth:`mark_dispatched`, or at ``claim_until`` the
        sweep's. ``plain``: the store may fire the plain one-time jobs itself, as planned."""

    @abc.abstractmethod
    async def mark_dispatched(
        self, published: Sequence[Occurrence], at: datetime, *, batch: UUID | None = None
    ) -> None:
        """Record that these occurrences' messages were handed to the broker: each row is
        marked only while it still holds the published attempt and is undispatched, so a
        late mark never lands on a retry requeued meanwhile; ``batch``: its record ends."""

    @abc.abstractmethod
    async def undispatched(self, due_before: datetime, limit: int) -> list[Occurrence]:
        """Queued occurrences never handed to the broker with ``due_at <= due_before`` (not
        claimed past it; a batch's, due when its claim ends), earliest due first, leaving out
        those held behind an earlier active Queue-policy occurrence. The sweeper sends them."""

    @abc.abstractmethod
    async def claim_undispatched(
        self,
        due_before: datetime,
        limit: int,
        *,
        claim_until: datetime,
    ) -> list[Occurrence]:
        """Take the occurrences :meth:`undispatched` would return, atomically: each one is
        returned to one caller only, however many claim at once (rows another transaction is
        claiming are passed over). A claim hides the occurrence from every sweep until
        ``claim_until`` (its ``due_at`` holds the claim meanwhile), so a claimer that dies
        before publishing loses its claim then. The returned occurrences carry the ``due_at``
        they had (after a claim that ran out: the time it ran out). Settle every claim with
        :meth:`finish_claim`."""

    @abc.abstractmethod
    async def finish_claim(
        self,
        claimed: Sequence[Occurrence],
        claim_until: datetime,
        *,
        dispatched_at: datetime | None,
    ) -> None:
        """End claims taken by :meth:`claim_undispatched` with ``claim_until``: restore each
        occurrence's ``due_at``, and set ``dispatched_at`` (published) or leave it unset
        (``None``: publishing failed, the next sweep takes it again). An occurrence that moved
        on meanwhile (another attempt, or claimed again after the claim ran out) is left as
        it is."""

    @abc.abstractmethod
    async def reset_dispatch(self, statuses: Sequence[OccurrenceStatus]) -> int:
        """Clear ``dispatched_at`` of every occurrence in the given statuses (embedded restart:
        the in-process broker lost its messages). Returns how many."""


class FailedStore(abc.ABC):
    """Failed occurrences (dead letters): recorded, listed, resolved, retried."""

    @abc.abstractmethod
    async def record_dead_letters(self, records: Sequence[FailedOccurrence]) -> int:
        """Insert failed-occurrence records made outside :meth:`apply_status` (poison messages:
        no occurrence, or one the store does not know), in one transaction; exception and raw
        message are cut to :data:`FAILURE_TEXT_LIMIT`. A record naming an occurrence that
        already has an unresolved record (or an id already stored) is not inserted. Returns
        how many were inserted."""

    @abc.abstractmethod
    async def list_failed(self, query: FailedQuery) -> Page[FailedOccurrence]:
        """Failed occurrences matching every filter, newest first, at most ``query.limit``."""

    @abc.abstractmethod
    async def get_failed(self, failed_id: UUID) -> FailedOccurrence:
        """The record, or ``NotFoundError``."""

    @abc.abstractmethod
    async def update_failed(
        self,
        failed_id: UUID,
        *,
        resolution_note: str | None = None,
        resolution_action: str | None = None,
        resolved: bool | None = None,
        resolved_by: str | None = None,
        now: datetime,
    ) -> FailedOccurrence:
        """Change a record's resolution and return it as stored; ``None`` leaves a field as
        it is. ``resolved=True`` on an unresolved record sets ``resolved_at = now`` (and
        ``resolved_by``); ``resolved=False`` clears both. ``NotFoundError`` if it does not
        exist; ``ConflictError`` when un-resolving it would give its occurrence a second
        unresolved record."""

    @abc.abstractmethod
    async def delete_failed(self, failed_id: UUID) -> None:
        """Delete the record (the occurrence is kept). ``NotFoundError`` if it does not
        exist."""

    @abc.abstractmethod
    async def retry_failed(
        self, failed_id: UUID, now: datetime, by: str | None = None
    ) -> Occurrence:
        """Run a failed occurrence again, in one transaction: the occurrence (Failed, TimedOut
        or Unknown) goes to Queued as a new attempt (``attempt + 1``, ``due_at = now``, not
        dispatched, start/end/heartbeat/duration cleared) with a status change (reason
        ``manual retry``), and the record is resolved (``resolution_action`` ``retried``,
        ``resolved_by = by``). Returns the occurrence with its status changes.

        ``NotFoundError`` if the record does not exist; ``ConflictError`` if it names no
        occurrence (a poison message), the occurrence is gone, or it is not in a failed
        status (already retried, or it never failed)."""


class StatsReader(abc.ABC):
    """Aggregates for the statistics endpoints and the dashboard."""

    @abc.abstractmethod
    async def overview(self, since: datetime) -> StoreOverview:
        """Occurrence counts by status (all time), job counts, and what ended since ``since``
        (by ``end_time``): Completed, Failed or TimedOut, Cancelled, and the mean duration of
        the Completed ones. Aggregates over indexed columns, a few statements."""

    @abc.abstractmethod
    async def throughput(
        self, start: datetime, bucket_seconds: int, buckets: int
    ) -> list[ThroughputPoint]:
        """Occurrences that ended Completed, and Failed or TimedOut, per bucket of
        ``bucket_seconds`` from ``start`` (by ``end_time``): exactly ``buckets`` points, in
        time order, empty buckets included. One aggregate statement."""

    @abc.abstractmethod
    async def tags(self) -> list[TagCount]:
        """Every tag with how many jobs carry it, by tag name."""


class ControlStore(LimitStore, abc.ABC):
    """The switch every dispatcher follows, and the limits every worker follows."""

    @abc.abstractmethod
    async def dispatcher_state(self) -> DispatcherState:
        """The dispatchers' stop switch as last set (not paused if never set)."""

    @abc.abstractmethod
    async def set_dispatcher_state(self, state: DispatcherState) -> None:
        """Store the dispatchers' stop switch (every server reads it)."""


class JobTypeHistory(abc.ABC):
    """The job types workers have ever declared, and by which group: what tells a fire of a
    type whose workers are merely down (it waits for them) from one of a type no worker ever
    declared (recorded Skipped, ``no_worker``)."""

    @abc.abstractmethod
    async def record_job_types(self, declared: Sequence[tuple[str, str]], at: datetime) -> int:
        """Remember ``(job type, worker group)`` pairs as declared at ``at``; a pair already
        known keeps its first time. Pairs with a name longer than 200 characters are left
        out. Returns how many pairs were new."""

    @abc.abstractmethod
    async def declared_job_types(self) -> set[tuple[str, str]]:
        """Every ``(job type, worker group)`` pair ever recorded."""


class RetentionStore(abc.ABC):
    """Deleting what retention lets go, and time partitions (maintenance)."""

    @abc.abstractmethod
    async def purge_occurrences(
        self,
        status: OccurrenceStatus,
        created_before: datetime,
        limit: int,
        after: UUID | None = None,
        *,
        with_logs: bool = True,
    ) -> PurgeBatch:
        """One retention step over occurrences in ``status`` (a final one: ``ValueError``
        otherwise), in one short transaction: look at the ``limit`` oldest (by id) after
        ``after``, and delete those created before ``created_before`` with their status
        changes and (``with_logs``; else they are left to the log retention) log lines. An
        occurrence with an unresolved failed-occurrence record is kept (it may still be
        retried). The batch says how many were deleted and where the
        next step starts (``None``: done — fewer than ``limit`` left, or one created after
        ``created_before`` was reached)."""

    @property
    def time_partitioned(self) -> bool:
        """Whether occurrences, their history and logs are partitioned by time (PostgreSQL),
        so that :meth:`maintain_partitions` does something."""
        return False

    async def maintain_partitions(self, now: datetime, upkeep: PartitionUpkeep) -> PartitionReport:
        """Create the time partitions of the coming periods and drop those that hold nothing
        retention keeps (see ``docs/operations.md``). A store without time partitions does
        nothing."""
        return PartitionReport()

    @abc.abstractmethod
    async def purge_logs(self, before: datetime, limit: int) -> int:
        """Delete log lines whose timestamp is before ``before``, among the ``limit`` oldest
        stored (in order of arrival), in one statement; returns how many. 0 means the oldest
        lines are not old enough: nothing more to do (a line that arrived long after its
        timestamp waits until the lines stored before it have gone)."""

    @abc.abstractmethod
    async def purge_failed(self, resolved_before: datetime, limit: int) -> int:
        """Delete at most ``limit`` resolved failed-occurrence records resolved before
        ``resolved_before``, oldest first, in one statement; returns how many. Unresolved
        records are never deleted."""


class SilenceReader(abc.ABC):
    """The silence detector's reads: recurring jobs and whether they fired."""

    @abc.abstractmethod
    async def recurring_jobs(
        self, buckets: Sequence[int], limit: int, after: UUID | None = None
    ) -> list[Job]:
        """Active recurring (cron or interval) jobs in ``buckets``, by id, the first ``limit``
        after ``after`` (one-time jobs are never read)."""

    @abc.abstractmethod
    async def jobs_with_fires(
        self, job_ids: Sequence[UUID], start: datetime, end: datetime
    ) -> set[UUID]:
        """Of ``job_ids``, those with at least one occurrence (any status, Skipped included)
        scheduled for a time in ``[start, end]``."""

    @abc.abstractmethod
    async def watched_schedules(
        self,
        buckets: Sequence[int],
        since: datetime,
        until: datetime,
        limit: int,
        after: UUID | None = None,
    ) -> list[WatchedSchedule]:
        """Active, unpaused recurring (cron or interval) jobs in ``buckets``, by id, the first
        ``limit`` after ``after``, each with its latest fire recorded in ``[since, until]``:
        the greatest ``scheduled_for`` of its occurrences of any status (Skipped included) that
        the schedule made (manual runs, which have a trigger reason, left out). One statement
        per page, whatever the number of jobs."""


class UserStore(abc.ABC):
    """Users, login lockout and refresh tokens (the auth service)."""

    @abc.abstractmethod
    async def create_user(self, user: User) -> None:
        """Insert a user. ``ConflictError`` if the username is taken. (Names are compared as
        they are: the service lowercases them.)"""

    @abc.abstractmethod
    async def get_user(self, user_id: UUID) -> User:
        """The user, or ``NotFoundError``."""

    @abc.abstractmethod
    async def find_user(self, username: str) -> User | None:
        """The user of this name, or ``None``."""

    @abc.abstractmethod
    async def list_users(self, limit: int = 50, cursor: str | None = None) -> Page[User]:
        """Users ordered by id (oldest first), at most ``limit``."""

    @abc.abstractmethod
    async def count_admins(self) -> int:
        """How many active users have the Admin role."""

    @abc.abstractmethod
    async def update_user(self, user: User) -> User:
        """Store the user's username, password hash, role, active flag and lockout state as
        given (``updated_at`` too) and return it. ``NotFoundError`` if it does not exist;
        ``ConflictError`` if the change would leave no active Admin while there was one, or
        the new username is taken. The check and the write are one transaction."""

    @abc.abstractmethod
    async def delete_user(self, user_id: UUID) -> User:
        """Delete the user and its refresh tokens; returns the user as it was.
        ``NotFoundError`` if it does not exist; ``ConflictError`` if it is the last active
        Admin."""

    @abc.abstractmethod
    async def reserve_login(
        self,
        username: str,
        *,
        now: datetime,
        max_failures: int,
        lock_until: datetime,
        check_until: datetime,
    ) -> LoginReservation:
        """Reserve one password check of ``username``, atomically, before the check (so that
        parallel attempts cannot outrun the lockout, on any number of servers).

        Unless the name is locked (``locked_until > now``: ``LOCKED``) or another check of it
        is in flight (its lease ends after ``now``: ``BUSY``), the attempt is counted as a
        failure at once (``failed_logins + 1``; reaching ``max_failures`` locks the name until
        ``lock_until`` and starts the count again) and the check is leased until
        ``check_until``: ``GRANTED``, with the user. A name that is no user is counted and
        locked alike in a table of its own (with ``user`` ``None``); such rows idle for a day
        are pruned on the way."""

    @abc.abstractmethod
    async def end_login_check(
        self, username: str, *, check_until: datetime, succeeded: bool
    ) -> None:
        """End the check that ``reserve_login`` leased until ``check_until``: its lease is
        released; ``succeeded`` (the password was right) also forgets the user's failed
        logins and any lock."""

    @abc.abstractmethod
    async def add_refresh_token(self, token: RefreshToken) -> None:
        """Store a new refresh token (its hash)."""

    @abc.abstractmethod
    async def rotate_refresh_token(
        self, token_hash: str, successor: RefreshToken, now: datetime
    ) -> RefreshOutcome:
        """Use a refresh token up, in one transaction. A live token (not used, not revoked,
        ``expires_at > now``) gets ``used_at = now`` and ``successor`` is stored in its
        family for its user (the successor's ``family_id`` and ``user_id`` are replaced by
        the token's): ``ROTATED`` with the user id. A token that was used or revoked before
        revokes every live token of its family: ``REUSED`` with the user id. An unknown or
        expired token changes nothing: ``INVALID``. Of two concurrent uses of one token,
        exactly one rotates."""

    @abc.abstractmethod
    async def revoke_refresh_tokens(
        self,
        now: datetime,
        *,
        token_hash: str | None = None,
        user_id: UUID | None = None,
    ) -> int:
        """Revoke the live tokens of the family of ``token_hash`` (logout) and/or of every
        family of ``user_id`` (password change, deactivation). Returns how many were
        revoked. Tokens expired for more than a day are deleted on the way."""


class AuditStore(abc.ABC):
    """The audit log."""

    @abc.abstractmethod
    async def append_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Store audit entries (``before``/``after`` as JSON)."""

    @abc.abstractmethod
    async def list_audit(self, query: AuditQuery) -> Page[AuditEntry]:
        """Audit entries matching every filter, newest first, at most ``query.limit``."""


class NotificationStore(abc.ABC):
    """Notification subscriptions, their deliveries (a durable queue, claimed with a lease)
    and the delivery log; and the two reads the notifier needs (dead letters, job tags)."""

    @abc.abstractmethod
    async def create_subscription(self, subscription: Subscription) -> None:
        """Insert a subscription. A duplicate id raises ``ConflictError``."""

    @abc.abstractmethod
    async def get_subscription(self, subscription_id: UUID) -> Subscription:
        """The subscription, or ``NotFoundError``."""

    @abc.abstractmethod
    async def list_subscriptions(self) -> list[Subscription]:
        """Every subscription, oldest first (ties by id)."""

    @abc.abstractmethod
    async def update_subscription(self, subscription: Subscription) -> Subscription:
        """Replace the stored subscription of ``subscription.id`` (``created_at`` and
        ``created_by`` are kept) and return it as stored; ``NotFoundError`` if none."""

    @abc.abstractmethod
    async def delete_subscription(self, subscription_id: UUID) -> None:
        """Delete the subscription with its deliveries and delivery log; ``NotFoundError`` if
        it does not exist."""

    @abc.abstractmethod
    async def enqueue_deliveries(self, deliveries: Sequence[NotificationDelivery]) -> int:
        """Insert pending deliveries in one transaction. A delivery whose
        ``(subscription_id, key)`` is already stored (the same notice made twice, by another
        server or a replay), or whose subscription no longer exists, is left out. Returns how
        many were inserted."""

    @abc.abstractmethod
    async def claim_deliveries(
        self, owner: str, now: datetime, lease_seconds: float, limit: int
    ) -> list[NotificationDelivery]:
        """Claim up to ``limit`` pending deliveries due at ``now`` (``next_attempt_at <= now``)
        and not claimed by a live lease, earliest due first: each gets ``owner``'s lease until
        ``now + lease_seconds``. Two claimers never get the same delivery while its lease
        lasts (row locks skipped on PostgreSQL, the writer lock on SQLite)."""

    @abc.abstractmethod
    async def finish_delivery(
        self,
        attempt: DeliveryAttempt,
        owner: str,
        *,
        state: DeliveryState,
        retry_at: datetime | None = None,
    ) -> bool:
        """Record one attempt of a claimed delivery and settle it, in one transaction, if
        ``owner`` still holds its claim (else change nothing and return ``False``):
        the attempt joins the delivery log (trimmed to the newest
        :data:`~rota.core.notifications.KEPT_ATTEMPTS` of its subscription); the delivery's
        ``attempts`` becomes ``attempt.attempt`` and its claim is released. ``state``
        ``delivered`` or ``failed`` ends it (``finished_at = attempt.at``); ``pending`` makes
        it due again at ``retry_at``. ``last_error`` is the attempt's error."""

    @abc.abstractmethod
    async def list_deliveries(
        self, subscription_id: UUID, limit: int, state: DeliveryState | None = None
    ) -> list[NotificationDelivery]:
        """The subscription's deliveries (of ``state`` if given), newest first."""

    @abc.abstractmethod
    async def list_delivery_attempts(
        self, subscription_id: UUID, limit: int
    ) -> list[DeliveryAttempt]:
        """The subscription's delivery log: its newest attempts first."""

    @abc.abstractmethod
    async def purge_deliveries(self, finished_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` deliveries that ended before ``finished_before`` (their
        attempts stay in the log until trimmed). Returns how many."""

    @abc.abstractmethod
    async def unresolved_dead_letters(self) -> int:
        """How many failed-occurrence records are not resolved."""

    @abc.abstractmethod
    async def job_tags(self, job_ids: Sequence[UUID]) -> dict[UUID, tuple[str, ...]]:
        """The tags of each job that exists (sorted); a job without tags maps to ``()``."""

    @abc.abstractmethod
    async def occurrence_exceptions(self, occurrence_ids: Sequence[UUID]) -> dict[UUID, str]:
        """The exception text of each given occurrence that has one (occurrences without
        one, or unknown, are left out)."""


class MaintenanceStore(RetentionStore, IdempotencyStore, abc.ABC):
    """What maintenance deletes from: retention, and the expired idempotency keys."""


class JobAdminStore(JobStore, OccurrenceReader, abc.ABC):
    """What the job service uses: jobs, and the occurrences it reads back."""


class OccurrenceStore(StatusStore, OccurrenceReader, abc.ABC):
    """Occurrences read and written (cancellation)."""


class SupersedeStore(abc.ABC):
    """Occurrences sent ahead of their due time given their job's new version (an edit)."""

    @abc.abstractmethod
    async def supersede_queued(
        self, job: Job, occurrence_ids: Sequence[UUID], max_retries: int
    ) -> list[Occurrence]:
        """Give these occurrences of ``job`` its current version (type, worker group, data,
        priority, timeout, retry delay, ``max_retries``, version): those still ``Queued`` and
        of an older version, in one statement. Returns them as they are now (sent ahead of
        their due time, their job was edited meanwhile: they are sent again as they are
        now)."""


class AheadStore(OccurrenceStore, SupersedeStore, abc.ABC):
    """What honouring an edit in the occurrences sent ahead uses: read, cancel, supersede."""


class RecoveryStore(OccurrenceStore, DispatchStore, abc.ABC):
    """What embedded recovery uses after a restart."""


class DeadLetterStore(FailedStore, StatusStore, abc.ABC):
    """What the dead-letter handler uses: it records failures and settles their status."""


class SecurityStore(UserStore, AuditStore, abc.ABC):
    """What the auth service uses: users and tokens, and the audit log it writes to."""


class Store(
    JobAdminStore,
    RecoveryStore,
    AheadStore,
    DeadLetterStore,
    StatsReader,
    ControlStore,
    JobTypeHistory,
    MaintenanceStore,
    SilenceReader,
    SecurityStore,
    NotificationStore,
    PauseStore,
):
    """The source of truth: jobs, their versions, occurrences, status history, logs.

    Writes that belong together happen in one transaction; batch methods take and write whole
    batches with one statement per table where the backend allows. Errors of the backend are
    raised as :class:`~rota.core.errors.BackendUnavailableError`.
    """

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect (idempotent). The schema must already be migrated."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections (idempotent)."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Return when the store answers; raise ``BackendUnavailableError`` otherwise."""
