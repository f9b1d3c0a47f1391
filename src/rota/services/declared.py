"""Code-declared schedules: ``@rota.job("Cleanup", cron="0 3 * * *")`` becomes a job.

Workers never touch the store: each instance declares its job types, with their schedule if
any, in the coordination registry. Every server reads the registry (through the
:class:`~rota.services.workers.WorkerDirectory` the dispatcher uses) and, whenever a worker
instance registers or goes away, keeps one *code job* (``source`` code) per declared job type
in step with the declarations of the live instances:

- a type declared with a cron and no code job yet: the job is created (named after the type,
  with the declared cron, time zone and priority; retries and timeout follow the type's
  defaults at each fire);
- a declaration that differs from the one last applied to the job (``declared_spec``): the job
  is updated through :meth:`JobService.update_job` — a new version, its next fire and index
  entry recomputed — and switched on again;
- a type that every live instance declares without a cron: the code job is switched off
  (never deleted);
- a type no live instance declares: left alone (a worker being down is not a code change).

Code wins only when the code changes: edits made through the API (another cron, switching the
job off) stand until the declaration itself changes. When live instances disagree (a rolling
deploy), any declaration with a cron wins over one without, and among those the most recently
started instance's. Several servers may sync at once: a second code job of a type is refused by
the store (``ConflictError``: the loser re-reads), and an update re-reads the job and applies the
same declaration, so concurrent syncs end with one job at one new version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from rota.core.errors import (
    BackendUnavailableError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from rota.core.jobspec import JobSpec
from rota.core.models import Job, JobSource, JsonValue, Priority, WorkerInfo
from rota.core.ports import JobStore
from rota.services._loop import run_periodically
from rota.services.jobs import JobService
from rota.services.workers import WorkerDirectory

logger = logging.getLogger(__name__)

BY_CODE: Final = "code"
"""``created_by`` / ``updated_by`` of what the sync does."""
REMOVED_BY: Final = "code: schedule removed from code"
"""``updated_by`` of a code job switched off because its schedule left the code."""
REMOVED_SPEC: Final[Mapping[str, JsonValue]] = {"cronExpression": None}
"""The declaration applied to a code job whose type is declared without a cron."""
_ATTEMPTS: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Declaration:
    """What one worker instance declares about a job type's schedule."""

    job_type: str
    cron_expression: str | None
    time_zone: str = "UTC"
    priority: int | None = None
    instance_id: str = ""
    started_at: datetime | None = None

    def spec(self) -> dict[str, JsonValue]:
        """The declaration as a code job stores it (``declared_spec``)."""
        if self.cron_expression is None:
            return dict(REMOVED_SPEC)
        return {
            "cronExpression": self.cron_expression,
            "timeZone": self.time_zone,
            "priority": self.priority,
        }


@dataclass(slots=True)
class SyncResult:
    """Job types by what one sync did to their code job."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Declarations the job service refused (a bad cron or time zone from a worker)."""
    failed: list[str] = field(default_factory=list)
    """Types left for the next sync (store unavailable, or lost races every time)."""


def _declaration(worker: WorkerInfo, job_type: str, description: Any) -> Declaration | None:
    """The schedule part of a registered description; ``None`` if it is malformed."""
    if not isinstance(description, Mapping):
        return None
    cron = description.get("cronExpression")
    zone = description.get("timeZone") or "UTC"
    priority = description.get("priority")
    if (cron is not None and not isinstance(cron, str)) or not isinstance(zone, str):
        return None
    if isinstance(priority, bool) or not isinstance(priority, int):
        priority = None
    return Declaration(
        job_type=job_type,
        cron_expression=(cron or "").strip() or None,
        time_zone=zone.strip() or "UTC",
        priority=priority,
        instance_id=worker.instance_id,
        started_at=worker.started_at,
    )


def _by_rank(d: Declaration) -> tuple[bool, float, str]:
    """Greater wins: a cron over none, then the later start, then the greater instance id."""
    started = 0.0 if d.started_at is None else d.started_at.timestamp()
    return (d.cron_expression is not None, started, d.instance_id)


def declarations(workers: Sequence[WorkerInfo]) -> dict[str, Declaration]:
    """The effective schedule declaration of every job type the live instances declare."""
    found: dict[str, list[Declaration]] = {}
    for worker in workers:
        for job_type, description in worker.job_types.items():
            declared = _declaration(worker, job_type, description)
            if declared is None:
                logger.warning(
                    "ignoring the malformed declaration of job type %r by worker instance %s",
                    job_type,
                    worker.instance_id,
                )
                continue
            found.setdefault(job_type, []).append(declared)
    winners: dict[str, Declaration] = {}
    for job_type, candidates in found.items():
        winner = max(candidates, key=_by_rank)
        _warn_disagreement(winner, candidates)
        winners[job_type] = winner
    return winners


def _warn_disagreement(winner: Declaration, candidates: Sequence[Declaration]) -> None:
    others = {
        (d.cron_expression, d.time_zone, d.priority): d.instance_id
        for d in candidates
        if d.cron_expression is not None and d.spec() != winner.spec()
    }
    if others and winner.cron_expression is not None:
        logger.warning(
            "worker instances declare different schedules for job type %r; using %r (%s) of "
            "the most recently started instance %s over %s",
            winner.job_type,
            winner.cron_expression,
            winner.time_zone,
            winner.instance_id,
            sorted(others.values()),
            extra={"action": "declared_schedule_conflict", "job_type": winner.job_type},
        )


