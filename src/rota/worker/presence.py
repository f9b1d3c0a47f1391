"""A worker instance's presence in the coordination registry: what it declares (job types
with their data schemas and defaults, concurrency, version), refreshed with its current load
on every heartbeat; removed at a graceful stop, expired after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from importlib.metadata import PackageNotFoundError, version

from rota.core.models import WorkerInfo, utcnow
from rota.core.ports import Coordination
from rota.worker.discovery import JobRegistry
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
    ) -> None:
        self._coordination = coordination
        self._executor = executor
        self._registry = registry
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._interval = heartbeat_seconds
        self._started_at = utcnow()
        self._task: asyncio.Task[None] | None = None

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
        )

    async def register(self) -> None:
        await self._coordination.register_worker(self.info(), self.ttl)

    async def start(self) -> None:
        await self.register()
        self._task = asyncio.create_task(self._beat(), name="rota-worker-presence")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.register()
            except Exception as exc:  # never let the heartbeat die
                log.warning("worker heartbeat failed: %s", exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self._coordination.unregister_worker(self._executor.instance_id)
        except Exception as exc:
            log.warning("could not unregister worker instance: %s", exc)
