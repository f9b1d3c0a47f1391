"""The composition root: the one place that picks adapters from settings and wires services.

Entry points (CLI, API app, bench, tests) call :func:`build_runtime` and then ``start``/``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import secrets
import socket
from collections.abc import Coroutine, Sequence
from datetime import datetime
from typing import Any

from rota.adapters import make_broker, make_coordination, make_index
from rota.core.models import OccurrenceStatus, WorkerInfo, utcnow
from rota.core.ports import Broker, Coordination, ScheduleIndex, StatusResult, Store
from rota.services.buckets import BucketOwner
from rota.services.deadletters import DeadLetterHandler
from rota.services.declared import DeclaredSchedules
from rota.services.dispatcher import Dispatcher
from rota.services.jobs import JobService
from rota.services.loader import Loader
from rota.services.probes import ProbeReleaser
from rota.services.recovery import recover_embedded
from rota.services.tracker import LogCollector, StatusTracker
from rota.services.workers import WorkerDirectory
from rota.services.zombies import ZombieDetector
from rota.settings import Settings
from rota.worker.discovery import JobRegistry
from rota.worker.executor import Executor
from rota.worker.presence import WorkerPresence

log = logging.getLogger(__name__)

EMBEDDED_WORKER_ID = "embedded"


def new_instance_id(prefix: str) -> str:
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Runtime:
    """Everything one ``rota dev`` / ``rota server`` process runs, wired together."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        index: ScheduleIndex,
        broker: Broker,
        coordination: Coordination,
        registry: JobRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.index = index
        self.broker = broker
        self.coordination = coordination
        self.registry = registry
        self.instance_id = new_instance_id("rota")
        sched = settings.scheduler
        self.workers = WorkerDirectory(coordination)
        self.owner = BucketOwner(
            coordination,
            self.instance_id,
            bucket_count=sched.bucket_count,
            lease_seconds=sched.lease_seconds,
            on_gained=lambda _b: self.loader.kick(),
        )
        self.dispatcher = Dispatcher(
            store,
            index,
            broker,
            self.workers,
            sched,
            lambda: self.owner.buckets,
            utcnow,
            mark_on_commit=settings.is_embedded,
            pending_grace=0.0 if settings.is_embedded else sched.sweeper_grace_seconds,
        )
        self.loader = Loader(
            store,
            index,
            lambda: self.owner.buckets,
            window_seconds=sched.hot_window_seconds,
            interval_seconds=sched.loader_interval_seconds,
            on_loaded=self.dispatcher.wake,
        )
        self.tracker = StatusTracker(
            store,
            broker,
            batch_size=settings.tracker.batch_size,
            max_wait=settings.tracker.max_wait_seconds,
            on_applied=self._after_status,
        )
        self.log_collector = LogCollector(
            store,
            broker,
            batch_size=settings.tracker.batch_size,
            max_wait=settings.tracker.max_wait_seconds,
        )
        self.dead_letters = DeadLetterHandler(
            store,
            broker,
            batch_size=settings.tracker.batch_size,
            max_wait=settings.tracker.max_wait_seconds,
            on_applied=self._after_status,
        )
        self.zombies = ZombieDetector(
            store,
            threshold_seconds=sched.zombie_threshold_seconds,
            interval_seconds=sched.zombie_interval_seconds,
            queued_threshold_seconds=sched.queued_zombie_threshold_seconds,
            policy=sched.zombie_policy,
            on_applied=self._after_status,
            live_workers=self._live_workers,
            live_threshold_seconds=sched.zombie_live_worker_threshold_seconds,
            max_requeues=sched.zombie_max_requeues,
        )
        self.jobs = JobService(store, index, coordination, sched, utcnow)
        self.probes = ProbeReleaser(
            self.jobs, interval_seconds=sched.auto_disable_probe_interval_seconds
        )
        self._background: set[asyncio.Task[None]] = set()
        self.declared = DeclaredSchedules(self.jobs, store, self.workers)
        self.executor: Executor | None = None
        self.presence: WorkerPresence | None = None
        if registry is not None and settings.is_embedded:
            self.executor = Executor(
                broker,
                registry,
                worker_id=EMBEDDED_WORKER_ID,
                instance_id=new_instance_id(EMBEDDED_WORKER_ID),
                concurrency=settings.worker.concurrency,
                sync_threads=settings.worker.sync_threads,
                flush_interval=settings.worker.flush_interval_seconds,
                default_timeout=settings.worker.default_timeout_seconds,
            )
            self.presence = WorkerPresence(
                coordination,
                self.executor,
                registry,
                worker_id=EMBEDDED_WORKER_ID,
                concurrency=settings.worker.concurrency,
                heartbeat_seconds=settings.worker.heartbeat_seconds,
            )
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.started_at: datetime | None = None

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        await self.store.open()
        await self.broker.start()
        if self.settings.is_embedded:
            await recover_embedded(self.store, utcnow())
        if self.executor is not None and self.presence is not None:
            await self.presence.start()
            await self.executor.start()
        await self.workers.refresh(force=True)
        await self.declared.sync_if_changed()
        await self.owner.tick()
        await self.loader.sync()
        self._spawn(self.owner.run(), "buckets")
        self._spawn(self.loader.run(), "loader")
        self._spawn(self.dispatcher.run(), "dispatcher")
        self._spawn(self.tracker.run(), "status-tracker")
        self._spawn(self.log_collector.run(), "log-collector")
        self._spawn(self.dead_letters.run(), "dead-letters")
        self._spawn(self._relay_wakeups(), "wakeups")
        self._spawn(self.zombies.run(), "zombies")
        self._spawn(self.probes.run(), "auto-disable-probes")
        self._spawn(self.declared.run(), "declared-schedules")
        self.started_at = utcnow()
        log.info("rota started", extra={"instance_id": self.instance_id})

    async def stop(self, *, grace: float = 10.0) -> None:
        """Graceful stop: no new dispatch, running jobs finish (up to ``grace``), their reports
        are stored, leases released."""
        self._stopping = True
        await self.owner.begin_release()
        self.dispatcher.stop()
        self.zombies.stop()
        self.probes.stop()
        if self.executor is not None and self.presence is not None:
            await self.executor.stop(grace)
            await self.presence.stop()
        await self._drain_reports(deadline=5.0)
        # Let an in-flight dispatch batch finish (published and marked) before cancelling.
        dispatching = [t for t in self._tasks if t.get_name() == "rota-dispatcher"]
        if dispatching:
            await asyncio.wait(dispatching, timeout=grace)
        self.loader.stop()
        self.declared.stop()
        self.tracker.stop()
        self.log_collector.stop()
        self.dead_letters.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        with contextlib.suppress(Exception):
            await self.owner.release()
        await self.broker.close()
        await self.coordination.close()
        await self.index.close()
        await self.store.close()

    async def _drain_reports(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        prefix = self.settings.name_prefix
        queues = (f"{prefix}.status", f"{prefix}.logs")
        while loop.time() < end:
            depths = await self.broker.queue_depths()
            holding = self.tracker.stats.holding or self.log_collector.stats.holding
            if not any(depths.get(name) for name in queues) and not holding:
                return
            await asyncio.sleep(0.02)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=f"rota-{name}")
        task.add_done_callback(self._ended)
        self._tasks.append(task)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """Every loop runs until :meth:`stop`: one that ends before (a bug, or a cancellation
        that leaked into it) would leave its work undone without a sign, so it is logged."""
        if self._stopping:
            return
        error = None if task.cancelled() else task.exception()
        log.error(
            "loop %s ended before the stop: %s",
            task.get_name(),
            "cancelled" if task.cancelled() else repr(error),
            exc_info=error,
            extra={"action": "loop_died", "loop": task.get_name()},
        )

    # --- glue -----------------------------------------------------------------------------

    def _after_status(self, result: StatusResult) -> None:
        if result.disabled:
            self._drop_disabled(result)
        # A retry (back to Queued) is pending now; a finished occurrence may release one held
        # behind it (Queue policy). Otherwise there is nothing new for the dispatcher.
        for change in result.applied:
            if change.to_status is OccurrenceStatus.QUEUED or (
                self.dispatcher.has_held and change.to_status.is_terminal
            ):
                self.dispatcher.wake(None)
                return

    def _drop_disabled(self, result: StatusResult) -> None:
        """Auto-disabled jobs leave the schedule index (in the background: the dispatcher
        skips inactive jobs anyway, this only spares it the visit)."""
        for job in result.disabled:
            log.warning(
                "job auto-disabled: %s",
                job.reason,
                extra={"action": "auto_disable", "job_id": job.job_id},
            )
        entries = [(job.bucket, job.job_id) for job in result.disabled]
        task = asyncio.create_task(self.jobs.drop_disabled(entries))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _live_workers(self) -> list[WorkerInfo]:
        await self.workers.refresh()
        return list(self.workers.workers)

    async def _relay_wakeups(self) -> None:
        async for due in self.coordination.wakeups():
            self.dispatcher.wake(due)

    async def health(self) -> dict[str, str]:
        """Each component's state: ``ok`` or the error text."""
        out: dict[str, str] = {}
        checks: dict[str, Coroutine[Any, Any, object]] = {
            "store": self.store.ping(),
            "index": self.index.size([]),
            "broker": self.broker.queue_depths(),
        }
        for name, check in checks.items():
            try:
                await asyncio.wait_for(check, timeout=2.0)
                out[name] = "ok"
            except Exception as exc:
                out[name] = f"error: {exc}"
        return out


def tune_gc() -> None:
    """For long-running entry points: move what start-up allocated out of the collector's
    reach and collect the young generation less often. A scheduler allocates many short-lived
    records; full collections over a large heap otherwise stall the loop for tens of ms."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def build_runtime(settings: Settings, registry: JobRegistry | None = None) -> Runtime:
    """Pick the adapters the settings name and wire a :class:`Runtime`."""
    from rota.stores.sql import SqlStore

    store = SqlStore(settings.effective_database_url, auto_disable=settings.scheduler.auto_disable)
    broker = make_broker(settings)
    index = make_index(settings)
    coordination = make_coordination(settings)
    return Runtime(
        settings,
        store=store,
        index=index,
        broker=broker,
        coordination=coordination,
        registry=registry,
    )


__all__: Sequence[str] = ("Runtime", "build_runtime")
