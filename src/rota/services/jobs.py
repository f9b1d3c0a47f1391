"""Job management: create, change, delete and trigger jobs, keeping the hot window in step.

The store is the source of truth; after a write the schedule index gets the job's entry at once
when its next fire falls inside the hot window, and the dispatchers are woken, so a job due in a
second does not wait for the loader's next pass. The index is a cache: if it cannot be reached
the write still stands and the loader heals the index later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

import orjson
from msgspec.structs import replace

from rota.core.autodisable import AutoDisableDefaults
from rota.core.cron import CronSchedule
from rota.core.dependencies import Dependency
from rota.core.errors import (
    BackendUnavailableError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    ValidationError,
)
from rota.core.events import EventType, job_changed
from rota.core.ids import bucket_of, new_id
from rota.core.intervals import interval_fires, parse_duration
from rota.core.jobfields import (
    NULLABLE_FIELDS,
    SCHEDULE_FIELDS,
    UPDATABLE_FIELDS,
    VERSIONED_FIELDS,
    api_name,
)
from rota.core.jobspec import JobSpec, as_utc
from rota.core.jsonlimits import DEFAULT_JSON_DEPTH, value_too_deep
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    JobSource,
    JobVersion,
    JsonValue,
    Occurrence,
    OccurrenceStatus,
    SkipReason,
)
from rota.core.planning import (
    PlanSettings,
    first_run_at,
    new_occurrence,
    with_type_defaults,
)
from rota.core.ports import (
    Coordination,
    DependencyStore,
    JobAdminStore,
    JobTypeHistory,
    ScheduleIndex,
)
from rota.core.query import QueryFilter, narrow_jobs
from rota.core.records import IndexEntry, JobQuery, OccurrenceQuery, Page
from rota.core.secretrefs import placeholders, references
from rota.core.upcoming import Effective, UpcomingFire, effective_values, upcoming_fires
from rota.services.ahead import ahead, in_progress
from rota.services.audit import AuditNote
from rota.services.dataschema import DataSchemas
from rota.services.dependencies import parse_dependencies, refuse_cycle, upstream_refused
from rota.services.events import EventPublisher
from rota.services.jobvalues import normalised, text_value
from rota.services.jobwarnings import JobWarning, job_type_warnings
from rota.services.workers import WorkerDirectory

logger = logging.getLogger(__name__)

GroupLookup = Callable[[str], set[str]]
"""Job type -> the worker groups declaring it."""

MAX_PREVIEW: Final = 1000
"""At most this many fires in one schedule preview."""
MAX_REPORTED_ERRORS: Final = 100
"""A bulk create reports at most this many refused jobs."""
DEFAULT_MAX_JOB_DATA_BYTES: Final = 256 * 1024
"""The default limit of a job's data (and a trigger's), as compact UTF-8 JSON."""

_SPEC_FIELDS: Final = frozenset(JobSpec.__dataclass_fields__)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsConfig:
    """What the job service is told by the settings (built by the composition root)."""

    plan: PlanSettings
    """Misfires, catch-up and retries: how a manual trigger's or a preview's fires are planned."""
    bucket_count: int
    """Buckets the schedule is split into (a new job's bucket)."""
    hot_window_seconds: float
    """How far ahead the schedule index holds."""
    auto_disable: AutoDisableDefaults
    """The global auto-disable settings a job's own fall back to."""


class JobService:
    """Job use cases over the store, the schedule index and coordination."""

    def __init__(
        self,
        store: JobAdminStore,
        index: ScheduleIndex,
        coordination: Coordination,
        config: JobsConfig,
        clock: Callable[[], datetime],
        *,
        max_job_data_bytes: int = DEFAULT_MAX_JOB_DATA_BYTES,
        max_json_depth: int = DEFAULT_JSON_DEPTH,
        on_triggered: Callable[[Occurrence], None] | None = None,
        stamp: Callable[[Occurrence], Occurrence] | None = None,
        events: EventPublisher | None = None,
        cancel_ahead: Callable[[UUID, str], Awaitable[object]] | None = None,
        supersede_ahead: Callable[[Job], Awaitable[object]] | None = None,
        workers: WorkerDirectory | None = None,
        schemas: DataSchemas | None = None,
        on_dependencies: Callable[[], Awaitable[object]] | None = None,
        judge_ahead: Callable[[Occurrence, UUID], Coroutine[Any, Any, object]] | None = None,
    ) -> None:
        """``cancel_ahead(job_id, reason)``: cancels the job's occurrences sent ahead of their
        due time (the dispatch lead), after the job was disabled or deleted;
        ``supersede_ahead(job)`` sends them again as the job is now, after an edit
        (:func:`rota.services.cancellation.supersede_ahead`).
        ``max_job_data_bytes``: the largest job data a create, update or trigger takes
        (as compact UTF-8 JSON); larger is a ``ValidationError`` on ``jobData``.
        ``max_json_depth``: how deeply that job data may nest; deeper is the same error.
        ``on_triggered(occurrence)``: called after a manual trigger stored its occurrence;
        ``stamp(occurrence)``: marks a manual trigger's occurrence before it is stored (its
        trace context; tracing on). ``events``: where change events go (the runtime's
        publisher); without one they gather in a publisher of the service's own that nothing
        publishes (tests). ``workers``: the runtime's worker directory (the job types live
        and ever declared, their data schemas); default: one of the service's own, with the
        store as its history if the store keeps one. ``schemas``: the data schema checker.
        ``on_dependencies()``: called after a create or change that set a job's upstreams
        (the dependency engine reads the graph again). ``judge_ahead(fire, triggered)``:
        judges a Skip-policy fire sent ahead at its due time against a manual run
        (:func:`rota.services.ahead.judge_at_due`; without it the fire runs as sent)."""
        self._on_dependencies = on_dependencies
        self._judge_ahead = judge_ahead
        self._judging: set[asyncio.Task[object]] = set()
        self._linked = store if isinstance(store, DependencyStore) else None
        self._on_triggered = on_triggered
        self._cancel_ahead = cancel_ahead
        self._supersede_ahead = supersede_ahead
        self._stamp = stamp
        self._store = store
        self.events = events or EventPublisher(coordination)
        self.max_job_data_bytes = max_job_data_bytes
        self.max_json_depth = max_json_depth
        self._index = index
        self._coordination = coordination
        self._config = config
        self._clock = clock
        history = store if isinstance(store, JobTypeHistory) else None
        self._workers = workers or WorkerDirectory(coordination, history=history)
        self.schemas = schemas or DataSchemas()
        self._plan = config.plan

    # --- reading ----------------------------------------------------------------------------

    @property
    def auto_disable_defaults(self) -> AutoDisableDefaults:
        """The global auto-disable settings a job's own fall back to."""
        return self._config.auto_disable

    async def get_job(self, job_id: UUID) -> Job:
        return await self._store.get_job(job_id)

    async def list_jobs(
        self,
        *,
        search: str | None = None,
        tag: str | None = None,
        job_type: str | None = None,
        is_active: bool | None = None,
        auto_disabled: bool | None = None,
        limit: int = 50,
        cursor: str | None = None,
        where: QueryFilter | None = None,
    ) -> Page[Job]:
        """Jobs matching every given filter and the query filter ``where``, newest first
        (see :class:`JobQuery`)."""
        query = JobQuery(
            search=search or None,
            tag=tag or None,
            job_type=job_type or None,
            is_active=is_active,
            auto_disabled=auto_disabled,
            limit=limit,
            cursor=cursor or None,
        )
        if where is not None:
            query = narrow_jobs(query, where)
        return await self._store.list_jobs(query)

    async def job_versions(self, job_id: UUID) -> list[JobVersion]:
        """Earlier versions of an existing job, oldest first (``NotFoundError`` if none)."""
        await self._store.get_job(job_id)
        return await self._store.job_versions(job_id)

    def preview(
        self,
        cron: str | None,
        time_zone: str = "UTC",
        after: datetime | None = None,
        count: int = 5,
        *,
        every: str | int | None = None,
        start_at: datetime | None = None,
    ) -> list[datetime]:
        """The next ``count`` fires after ``after`` (default now), UTC, of a cron expression
        or of an interval (``every``, aligned to ``start_at``, else to ``after``)."""
        if not 1 <= count <= MAX_PREVIEW:
            raise ValidationError(f"count must be between 1 and {MAX_PREVIEW}", field="count")
        start = self.now() if after is None else as_utc(after)
        if every is not None and cron:
            raise ValidationError("give cron or every, not both", field="every")
        if every is not None:
            begin = None if start_at is None else as_utc(start_at)
            return interval_fires(parse_duration(every), start, count, begin)
        if not cron:
            raise ValidationError("give cron or every", field="cron")
        return CronSchedule.parse(cron.strip(), time_zone).fires(start, count)

    async def upcoming(
        self, job: Job, count: int, *, default_timeout_seconds: float | None = None
    ) -> tuple[list[UpcomingFire], dict[str, Effective]]:
        """The job's next ``count`` fires (each marked when its pause or a skip will record it
        Skipped), and the values that govern its runs with where each comes from (the job,
        what a live worker declared about its type, the defaults)."""
        if not 1 <= count <= MAX_PREVIEW:
            raise ValidationError(f"count must be between 1 and {MAX_PREVIEW}", field="count")
        await self.refresh_workers()  # the copy the job's warnings read (at most a second old)
        declared = self._workers.type_description(job.job_type, job.worker_id)
        retries, timeout = self._plan.default_max_retries, default_timeout_seconds
        values = effective_values(
            job, declared, default_max_retries=retries, default_timeout_seconds=timeout
        )
        return upcoming_fires(job, count), values

    # --- writing ----------------------------------------------------------------------------

    async def create_job(
        self,
        spec: JobSpec | Mapping[str, Any],
        *,
        depends_on: Sequence[Any] = (),
        audit: AuditNote | None = None,
    ) -> Job:
        """Validate and insert one job; a mapping holds :class:`JobSpec` fields by name.
        ``depends_on``: its upstreams (as :func:`parse_dependencies` takes them); see
        :meth:`create_jobs`."""
        (job,) = await self.create_jobs([spec], depends_on=depends_on, audit=audit)
        return job

    async def create_jobs(
        self,
        specs: Sequence[JobSpec | Mapping[str, Any]],
        *,
        field_prefix: str = "",
        depends_on: Sequence[Any] = (),
        audit: AuditNote | None = None,
    ) -> list[Job]:
        """Validate and insert jobs in one store call (all or nothing).

        In a batch, a refused spec's error field is prefixed with ``field_prefix`` and its
        position (``jobs[3].jobType``); every refused spec is reported (up to
        :data:`MAX_REPORTED_ERRORS`), in the raised error's ``errors``.

        ``depends_on`` (one job only): its upstreams; ``audit``: the entry that records the
        creation. The jobs, the upstreams and the entry are written in one transaction: an
        unknown upstream (or one deleted meanwhile) is a ``ValidationError`` on ``dependsOn``
        and leaves no job behind.
        """
        now = self.now()
        jobs: list[Job] = []
        refused: list[ValidationError] = []
        # One registry read for the whole batch: the groups declaring each type, and the
        # data schemas the jobs' data must fit.
        directory = await self._fresh_directory() if specs else None
        workers = _no_groups if directory is None else directory.groups_for
        for position, raw in enumerate(specs):
            try:
                spec = _as_spec(raw)
                jobs.append(self._new_job(spec, now, workers, directory))
            except ValidationError as exc:
                if len(specs) == 1 and not field_prefix:
                    raise
                where = f"{field_prefix}[{position}]"
                exc.field = f"{where}.{exc.field}" if exc.field else where
                refused.append(exc)
                if len(refused) >= MAX_REPORTED_ERRORS:
                    break
        if refused:
            first = refused[0]
            count = f"{len(refused)}{'+' if len(refused) >= MAX_REPORTED_ERRORS else ''}"
            message = first.message if len(refused) == 1 else f"{count} jobs are invalid"
            raise ValidationError(message, field=first.field, errors=refused)
        edges = parse_dependencies(jobs[0].id, depends_on) if depends_on else []
        if edges or audit is not None:
            entries = [] if audit is None else [await audit.entry(jobs, edges, now)]
            try:
                await self._linked_store().create_linked_jobs(jobs, edges, entries)
            except NotFoundError as exc:  # an upstream that is not there (any more)
                raise (upstream_refused(exc, edges) or exc) from None
        else:
            await self._store.create_jobs(jobs)
        self.events.emit(job_changed(EventType.JOB_CREATED, [j.id for j in jobs]))
        await self._sync_index(jobs, now, remove_cold=False)
        if edges and self._on_dependencies is not None:
            await self._guarded(self._on_dependencies())
        return jobs

    async def update_job(
        self,
        job_id: UUID,
        changes: Mapping[str, Any],
        *,
        by: str | None = None,
        if_match: str | None = None,
        depends_on: Sequence[Any] | None = None,
        audit: AuditNote | None = None,
    ) -> Job:
        """Apply a partial change (snake_case attribute names); with ``depends_on``, the job's
        upstreams replace those it has (an unknown one, the job itself or a cycle: a
        ``ValidationError`` on ``dependsOn``); ``audit``: the entry that records the change.
        The change, the upstreams and the entry are written in one transaction.

        A change of a versioned field bumps the version (the store keeps the old snapshot); a
        change of the schedule or of ``is_active`` recomputes the next fire. A concurrent change
        of the same job raises ``ConflictError``.

        ``is_active`` given (true or false) also ends the auto-disable state: true re-enables
        the job (consecutive failures, reason, time and probing cleared); false makes it a
        manual disable (no probe run after a cooldown).

        ``if_match`` (an ``If-Match`` header): the change applies only to the job whose
        :attr:`~rota.core.models.Job.etag` it names, so a client sending back an old copy
        (say ``isActive: true`` read before an auto-disable) is refused, not obeyed.
        """
        _check_change_keys(changes)
        edges = None if depends_on is None else parse_dependencies(job_id, depends_on)
        current = await self._store.get_job(job_id)
        check_etag(current, if_match)
        if edges is not None:
            await refuse_cycle(self._linked_store(), job_id, edges)
        now = self.now()
        candidate = replace(current, **changes)
        with_state = "is_active" in changes
        if with_state:
            candidate = replace(candidate, disabled_reason=None, disabled_at=None, probing=False)
            if changes["is_active"] is True:
                candidate = replace(candidate, consecutive_failures=0, last_failure_at=None)
        directory: WorkerDirectory | None = None
        if {"worker_id", "job_type", "job_data"} & set(changes):
            directory = await self._fresh_directory()
        if "worker_id" in changes or "job_type" in changes:
            groups = _no_groups if directory is None else directory.groups_for
            candidate = replace(
                candidate,
                worker_id=_resolve(candidate, _no_groups if candidate.worker_id else groups),
            )
        changed = _normalise(candidate)
        if "job_data" in changes:
            self.check_job_data(changed.job_data)
        if {"worker_id", "job_type", "job_data"} & set(changes):
            self._check_schema(changed.job_type, changed.worker_id, changed.job_data, directory)
        versioned = any(getattr(current, f) != getattr(changed, f) for f in VERSIONED_FIELDS)
        changed = replace(
            changed,
            version=current.version + 1 if versioned else current.version,
            next_run_at=await self._next_run(current, changed, now),
            updated_at=now,
            updated_by=by,
        )
        if edges is None and audit is None:
            stored = await self._store.update_job(
                changed, expected_version=current.version, with_state=with_state
            )
        else:
            stored = await self._update_linked(changed, current, with_state, edges, audit, now)
        self.events.emit(job_changed(EventType.JOB_UPDATED, [stored.id]))
        if edges is not None and self._on_dependencies is not None:
            await self._guarded(self._on_dependencies())
        await self._sync_index([stored], now, remove_cold=True)
        if current.is_active and not stored.is_active and self._cancel_ahead is not None:
            await self._cancel_ahead(stored.id, "job disabled before its due time")
        elif versioned and stored.is_active and self._supersede_ahead is not None:
            await self._supersede_ahead(stored)
        return stored

    async def _update_linked(
        self,
        changed: Job,
        current: Job,
        with_state: bool,
        edges: list[Dependency] | None,
        audit: AuditNote | None,
        now: datetime,
    ) -> Job:
        """The change with its new upstreams (``None``: unchanged) and audit entry."""
        linked = self._linked_store()
        if audit is None:
            entries = []
        else:
            upstreams = edges
            if upstreams is None:  # as they stay: the entry shows them
                found = await linked.dependency_edges([changed.id])
                upstreams = [e for e in found if e.job_id == changed.id]
            entries = [await audit.entry([changed], upstreams, now)]
        try:
            return await linked.update_linked_job(
                changed,
                expected_version=current.version,
                with_state=with_state,
                edges=edges,
                audit=entries,
            )
        except NotFoundError as exc:  # an upstream deleted meanwhile, or the job itself
            raise (upstream_refused(exc, edges or ()) or exc) from None

    def _linked_store(self) -> DependencyStore:
        if self._linked is None:
            raise TypeError("this store keeps no dependencies: use a DependencyAwareStore")
        return self._linked

    async def release_probes(self, page_size: int = 500) -> list[Job]:
        """Let probe runs through for the auto-disabled recurring jobs whose cooldown has
        passed: each becomes active again, ``probing``, with its next fire. The store ends the
        probe: the next occurrence that completes enables the job for good, the next final
        failure disables it again (a new ``disabled_at``, so a new cooldown).

        Every candidate is looked at, page by page. Each release is a conditional write that
        applies only if the job is still as read (same ``disabled_at`` and version, still
        inactive and not probing): a job enabled, disabled by hand or edited meanwhile, or
        released by another server, or disabled again by a probe that just failed, is left
        as it is (the next pass sees it as it is)."""
        now = self.now()
        defaults = self.auto_disable_defaults
        released: list[Job] = []
        after: UUID | None = None
        while True:
            scan = await self._store.due_probes(now, defaults, after=after, limit=page_size)
            for job in scan.due:
                if job.disabled_at is None:  # not so from due_probes; keeps the type narrow
                    continue
                changed = replace(job, is_active=True, probing=True)
                stored = await self._store.release_probe(
                    job.id,
                    seen_disabled_at=job.disabled_at,
                    seen_version=job.version,
                    next_run_at=await self._next_run(job, changed, now),
                    at=now,
                )
                if stored is None:
                    continue
                logger.info(
                    "auto-disabled job let through for a probe run",
                    extra={"action": "auto_disable_probe", "job_id": job.id},
                )
                released.append(stored)
            if scan.after is None:
                break
            after = scan.after
        self.events.emit(job_changed(EventType.JOB_UPDATED, [j.id for j in released]))
        await self._sync_index(released, now, remove_cold=False)
        return released

    async def drop_disabled(self, entries: Sequence[tuple[int, UUID]]) -> None:
        """Remove auto-disabled jobs' entries from the schedule index (best effort: the
        dispatcher and the loader skip inactive jobs anyway)."""
        if entries:
            await self._guarded(self._index.remove(list(entries)))

    async def delete_job(self, job_id: UUID, *, if_match: str | None = None) -> None:
        """Delete a job (its occurrences stay) and drop its schedule index entry (``if_match``:
        only the job of that entity tag)."""
        job = await self._store.get_job(job_id)
        check_etag(job, if_match)
        await self._store.delete_job(job_id)
        self.events.emit(job_changed(EventType.JOB_DELETED, [job_id]))
        await self._guarded(self._index.remove([(job.bucket, job.id)]))
        if self._cancel_ahead is not None:
            await self._cancel_ahead(job_id, "job deleted before its due time")

    async def trigger(
        self,
        job_id: UUID,
        *,
        reason: str | None = None,
        job_data: JsonValue = None,
        force: bool = False,
        delay_seconds: float = 0.0,
    ) -> Occurrence:
        """Run a job now (or ``delay_seconds`` from now: scheduled then, sent when due),
        outside its schedule: a Queued occurrence the dispatcher publishes.

        With the Skip policy and a run of the job in progress (Running, or Queued and due: a
        fire sent ahead and not due yet is none), refuse with ``ConflictError`` unless
        ``force``; a fire sent ahead is judged at its due time against this run.
        ``job_data`` (when given) replaces the job's data for this run only. An inactive job
        can be triggered too (a manual run is explicit). A job whose type no worker has ever
        declared gets its occurrence recorded Skipped (``no_worker``), as its fires are:
        nothing would ever run it.
        """
        if job_data is not None:
            self.check_job_data(job_data)
        job = await self._store.get_job(job_id)
        directory = await self._fresh_directory()
        if job_data is not None:
            self._check_schema(job.job_type, job.worker_id, job_data, directory)
        sent_ahead: list[Occurrence] = []
        if job.concurrency_policy is ConcurrencyPolicy.SKIP and not force:
            sent_ahead = await self._refuse_overlap(job)
        now = self.now()
        description = None if directory is None else directory.type_description(job.job_type)
        job = with_type_defaults(job, description)
        # A type no worker ever declared would wait for good: Skipped, as its fires are.
        unknown = self._workers.complete and not self._workers.declared(job.job_type, job.worker_id)
        occurrence = new_occurrence(
            job,
            now + timedelta(seconds=max(0.0, delay_seconds)),
            now,
            self._plan,
            skip_reason=SkipReason.NO_WORKER if unknown else None,
            trigger_reason=reason or "manual",
            job_data=job_data,
        )
        if self._stamp is not None:
            occurrence = self._stamp(occurrence)
        await self._store.insert_occurrences([occurrence])
        if self._on_triggered is not None:
            self._on_triggered(occurrence)
        if self._judge_ahead is not None and occurrence.status is OccurrenceStatus.QUEUED:
            for fire in sent_ahead:
                task = asyncio.create_task(self._judge_ahead(fire, occurrence.id))
                self._judging.add(task)
                task.add_done_callback(self._judging.discard)
        self.events.occurrences_created([occurrence])
        await self._guarded(self._coordination.wake(now.timestamp()))
        return occurrence

    async def resolve_worker_id(self, job_type: str, worker_id: str | None) -> str | None:
        """``worker_id`` if given; else the one live worker group declaring ``job_type``, or
        ``None`` when no group or several do (workers may register later)."""
        if worker_id and worker_id.strip():
            return worker_id.strip()
        return _pick_group(job_type, await self._declared_groups())

    async def refresh_workers(self) -> None:
        """Read the worker registry if the copy :meth:`job_warnings` uses is over a second
        old (a registry that does not answer leaves the copy as it is)."""
        try:
            await self._workers.refresh()
        except BackendUnavailableError as exc:
            logger.debug("worker registry unavailable: %s", exc)

    def job_warnings(self, job: Job) -> list[JobWarning]:
        """What its author should know about an accepted job: its type never declared, or
        with no live worker (:func:`~rota.services.jobwarnings.job_type_warnings`)."""
        return job_type_warnings(self._workers, job.job_type, job.worker_id)

    # --- helpers ----------------------------------------------------------------------------

    def _check_schema(
        self,
        job_type: str,
        worker_id: str | None,
        data: JsonValue,
        directory: WorkerDirectory | None,
        field: str = "jobData",
    ) -> None:
        """``ValidationError`` (field ``jobData.<path>``) when ``data`` breaks the server's
        own rules of ``job_type`` (``schemas.check_rules``: the URL rules of ``http.request``),
        or does not fit the data schema a worker last published for it, live or not (of
        ``worker_id``'s group if it did); no schema check when none is known or the registry
        is down."""
        self.schemas.check_rules(job_type, data, field)
        if directory is None:
            return
        description = directory.data_description(job_type.strip(), worker_id)
        self.schemas.check(job_type, description, placeholders(data), field)  # refs: strings

    def check_job_data(self, data: JsonValue, field: str = "jobData") -> None:
        """``ValidationError`` when ``data`` nests deeper than the limit
        (``max_json_depth``), is larger, as JSON, than the limit (``max_job_data_bytes``), or
        cannot be JSON at all. The depth is measured first and without recursion, so data
        from any caller is safe to check."""
        if data is None:
            return
        depth = self.max_json_depth
        if value_too_deep(data, depth):
            raise ValidationError(
                f"jobData is nested more than {depth} levels deep (ROTA_API__MAX_JSON_DEPTH)",
                field=field,
            )
        limit = self.max_job_data_bytes
        try:
            size = len(orjson.dumps(data))
        except TypeError as exc:
            raise ValidationError(f"jobData is not JSON: {exc}", field=field) from None
        if size > limit:
            raise ValidationError(
                f"jobData is {size} bytes as JSON; the limit is {limit} "
                "(ROTA_API__MAX_JOB_DATA_BYTES)",
                field=field,
            )
        references(data, field)  # each {"$secret": name} well named

    def now(self) -> datetime:
        """The service clock's current time (aware UTC)."""
        return as_utc(self._clock())

    def _new_job(
        self,
        spec: JobSpec,
        now: datetime,
        workers: GroupLookup,
        directory: WorkerDirectory | None = None,
    ) -> Job:
        fields = normalised(spec)
        self.check_job_data(spec.job_data)
        job_id = new_id()
        worker_id = spec.worker_id
        if spec.source is not JobSource.CODE:  # a code job runs on any group declaring its type
            worker_id = _resolve_group(fields["job_type"], worker_id, workers)
        if spec.source is not JobSource.CODE:
            # (a code job's data is its worker's own business: declared with it)
            self._check_schema(fields["job_type"], worker_id, spec.job_data, directory)
        job = Job(
            id=job_id,
            worker_id=worker_id,
            job_data=spec.job_data,
            bucket=bucket_of(job_id, self._config.bucket_count),
            created_at=now,
            updated_at=now,
            created_by=spec.created_by,
            updated_by=spec.created_by,
            source=spec.source,
            declared_spec=spec.declared_spec,
            # a one-time job's first fire is its execute_at (first_run_at's answer): the
            # job is built once, not twice (a bulk create of one-time jobs, issue 19)
            next_run_at=fields.get("execute_at") if fields.get("is_active", True) else None,
            **fields,
        )
        if job.is_active and job.is_recurring:
            return replace(job, next_run_at=first_run_at(job, now))
        return job

    async def _next_run(self, old: Job, new: Job, now: datetime) -> datetime | None:
        if not new.is_active:
            return None
        rescheduled = any(getattr(old, f) != getattr(new, f) for f in SCHEDULE_FIELDS)
        if not rescheduled and old.is_active:
            return old.next_run_at
        if not rescheduled and not new.is_recurring and await self._fired(new):
            return None  # a one-time job switched back on after it ran: nothing left to fire
        return first_run_at(new, now)

    async def _fired(self, job: Job) -> bool:
        """Whether the one-time job already has an occurrence for its ``execute_at``."""
        assert job.execute_at is not None
        tick = timedelta(microseconds=1)
        page = await self._store.list_occurrences(
            OccurrenceQuery(
                job_id=job.id,
                scheduled_after=job.execute_at - tick,
                scheduled_before=job.execute_at + tick,
                limit=10,
            )
        )
        return any(o.scheduled_for == job.execute_at for o in page.items)

    async def _refuse_overlap(self, job: Job) -> list[Occurrence]:
        """Refuse a run in progress; returns the fires sent ahead, not due yet."""
        statuses = (OccurrenceStatus.QUEUED, OccurrenceStatus.RUNNING)
        query = OccurrenceQuery(job_id=job.id, statuses=statuses, limit=100)
        active, now = (await self._store.list_occurrences(query)).items, self.now()
        if in_progress(active, now):
            raise ConflictError(
                f"job {job.id} has an occurrence queued or running and its concurrency policy "
                "is Skip; trigger with force to run it anyway"
            )
        return ahead(active, now)

    async def _fresh_directory(self) -> WorkerDirectory | None:
        """The live workers' declarations, read now; ``None`` if the registry is down."""
        try:
            await self._workers.refresh(force=True)
        except BackendUnavailableError:
            logger.warning("worker registry unavailable; job type defaults and groups unknown")
            return None
        return self._workers

    async def _declared_groups(self) -> GroupLookup:
        """Job type -> the live worker groups declaring it (none if the registry is down)."""
        directory = await self._fresh_directory()
        return _no_groups if directory is None else directory.groups_for

    async def _sync_index(self, jobs: Sequence[Job], now: datetime, *, remove_cold: bool) -> None:
        """Put hot jobs into the index (and wake the dispatchers); drop the others' entries."""
        until = now + timedelta(seconds=self._config.hot_window_seconds)
        hot: list[IndexEntry] = []
        cold: list[tuple[int, UUID]] = []
        for job in jobs:
            if job.is_active and job.next_run_at is not None and job.next_run_at <= until:
                hot.append(IndexEntry(job.id, job.bucket, job.next_run_at.timestamp()))
            else:
                cold.append((job.bucket, job.id))
        if cold and remove_cold:
            await self._guarded(self._index.remove(cold))
        if hot and await self._guarded(self._index.upsert(hot)):
            await self._guarded(self._coordination.wake(min(e.due for e in hot)))

    @staticmethod
    async def _guarded(call: Any) -> bool:
        """Await a best-effort index/coordination call; the store has the truth already."""
        try:
            await call
        except BackendUnavailableError as exc:
            logger.warning("schedule index or coordination unavailable: %s", exc)
            return False
        return True


# --- validation (pure) -----------------------------------------------------------------------


def _as_spec(spec: JobSpec | Mapping[str, Any]) -> JobSpec:
    if isinstance(spec, JobSpec):
        return spec
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        raise ValidationError(f"unknown field {api_name(unknown[0])}", field=api_name(unknown[0]))
    if "job_type" not in spec:
        raise ValidationError("jobType is required", field="jobType")
    return JobSpec(**spec)


def check_etag(job: Job, if_match: str | None) -> None:
    """Refuse a conditional change whose ``If-Match`` names none of the job's entity tags
    (``*`` matches any existing job; weak tags ``W/"…"`` compare by their value)."""
    if if_match is None:
        return
    tags = [tag.strip().removeprefix("W/") for tag in if_match.split(",")]
    if "*" in tags or job.etag in tags:
        return
    raise PreconditionFailedError(
        f"job {job.id} changed since that copy was read (its entity tag is now {job.etag}); "
        "read it again and re-apply the change"
    )


def _check_change_keys(changes: Mapping[str, Any]) -> None:
    for key, value in changes.items():
        if key not in UPDATABLE_FIELDS:
            raise ValidationError(f"{api_name(key)} cannot be changed", field=api_name(key))
        if value is None and key not in NULLABLE_FIELDS:
            raise ValidationError(f"{api_name(key)} may not be null", field=api_name(key))


def _no_groups(job_type: str) -> set[str]:
    return set()


def _resolve(job: Job, workers: GroupLookup) -> str | None:
    """The job's worker id as given, else the one group declaring its type (if exactly one)."""
    return _resolve_group(job.job_type, job.worker_id, workers)


def _resolve_group(job_type: object, worker_id: object, workers: GroupLookup) -> str | None:
    given = text_value(worker_id, "worker_id").strip()
    if given:
        return given
    return _pick_group(job_type, workers) if isinstance(job_type, str) else None


def _pick_group(job_type: str, workers: GroupLookup) -> str | None:
    groups = workers(job_type.strip())
    return next(iter(groups)) if len(groups) == 1 else None


def _normalise(job: Job) -> Job:
    """The job with its inputs checked and put in canonical form, or ``ValidationError``."""
    return replace(job, **normalised(job))
