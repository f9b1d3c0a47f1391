"""A worker instance's presence in the coordination registry: what it declares (job types
with their data schemas and defaults, concurrency, version), refreshed with its current load
on every heartbeat; removed at a graceful stop, expired after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version

from rota.core.models import WorkerInfo, utcnow
from rota.core.ports import Coordination
from rota.core.records import Cancellation
from rota.core.timing import off_the_second
from rota.sdk.registry import JobRegistry
from rota.worker.executor import Executor

log = logging.getLogger(__name__)


def rota_version() -> str:
    try:
        return version("rota")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "dev"


class WorkerPresence:
    """Registers an executor's worker instance and keeps it registered."""

    def __init__(
        self,
        coordination: Coordination,
        executor: Executor,
        registry: JobRegistry,
        *,
        worker_id: str,
        concurrency: int,
        heartbeat_seconds: float,
        envelope_jobs: int = 0,
    ) -> None:
        self._coordination = coordination
        self._executor = executor
        self._registry = registry
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._interval = heartbeat_seconds
        self._envelope_jobs = envelope_jobs
        """The most jobs it takes in one envelope (what its broker's consumer reads)."""
        self._started_at = utcnow()
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._cancels: AsyncIterator[Cancellation] | None = None

    @property
    def ttl(self) -> float:
        """Three missed heartbeats and the instance is gone."""
        return self._interval * 3

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            instance_id=self._executor.instance_id,
            worker_id=self._worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            job_types=self._registry.describe(),
            concurrency=self._concurrency,
            version=rota_version(),
            current_load=self._executor.load,
            started_at=self._started_at,
            last_heartbeat=utcnow(),
            envelope_jobs=self._envelope_jobs,
        )

    async def register(self) -> None:
        await self._coordination.register_worker(self.info(), self.ttl)
        if self._envelope_jobs:
            self._executor.envelopes = await self._group_reads_envelopes()

    async def _group_reads_envelopes(self) -> bool:
        """Whether every live instance of the group announced envelopes: the dispatchers
        then send the group's jobs in envelopes (the same rule)."""
        group = [w for w in await self._coordination.workers() if w.worker_id == self._worker_id]
        return bool(group) and all(w.envelope_jobs > 1 for w in group)

    async def start(self) -> None:
        # Listen for cancellations before announcing the instance: a cancel sent once the
        # scheduler sees it must be heard.
        self._cancels = self._coordination.cancellations()
        self._listener = asyncio.create_task(self._listen(), name="rota-worker-cancellations")
        await self.register()
        self._task = asyncio.create_task(self._beat(), name="rota-worker-presence")

    async def _listen(self) -> None:
        """Cancel what runs here when the cancellation channel names it (every instance hears
        every cancellation; one that does not run the occurrence remembers it briefly, in case
        its message is still on the way)."""
        assert self._cancels is not None
        while True:
            try:
                async for asked in self._cancels:
                    if asked.superseded_below is not None:
                        self._executor.supersede(asked.occurrence_id, asked.superseded_below)
                    elif self._executor.cancel(asked.occurrence_id, asked.reason):
                        log.info(
                            "occurrence cancelled", extra={"occurrence_id": asked.occurrence_id}
                        )
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the listener die
                log.warning("cancellation channel failed: %s", exc)
                await asyncio.sleep(1.0)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(off_the_second(self._interval))
            try:
                await self.register()
            except Exception as exc:  # never let the heartbeat die
                log.warning("worker heartbeat failed: %s", exc)

    async def stop(self) -> None:
        for task in (self._task, self._listener):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._listener = None
        cancels, self._cancels = self._cancels, None
        aclose = getattr(cancels, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        try:
            await self._coordination.unregister_worker(self._executor.instance_id)
        except Exception as exc:
            log.warning("could not unregister worker instance: %s", exc)
