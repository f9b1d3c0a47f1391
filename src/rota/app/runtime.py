"""The server's running part: the parts :mod:`rota.app.wiring` built, started, watched and
stopped together. Entry points (CLI, API app, bench, tests) get one from
:func:`rota.app.wiring.build_runtime` and call ``start``/``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rota.app.settings import Settings
from rota.app.startup import wait_for
from rota.core.errors import ConfigurationError, ValidationError
from rota.core.models import DispatcherState, utcnow
from rota.core.ports import Broker, Coordination, ScheduleIndex, Store
from rota.observability.metrics import RotaMetrics
from rota.observability.tracing import Tracing
from rota.sdk.registry import JobRegistry
from rota.services.apikeys import ApiKeyService
from rota.services.audit import AuditService
from rota.services.auth import AuthService
from rota.services.backfill import Backfill
from rota.services.buckets import BucketOwner
from rota.services.control import DispatcherSwitchFollower
from rota.services.deadletters import DeadLetterHandler
from rota.services.declared import DeclaredSchedules
from rota.services.dependencies import DEPENDENCIES_TOPIC, DependencyService
from rota.services.dispatcher import Dispatcher
from rota.services.events import EventPublisher
from rota.services.idempotency import Idempotency
from rota.services.jobs import JobService
from rota.services.limits import LimitService
from rota.services.loader import Loader
from rota.services.maintenance import Maintenance
from rota.services.missed import FireWatch
from rota.services.notifications import NotificationService
from rota.services.pausing import Pausing
from rota.services.probes import ProbeReleaser
from rota.services.reactions import StatusReactions
from rota.services.recovery import recover_embedded
from rota.services.silence import SilenceMonitor
from rota.services.tracker import LogCollector, StatusTracker
from rota.services.workers import RosterWatcher, WorkerDirectory
from rota.services.zombies import ZombieDetector
from rota.worker.executor import Executor
from rota.worker.presence import WorkerPresence

log = logging.getLogger(__name__)

_WAITING_FOR_INPUT = (
    "buckets",
    "wakeups",
    "announcements",
    "status-tracker",
    "log-collector",
    "dead-letters",
)
"""The loops that wait for what comes in (the broker's batches, coordination's news) rather
than for their next pass: cancelled at the stop once they hold nothing."""


@dataclass(eq=False, kw_only=True)
class Runtime:
    """Everything one ``rota dev`` / ``rota server`` process runs: the parts (built and
    connected by :func:`rota.app.wiring.build_runtime`), and their life cycle."""

    settings: Settings
    instance_id: str
    store: Store
    index: ScheduleIndex
    broker: Broker
    coordination: Coordination
    registry: JobRegistry | None
    metrics: RotaMetrics
    tracing: Tracing
    events: EventPublisher
    workers: WorkerDirectory
    owner: BucketOwner
    dispatcher: Dispatcher
    loader: Loader
    jobs: JobService
    reactions: StatusReactions
    tracker: StatusTracker
    log_collector: LogCollector
    dead_letters: DeadLetterHandler
    zombies: ZombieDetector
    audit: AuditService
    auth: AuthService
    idempotency: Idempotency
    backfill: Backfill
    pausing: Pausing
    probes: ProbeReleaser
    maintenance: Maintenance
    silence: SilenceMonitor
    notifications: NotificationService
    fires: FireWatch
    declared: DeclaredSchedules
    switch: DispatcherSwitchFollower
    roster: RosterWatcher
    limits: LimitService
    dependencies: DependencyService
    api_keys: ApiKeyService
    executor: Executor | None = None
    presence: WorkerPresence | None = None
    started_at: datetime | None = field(default=None, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False, repr=False)
    _stopping: bool = field(default=False, init=False, repr=False)
    _events_task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self._events_task = asyncio.create_task(self.events.run(), name="rota-events")
        await self._open_backends()
        await self._bootstrap_admin()
        if self.settings.is_embedded:
            await recover_embedded(self.store, utcnow())
        with contextlib.suppress(Exception):  # its loop tries again
            await self.limits.publish()
        if self.executor is not None and self.presence is not None:
            await self.presence.start()
            await self.executor.start()
        await self.switch.follow()
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
        self._spawn(self._relay_announcements(), "announcements")
        self._spawn(self.zombies.run(), "zombies")
        self._spawn(self.probes.run(), "auto-disable-probes")
        self._spawn(self.pausing.run(), "pause-ends")
        self._spawn(self.declared.run(), "declared-schedules")
        if self.settings.silence.enabled:
            self._spawn(self.silence.run(), "silence")
            if self.settings.silence.fire_check_enabled:
                self._spawn(self.fires.run(), "missed-fires")
        if self.settings.notifications.enabled:
            self._spawn(self.notifications.run(), "notifications")
        retention = self.settings.retention.enabled
        self._spawn(self.maintenance.run(retention=retention), "maintenance")
        self._spawn(self.roster.run(), "worker-watch")
        self._spawn(self.dependencies.run(), "dependencies")
        self._spawn(self.switch.run(), "dispatcher-switch")
        self._spawn(self.limits.run(), "limits")
        self.started_at = utcnow()
        log.info("rota started", extra={"instance_id": self.instance_id})

    async def _open_backends(self) -> None:
        """Open the store and the broker, and reach Redis; in the distributed mode each is
        waited for (``startup_wait_seconds``) with a message per try."""
        s = self.settings
        if s.is_embedded and s.effective_database_url.startswith("sqlite"):
            await self.store.open()
            await self.broker.start()
            return
        wait = s.startup_wait_seconds
        await wait_for("the database", s.effective_database_url, self.store.open, within=wait)
        if s.redis_url:
            await wait_for("Redis", s.redis_url, self.coordination.instances, within=wait)
        if s.amqp_url:
            await wait_for("RabbitMQ", s.amqp_url, self.broker.start, within=wait)
        else:
            await self.broker.start()

    async def stop(self, *, grace: float = 10.0) -> None:
        """Graceful stop: no new dispatch, running jobs finish (up to ``grace``), their reports
        are stored, leases released."""
        self._stopping = True
        await self.owner.begin_release()
        self.dispatcher.stop()
        self.zombies.stop()
        self.probes.stop()
        self.pausing.stop()
        self.maintenance.stop()
        self.silence.stop()
        self.notifications.stop()
        self.fires.stop()
        self.roster.stop()
        self.dependencies.stop()
        self.switch.stop()
        self.limits.stop()
        if self.executor is not None and self.presence is not None:
            await self.executor.stop(grace)
            await self.presence.stop()
        await self._drain_reports(deadline=5.0)
        self.loader.stop()
        self.declared.stop()
        self.tracker.stop()
        self.log_collector.stop()
        self.dead_letters.stop()
        await self._settle(grace)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        with contextlib.suppress(Exception):
            await self.owner.release()
        await self._stop_events()
        await self.broker.close()
        await self.coordination.close()
        await self.index.close()
        await self.store.close()
        self.auth.close()

    async def _settle(self, grace: float) -> None:
        """Let the loops told to stop end by themselves (an in-flight dispatch batch published
        and marked, a pass's statement done) and the consumers store the batch they hold,
        before what is left (a consumer waiting for its next batch) is cancelled. A task
        cancelled inside a statement leaves its connection to be closed behind it: with
        SQLite, a close that can outlive the store, and the loop."""
        waiting = {f"rota-{name}" for name in _WAITING_FOR_INPUT}
        loops = [t for t in self._tasks if t.get_name() not in waiting]
        if loops:
            await asyncio.wait(loops, timeout=grace)
        consumers = (self.tracker.stats, self.log_collector.stats, self.dead_letters.stats)
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        while loop.time() < end:  # a poll: `holding` is a flag of the consumers' stats
            if not any(c.holding for c in consumers):
                return
            await asyncio.sleep(0.01)

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

    async def _stop_events(self) -> None:
        """Publish the events still pending (briefly), then end the publisher."""
        task, self._events_task = self._events_task, None
        self.events.stop()
        if task is not None:
            _, pending = await asyncio.wait({task}, timeout=2.0)
            for late in pending:
                late.cancel()
                await asyncio.gather(late, return_exceptions=True)

    async def _bootstrap_admin(self) -> None:
        """ROTA_ADMIN_USER / ROTA_ADMIN_PASSWORD: the first Admin, when there is none."""
        name, password = self.settings.admin_user, self.settings.admin_password
        if not name or password is None:
            return
        try:
            user = await self.auth.ensure_admin(name, password.get_secret_value())
        except ValidationError as exc:
            raise ConfigurationError(
                f"ROTA_ADMIN_USER / ROTA_ADMIN_PASSWORD: {exc.message}"
            ) from exc
        if user is not None:
            log.warning(
                "created the first admin %s from ROTA_ADMIN_USER",
                user.username,
                extra={"action": "admin_bootstrap"},
            )

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

    # --- the dispatcher switch (the admin route applies a change here at once) -------------

    async def follow_dispatcher_state(self) -> DispatcherState:
        """Read the dispatchers' stop switch from the store and apply it here."""
        return await self.switch.follow()

    def apply_dispatcher_state(self, state: DispatcherState) -> None:
        self.switch.apply(state)

    async def _relay_wakeups(self) -> None:
        async for due in self.coordination.wakeups():
            self.dispatcher.wake(due)

    async def _relay_announcements(self) -> None:
        async for topic in self.coordination.announcements():
            if topic == DEPENDENCIES_TOPIC:
                self.dependencies.heard_change()

    async def refresh_metrics(self) -> None:
        """Read what the metrics cannot count themselves (queue depths, live workers); called
        before each scrape. A backend that does not answer leaves the last values."""
        try:
            depths = await asyncio.wait_for(self.broker.queue_depths(), timeout=2.0)
        except Exception as exc:
            log.debug("queue depths unavailable for metrics: %s", exc)
        else:
            self.metrics.set_queue_depths(depths)
        try:
            await asyncio.wait_for(self.workers.refresh(), timeout=2.0)
        except Exception as exc:
            log.debug("worker registry unavailable for metrics: %s", exc)
        else:
            groups: dict[str, int] = {}
            for worker in self.workers.workers:
                groups[worker.worker_id] = groups.get(worker.worker_id, 0) + 1
            self.metrics.set_workers(groups)

    async def health(self) -> dict[str, str]:
        """Each component's state: ``ok`` or the error text."""
        out: dict[str, str] = {}
        checks: dict[str, Coroutine[Any, Any, object]] = {
            "store": self.store.ping(),
            "index": self.index.size([]),
            "coordination": self.coordination.instances(),
            "broker": self.broker.queue_depths(),
        }
        for name, check in checks.items():
            try:
                await asyncio.wait_for(check, timeout=2.0)
                out[name] = "ok"
            except Exception as exc:
                out[name] = f"error: {exc}"
        return out


SWITCH_INTERVAL = 0.0005
"""Seconds a thread may hold the GIL while another waits for it (Python's default: 5 ms)."""


def tune_process() -> None:
    """For long-running entry points (a server, a worker, a bench).

    The collector: what start-up allocated is moved out of its reach and the young
    generation is collected less often. A scheduler allocates many short-lived records;
    full collections over a large heap otherwise stall the loop for tens of ms.

    The GIL: the loop's thread gets it back within :data:`SWITCH_INTERVAL` of asking (not
    5 ms) from a thread running Python (SQLite's connection threads, the worker's local
    store, sync handlers), so that a held job's start at its due instant waits for no
    thread's slice."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sys.setswitchinterval(SWITCH_INTERVAL)


__all__: Sequence[str] = ("Runtime", "tune_process")
