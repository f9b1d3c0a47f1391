"""Pause with intent, and skip the next N fires (``POST /jobs/{id}/pause``, ``/resume``,
``/skip``; docs/concepts.md#pause-and-skip).

A paused job keeps its schedule: each fire that comes while it is paused is recorded Skipped
(reason ``paused``, the note in its status change: ``paused: <note>``) instead of running,
so the fires not run stay on record and the missed-fire alert has nothing to flag. A pause
with an end (``until``) ends by itself: the dispatcher runs the fires from that time on, and
:class:`Pausing`'s loop (every server, about every second) clears the pause once, by a
conditional update in the store (of servers racing for it one wins), and audits it as
``job.resumed`` by ``system``.

Pause is neither ``isActive`` (off: no fire at all, nothing recorded) nor the auto-disable
state (off because failing); neither changes the others: a resume leaves a job disabled by
hand or by its failures as it is, and enabling a job leaves its pause as it is.

Skipping: the job's next ``count`` due fires (1..1000; 0 clears it) are recorded Skipped
(``skip_next: <note>``); the dispatcher counts them down in its dispatch transaction. A
fire missed (misfire policy) or paused counts none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from rota.core.errors import ConflictError, ValidationError
from rota.core.events import EventType, job_changed
from rota.core.jobspec import as_utc
from rota.core.models import Job, utcnow
from rota.core.ports import PauseStore
from rota.services._loop import run_periodically
from rota.services.audit import AuditService
from rota.services.events import EventPublisher

__all__ = ["MAX_NOTE", "MAX_SKIP", "SYSTEM", "Pausing"]

log = logging.getLogger(__name__)

MAX_SKIP: Final = 1000
"""The most fires one skip covers."""
MAX_NOTE: Final = 500
"""Characters of a pause or skip note."""
SYSTEM: Final = "system"
"""The actor of the audit entry of a pause that ended by itself."""
END_BATCH: Final = 500
"""Pauses ended per step (the rest on the next one)."""


def pause_view(job: Job) -> dict[str, Any]:
    """A job's pause and skip state, as the audit log keeps it."""
    return {
        "paused": job.is_paused,
        "pauseNote": job.pause_note,
        "pausedUntil": None if job.paused_until is None else job.paused_until.isoformat(),
        "skipNext": job.skip_next or 0,
        "skipNote": job.skip_note,
    }


class Pausing:
    """Pauses, resumes and skips jobs, and ends the pauses whose time came (:meth:`run`)."""

    def __init__(
        self,
        store: PauseStore,
        audit: AuditService,
        events: EventPublisher,
        *,
        clock: Callable[[], datetime] = utcnow,
        interval_seconds: float = 1.0,
        cancel_ahead: Callable[[UUID, str], Awaitable[object]] | None = None,
    ) -> None:
        """``cancel_ahead(job_id, reason)``: cancels the job's occurrences sent ahead of their
        due time (the dispatch lead) before it was paused, so none starts while it is."""
        self._cancel_ahead = cancel_ahead
        self._store = store
        self._audit = audit
        self._events = events
        self._clock = clock
        self._interval = interval_seconds
        self._stopping = asyncio.Event()
        self.ended = 0
        """Pauses this server ended since start."""

    async def pause(
        self, job_id: UUID, *, by: str, note: str | None = None, until: datetime | None = None
    ) -> Job:
        """Pause the job (a paused one: its note and end replaced)."""
        now = as_utc(self._clock())
        note = _note(note)
        if until is not None:
            until = as_utc(until)
            if until <= now:
                raise ValidationError(
                    "until must be in the future (leave it out for a pause until resumed)",
                    field="until",
                )
        job = await self._store.pause_job(job_id, now, by, note, until)
        if self._cancel_ahead is not None:
            await self._cancel_ahead(job_id, "job paused before its due time")
        await self._audit.record(by, "job.paused", "job", job_id, after=pause_view(job))
        self._changed(job)
        return job

    async def resume(self, job_id: UUID, *, by: str) -> Job:
        """End the job's pause; :class:`ConflictError` if it is not paused."""
        job = await self._store.resume_job(job_id)
        if job is None:
            raise ConflictError(f"job {job_id} is not paused")
        await self._audit.record(by, "job.resumed", "job", job_id, after=pause_view(job))
        self._changed(job)
        return job

    async def skip(self, job_id: UUID, count: int, *, by: str, note: str | None = None) -> Job:
        """Skip the job's next ``count`` fires (0: clear the count)."""
        if not 0 <= count <= MAX_SKIP:
            raise ValidationError(
                f"count must be from 0 (clear) to {MAX_SKIP}, not {count}", field="count"
            )
        job = await self._store.set_skip_next(job_id, count, _note(note))
        await self._audit.record(by, "job.skip_set", "job", job_id, after=pause_view(job))
        self._changed(job)
        return job

    async def end_due(self) -> list[Job]:
        """End the pauses whose ``until`` has come (each by one server only)."""
        ended = await self._store.end_pauses(as_utc(self._clock()), END_BATCH)
        for job in ended:
            log.info("job %s resumed: its pause ended", job.id, extra={"job_id": job.id})
            before = pause_view(job)
            after = {**before, "paused": False, "pauseNote": None, "pausedUntil": None}
            await self._audit.record(
                SYSTEM, "job.resumed", "job", job.id, before=before, after=after
            )
        if ended:
            self.ended += len(ended)
            self._events.emit(job_changed(EventType.JOB_UPDATED, [j.id for j in ended]))
        return ended

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """End due pauses every interval until :meth:`stop`; the loop never dies."""
        await run_periodically(
            "pause end check", self.end_due, self._interval, self._stopping, log=log
        )

    def _changed(self, job: Job) -> None:
        self._events.emit(job_changed(EventType.JOB_UPDATED, [job.id]))


def _note(note: str | None) -> str | None:
    if note is None:
        return None
    note = note.strip()
    if len(note) > MAX_NOTE:
        raise ValidationError(f"note is longer than {MAX_NOTE} characters", field="note")
    return note or None
