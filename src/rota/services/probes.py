"""Auto-disable probes: periodically let one probe run through for each auto-disabled job whose
cooldown has passed (:meth:`~rota.services.jobs.JobService.release_probes`). Every server runs
one; a release is a conditional write, so of two servers releasing the same job only one
applies (and none over a change made since they read it)."""

from __future__ import annotations

import asyncio
import logging

from rota.services._loop import run_periodically
from rota.services.jobs import JobService

log = logging.getLogger(__name__)


class ProbeReleaser:
    def __init__(self, jobs: JobService, *, interval_seconds: float) -> None:
        self._jobs = jobs
        self._interval = interval_seconds
        self._stopping = asyncio.Event()
        self.released = 0
        """Probe runs let through since start."""

    async def release(self) -> int:
        released = await self._jobs.release_probes()
        self.released += len(released)
        return len(released)

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Release due probes every interval until :meth:`stop`; the loop never dies."""
        await run_periodically(
            "auto-disable probe check", self.release, self._interval, self._stopping, log=log
        )