class DeclaredSchedules:
    """Keeps code jobs in step with what the live worker instances declare."""

    def __init__(
        self,
        jobs: JobService,
        store: JobStore,
        directory: WorkerDirectory,
        *,
        interval_seconds: float = 2.0,
    ) -> None:
        self._jobs = jobs
        self._store = store
        self._directory = directory
        self._interval = interval_seconds
        self._synced_generation: int | None = None
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Check the registry every interval; sync when an instance came or went. Never
        raises: a failed sync is retried on the next check."""
        await run_periodically(
            "code-declared schedules sync",
            self.sync_if_changed,
            self._interval,
            self._stopping,
            log=logger,
            expected=(),
        )

    def stop(self) -> None:
        self._stopping.set()

    async def sync_if_changed(self) -> SyncResult | None:
        """Sync if the registry changed since the last complete sync (``None``: it did not)."""
        try:
            await self._directory.refresh()
        except BackendUnavailableError as exc:
            logger.warning("worker registry unavailable; code schedules not synced: %s", exc)
            return None
        generation = self._directory.generation
        if generation == self._synced_generation:
            return None
        result = await self.sync(self._directory.workers)
        if not result.failed:
            self._synced_generation = generation
        return result

    async def sync(self, workers: Sequence[WorkerInfo]) -> SyncResult:
        """Bring the code jobs in step with these live instances' declarations."""
        result = SyncResult()
        wanted = declarations(workers)
        if not wanted:
            return result
        try:
            existing = {job.job_type: job for job in await self._store.code_jobs()}
        except BackendUnavailableError as exc:
            logger.warning("store unavailable; code schedules not synced: %s", exc)
            result.failed.extend(sorted(wanted))
            return result
        for job_type in sorted(wanted):
            await self._sync_type(wanted[job_type], existing.get(job_type), result)
        return result

    async def _sync_type(self, declared: Declaration, job: Job | None, result: SyncResult) -> None:
        for attempt in range(_ATTEMPTS):
            try:
                if attempt:  # lost a race (another server, an API edit or delete): re-read
                    job = await self._code_job(declared.job_type)
                action = await self._apply(declared, job)
            except (ConflictError, NotFoundError):
                continue
            except ValidationError as exc:
                logger.warning(
                    "refusing the schedule declared for job type %r: %s", declared.job_type, exc
                )
                result.refused.append(declared.job_type)
                return
            except BackendUnavailableError as exc:
                logger.warning("code schedule of %r not synced: %s", declared.job_type, exc)
                break
            if action is not None:
                getattr(result, action).append(declared.job_type)
            return
        result.failed.append(declared.job_type)

    async def _code_job(self, job_type: str) -> Job | None:
        return next((j for j in await self._store.code_jobs() if j.job_type == job_type), None)

    async def _apply(self, declared: Declaration, job: Job | None) -> str | None:
        """Create, update or switch off the code job; the name of what was done, if anything."""
        spec = declared.spec()
        if job is not None and _same(job.declared_spec, spec):
            return None  # code unchanged since last applied: API edits stand
        if declared.cron_expression is None:
            if job is None:
                return None
            changes: dict[str, Any] = {"declared_spec": spec}
            if job.is_active:
                changes["is_active"] = False
            await self._jobs.update_job(job.id, changes, by=REMOVED_BY)
            logger.info(
                "code job %s of type %r: schedule removed from code%s",
                job.id,
                job.job_type,
                ", deactivated" if job.is_active else "",
                extra={"action": "code_job_deactivated", "job_id": str(job.id)},
            )
            return "deactivated" if job.is_active else None
        priority = Priority.MEDIUM if declared.priority is None else declared.priority
        if job is None:
            created = await self._jobs.create_job(
                JobSpec(
                    job_type=declared.job_type,
                    display_name=declared.job_type,
                    cron_expression=declared.cron_expression,
                    time_zone=declared.time_zone,
                    priority=priority,
                    source=JobSource.CODE,
                    declared_spec=spec,
                    created_by=BY_CODE,
                )
            )
            logger.info(
                "code job %s created for job type %r (%s %s)",
                created.id,
                declared.job_type,
                declared.cron_expression,
                declared.time_zone,
                extra={"action": "code_job_created", "job_id": str(created.id)},
            )
            return "created"
        await self._jobs.update_job(
            job.id,
            {
                "cron_expression": declared.cron_expression,
                "time_zone": declared.time_zone,
                "execute_at": None,
                "priority": priority,
                "is_active": True,
                "declared_spec": spec,
            },
            by=BY_CODE,
        )
        logger.info(
            "code job %s of type %r updated from code (%s %s)",
            job.id,
            declared.job_type,
            declared.cron_expression,
            declared.time_zone,
            extra={"action": "code_job_updated", "job_id": str(job.id)},
        )
        return "updated"


def _same(stored: Mapping[str, JsonValue] | None, spec: Mapping[str, JsonValue]) -> bool:
    return stored is not None and dict(stored) == dict(spec)
