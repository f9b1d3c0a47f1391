"""The store's slice for pausing jobs and skipping their next fires
(:mod:`rota.services.pausing`, docs/concepts.md#pause-and-skip)."""

from __future__ import annotations

import abc
from datetime import datetime
from uuid import UUID

from rota.core.models import Job


class PauseStore(abc.ABC):
    """The pause and skip state of jobs (the ``Part.PAUSE`` fields). The dispatcher reads it
    with the rest of a due job, and counts ``skip_next`` down in its dispatch transaction."""

    @abc.abstractmethod
    async def pause_job(
        self, job_id: UUID, at: datetime, by: str | None, note: str | None, until: datetime | None
    ) -> Job:
        """Pause the job (a paused one: its pause replaced): the job as it is now.
        :class:`~rota.core.errors.NotFoundError` if there is none."""

    @abc.abstractmethod
    async def resume_job(self, job_id: UUID) -> Job | None:
        """End the job's pause: the job as it is now; ``None`` if it was not paused.
        :class:`~rota.core.errors.NotFoundError` if there is none."""

    @abc.abstractmethod
    async def set_skip_next(self, job_id: UUID, count: int, note: str | None) -> Job:
        """Skip the job's next ``count`` fires (0: none, the note cleared too): the job as it
        is now. :class:`~rota.core.errors.NotFoundError` if there is none."""

    @abc.abstractmethod
    async def end_pauses(self, now: datetime, limit: int) -> list[Job]:
        """End at most ``limit`` pauses whose ``paused_until`` is at or before ``now``, each
        once (a conditional update: of servers racing for the same pause one ends it, the
        others pass over it): the jobs whose pause this call ended, as they were before."""
