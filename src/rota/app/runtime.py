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

from prometheus_client import CollectorRegistry

from rota.app.adapters import make_broker, make_coordination, make_index, make_store
from rota.app.configs import (
    auth_config,
    dispatcher_config,
    jobs_config,
    retention_policy,
    silence_config,
)
from rota.app.notify import alert_webhook
from rota.app.settings import Settings
from rota.app.startup import wait_for
from rota.core.errors import ConfigurationError, RotaError, ValidationError
from rota.core.models import DispatcherState, OccurrenceStatus, WorkerInfo, utcnow
from rota.core.ports import Broker, Coordination, ScheduleIndex, Store
from rota.core.records import StatusResult
from rota.observability.metrics import RotaMetrics
from rota.observability.tracing import Tracing
from rota.sdk.registry import JobRegistry
from rota.services.audit import AuditService
from rota.services.auth import AuthConfig, AuthService
from rota.services.buckets import BucketOwner
from rota.services.control import FOLLOW_INTERVAL
from rota.services.deadletters import DeadLetterHandler
from rota.services.declared import DeclaredSchedules
from rota.services.dispatcher import Dispatcher
from rota.services.events import EventPublisher
from rota.services.jobs import JobService
from rota.services.loader import Loader
from rota.services.maintenance import Maintenance
from rota.services.probes import ProbeReleaser
from rota.services.recovery import recover_embedded
from rota.services.silence import KINDS as SILENCE_KINDS
from rota.services.silence import Alert, SilenceMonitor
from rota.services.tracker import LogCollector, StatusTracker
from rota.services.workers import WorkerDirectory, roster_changes
from rota.services.zombies import ZombieDetector
from rota.worker.claims import AttemptClaims
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
        metrics: RotaMetrics | None = None,
        tracing: Tracing | None = None,
        auth: AuthConfig | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or RotaMetrics(CollectorRegistry())
        self.tracing = tracing or Tracing()
        traced = self.tracing.enabled
        self.store = store
        self.index = index
        self.broker = broker
        self.coordination = coordination
        self.registry = registry
        self.instance_id = new_instance_id("rota")
        sched = settings.scheduler
        self.events = EventPublisher(coordination)
        self.workers = WorkerDirectory(coordination)
        self.owner = BucketOwner(
            coordination,
            self.instance_id,
            bucket_count=sched.bucket_count,
            lease_seconds=sched.lease_seconds,
            on_gained=lambda _b: self.loader.kick(),
            info=lambda: self.silence.shared_info(),
        )
        self.dispatcher = Dispatcher(
            store,
            index,
            broker,
            self.workers,
            dispatcher_config(sched),
            lambda: self.owner.buckets,
            utcnow,
            mark_on_commit=settings.is_embedded,
            pending_grace=0.0 if settings.is_embedded else sched.sweeper_grace_seconds,
            on_fired=self.metrics.record_dispatch,
            stamp=self.tracing.stamp_plan if traced else None,
            events=self.events,
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
            events=self.events,
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
        self.jobs = JobService(
            store,
            index,
            coordination,
            jobs_config(sched),
            utcnow,
            max_job_data_bytes=settings.api.max_job_data_bytes,
            max_json_depth=settings.api.max_json_depth,
            on_triggered=self.metrics.record_trigger,
            stamp=self.tracing.stamp_trigger if traced else None,
            events=self.events,
        )
        self.audit = AuditService(store, utcnow)
        self.auth = AuthService(store, auth or auth_config(settings), utcnow, audit=self.audit)
        self.probes = ProbeReleaser(
            self.jobs, interval_seconds=sched.auto_disable_probe_interval_seconds
        )
        self.maintenance = Maintenance(
            store,
            retention_policy(settings.retention),
            interval_seconds=settings.retention.interval_seconds,
            is_leader=lambda: 0 in self.owner.buckets,
            on_deleted=self.metrics.record_deleted,
            on_run=lambda _report: self.metrics.maintenance_runs.inc(),
        )
        silence = settings.silence
        self.silence = SilenceMonitor(
            store,
            silence_config(silence),
            instance_id=self.instance_id,
            buckets=lambda: self.owner.buckets,
            last_tick=lambda: self.dispatcher.stats.last_tick,
            on_raised=self._alert_changed,
            on_resolved=self._alert_changed,
            notify=(
                alert_webhook(settings.alert_webhook_url, silence.webhook_timeout_seconds)
                if settings.alert_webhook_url
                else None
            ),
        )
        self._background: set[asyncio.Task[None]] = set()
        self.declared = DeclaredSchedules(self.jobs, store, self.workers)
        self.executor: Executor | None = None
        self.presence: WorkerPresence | None = None
        if registry is not None and settings.is_embedded:
            worker_instance = new_instance_id(EMBEDDED_WORKER_ID)
            self.executor = Executor(
                broker,
                registry,
                worker_id=EMBEDDED_WORKER_ID,
                instance_id=worker_instance,
                concurrency=settings.worker.concurrency,
                sync_threads=settings.worker.sync_threads,
                flush_interval=settings.worker.flush_interval_seconds,
                default_timeout=settings.worker.default_timeout_seconds,
                on_finished=self.metrics.record_finished,
                tracing=self.tracing,
                claims=AttemptClaims(
                    coordination,
                    worker_instance,
                    ttl=settings.worker.claim_ttl_seconds,
                    timeout=settings.worker.claim_timeout_seconds,
                ),
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
        self._events_task: asyncio.Task[None] | None = None
        self._switched_off = False
        """The dispatcher is paused because the shared switch says so."""
        self._roster: dict[str, WorkerInfo] | None = None
        self.started_at: datetime | None = None
        self._watch_metrics()

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self._events_task = asyncio.create_task(self.events.run(), name="rota-events")
        await self._open_backends()
        await self._bootstrap_admin()
        if self.settings.is_embedded:
            await recover_embedded(self.store, utcnow())
        if self.executor is not None and self.presence is not None:
            await self.presence.start()
            await self.executor.start()
        await self.follow_dispatcher_state()
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
        if self.settings.silence.enabled:
            self._spawn(self.silence.run(), "silence")
        retention = self.settings.retention.enabled
        self._spawn(self.maintenance.run(retention=retention), "maintenance")
        self._spawn(self._watch_workers(), "worker-watch")
        self._spawn(self._follow_dispatcher_switch(), "dispatcher-switch")
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
        self.maintenance.stop()
        self.silence.stop()
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
        await self._stop_events()
        await self.broker.close()
        await self.coordination.close()
        await self.index.close()
        await self.store.close()
        self.auth.close()

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

    # --- glue -----------------------------------------------------------------------------

    def _after_status(self, result: StatusResult) -> None:
        self.metrics.record_status(result)
        self.events.status_applied(result)
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

    async def _watch_workers(self, interval: float = 2.0) -> None:
        """``worker.changed`` events when worker instances join, leave or change what they
        declare. Every server sees the same registry: only the owner of bucket 0 reports."""
        while True:
            try:
                await self.workers.refresh(force=True)
                roster = {w.instance_id: w for w in self.workers.workers}
                if self._roster is not None and 0 in self.owner.buckets:
                    self.events.emit(roster_changes(self._roster, roster))
                self._roster = roster
            except (RotaError, OSError) as exc:
                log.debug("worker watch: registry unavailable: %s", exc)
            await asyncio.sleep(interval)

    async def follow_dispatcher_state(self) -> DispatcherState:
        """Read the dispatchers' stop switch from the store and apply it here."""
        state = await self.store.dispatcher_state()
        self.apply_dispatcher_state(state)
        return state

    def apply_dispatcher_state(self, state: DispatcherState) -> None:
        """Pause or resume this server's dispatcher by the shared switch. Only a pause the
        switch made is resumed by it (a pause made here by other means stays)."""
        if state.paused:
            if not self._switched_off:
                log.warning(
                    "dispatcher stopped: %s",
                    state.reason,
                    extra={"action": "dispatcher_stop", "by": state.by},
                )
            self._switched_off = True
            self.dispatcher.pause(state.reason or "stopped")
        elif self._switched_off:
            log.warning("dispatcher resumed", extra={"action": "dispatcher_resume"})
            self._switched_off = False
            self.dispatcher.resume()

    async def _follow_dispatcher_switch(self) -> None:
        while True:
            await asyncio.sleep(FOLLOW_INTERVAL)
            try:
                await self.follow_dispatcher_state()
            except (RotaError, OSError) as exc:
                log.warning("could not read the dispatcher switch: %s", exc)

    async def _relay_wakeups(self) -> None:
        async for due in self.coordination.wakeups():
            self.dispatcher.wake(due)

    def _alert_changed(self, alert: Alert) -> None:
        if alert.resolved_at is None:
            self.metrics.silence_alerts.labels(alert.kind).inc()
        active = self.silence.active
        for kind in SILENCE_KINDS:
            self.metrics.silence_active.labels(kind).set(sum(1 for a in active if a.kind == kind))

    def _watch_metrics(self) -> None:
        """The values the metrics read when scraped."""
        watched = self.metrics.watched
        for kind in SILENCE_KINDS:
            self.metrics.silence_active.labels(kind).set(0)
        watched.zombies = lambda: {
            "requeued": self.zombies.requeued,
            "failed": self.zombies.failed,
        }
        watched.leases_held = lambda: len(self.owner.buckets)
        watched.leases_taken_over = lambda: self.owner.taken_over
        watched.dispatcher_last_tick = lambda: self.dispatcher.stats.last_tick
        watched.dispatcher_paused = lambda: self.dispatcher.paused_reason is not None
        watched.events = lambda: (self.events.stats.published, self.events.stats.dropped)
        executor = self.executor
        if executor is not None:
            watched.duplicate_deliveries = lambda: executor.stats.duplicates_skipped
            watched.claimed_elsewhere = lambda: executor.stats.claimed_elsewhere
            watched.outbox_pending = lambda: executor.reporter.outbox_entries
            watched.jobs_running = lambda: executor.load

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


def tune_gc() -> None:
    """For long-running entry points: move what start-up allocated out of the collector's
    reach and collect the young generation less often. A scheduler allocates many short-lived
    records; full collections over a large heap otherwise stall the loop for tens of ms."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def build_runtime(
    settings: Settings, registry: JobRegistry | None = None, tracing: Tracing | None = None
) -> Runtime:
    """Pick the adapters the settings name and wire a :class:`Runtime` (with its own metrics
    registry; ``tracing`` off unless given)."""
    store = make_store(
        settings.effective_database_url, auto_disable=settings.scheduler.auto_disable
    )
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
        tracing=tracing,
    )


__all__: Sequence[str] = ("Runtime", "build_runtime")
