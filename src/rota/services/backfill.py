"""Backfill: run a recurring job for the fires of a past window (``POST /jobs/{id}/backfill``,
docs/concepts.md#backfill).

One occurrence per fire of the job's cron expression in ``[from, to]`` (both included; a
cron job with an ``executeAt`` start has no fire before it), at most :data:`MAX_FIRES`; a fire
the job already has an occurrence of (it ran, was skipped, or an earlier backfill made it) is
left as it is. The new occurrences are Queued for dispatch now, oldest fire first, and run one
after another: each waits for the job's earlier occurrences to end, whatever the job's overlap
policy (a backfill never runs a job twice at once). Each keeps its fire time as
``scheduledFor`` and ``backfill`` (or the reason given) as its trigger reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from msgspec.structs import replace

from rota.core.errors import BackendUnavailableError, ValidationError
from rota.core.jobspec import as_utc
from rota.core.models import Occurrence, SkipReason
from rota.core.planning import PlanSettings, new_occurrence, recurrence
from rota.core.ports import Coordination, JobAdminStore
from rota.services.events import EventPublisher
from rota.services.workers import WorkerDirectory

__all__ = ["EARLIEST", "MAX_FIRES", "Backfill", "BackfillResult"]

MAX_FIRES = 1000
"""The most fires one backfill covers (a larger window is refused: backfill it in parts)."""
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest start of a window: fires before it are not computed (a cron schedule near the
year 1 would step outside the dates Python can hold)."""


@dataclass(frozen=True, slots=True)
class BackfillResult:
    fires: int
    """Fires of the cron expression in the window."""
    created: list[Occurrence]
    """The occurrences made for the fires that had none."""

    @property
    def already_recorded(self) -> int:
        return self.fires - len(self.created)


class Backfill:
    """Creates the occurrences of a past window's fires (see the module)."""

    def __init__(
        self,
        store: JobAdminStore,
        coordination: Coordination,
        plan: PlanSettings,
        clock: Callable[[], datetime],
        *,
        events: EventPublisher,
        workers: WorkerDirectory,
    ) -> None:
        self._store = store
        self._coordination = coordination
        self._plan = plan
        self._clock = clock
        self._events = events
        self._workers = workers

    async def backfill(
        self, job_id: UUID, start: datetime, end: datetime, *, reason: str | None = None
    ) -> BackfillResult:
        start, end, now = as_utc(start), as_utc(end), self._clock()
        if start < EARLIEST:
            raise ValidationError(f"from must not be before {EARLIEST.isoformat()}", field="from")
        if end < start:
            raise ValidationError("to must not be before from", field="to")
        if end > now:
            raise ValidationError(
                "to must not be in the future: a backfill runs past fires (the schedule runs "
                "the coming ones)",
                field="to",
            )
        job = await self._store.get_job(job_id)
        schedule = recurrence(job)
        if schedule is None:
            raise ValidationError(
                "a one-time job has no fires to backfill: trigger it to run it again",
                field="jobId",
            )
        for bound in (job.execute_at if job.cron_expression else None, job.start_at):
            if bound is not None:
                start = max(start, bound)
        if job.end_at is not None:
            end = min(end, job.end_at)
        fires: list[datetime] = []
        fire = schedule.next_after(start - timedelta(microseconds=1))
        while fire <= end and len(fires) <= MAX_FIRES:
            fires.append(fire)
            fire = schedule.next_after(fire)
        if len(fires) > MAX_FIRES:
            raise ValidationError(
                f"the window holds more than {MAX_FIRES} fires of the job's schedule: "
                "backfill it in parts",
                field="to",
            )
        recorded = await self._store.recorded_fires(job.id, start, end) if fires else set()
        with contextlib.suppress(BackendUnavailableError):  # unknown: as a registry that is down
            await self._workers.refresh()
        # A type no worker ever declared would wait for good: Skipped, as its fires are.
        unknown = self._workers.complete and not self._workers.declared(job.job_type, job.worker_id)
        created = [
            new_occurrence(
                job,
                fire,
                now,
                self._plan,
                skip_reason=SkipReason.NO_WORKER if unknown else None,
                trigger_reason=reason or "backfill",
            )
            for fire in fires
            if fire not in recorded
        ]
        # dispatched now (not at their fire times, long past), oldest fire first
        created = [_due_now(occurrence, now) for occurrence in created]
        await self._store.insert_occurrences(created, sequential=True)
        if created:
            self._events.occurrences_created(created)
            # the sweep publishes them within seconds if this wake-up is lost
            with contextlib.suppress(BackendUnavailableError):
                await self._coordination.wake(now.timestamp())
        return BackfillResult(fires=len(fires), created=created)


def _due_now(occurrence: Occurrence, now: datetime) -> Occurrence:
    return replace(occurrence, due_at=now)
