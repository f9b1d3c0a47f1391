"""The composition root: the one place that picks the adapters the settings name and builds
every part in dependency order (adapters and metrics first, then the services and the
embedded executor), each built once what it needs exists. The one cycle, the bucket owner
that kicks the loader and carries the silence monitor's alerts while both read the owner's
buckets, is closed by
:meth:`~rota.services.buckets.BucketOwner.connect` once all three are built.

:func:`build_runtime` builds a server's :class:`~rota.app.runtime.Runtime` (``rota dev`` /
``rota server``), :func:`build_worker` a ``rota worker`` process's parts; both configure their
executor in :func:`build_executor`.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry

from rota.app.adapters import make_broker, make_coordination, make_index, make_store
from rota.app.builtins import builtin_data_checks
from rota.app.configs import (
    auth_config,
    dependency_config,
    dispatcher_config,
    fire_watch_config,
    jobs_config,
    retention_policy,
    silence_config,
)
from rota.app.notify import build_notifications, silence_notifier
from rota.app.runtime import Runtime
from rota.app.settings import Settings
from rota.core.models import utcnow
from rota.core.ports import Broker, Coordination
from rota.observability.metrics import RotaMetrics
from rota.observability.tracing import Tracing, tracing_from_env
from rota.sdk.registry import JobRegistry
from rota.services.ahead import judge_at_due
from rota.services.apikeys import ApiKeyService
from rota.services.audit import AuditService
from rota.services.auth import AuthService
from rota.services.backfill import Backfill
from rota.services.buckets import BucketOwner
from rota.services.cancellation import cancel_ahead, cancel_displaced, supersede_ahead
from rota.services.control import DispatcherSwitchFollower
from rota.services.dataschema import DataSchemas
from rota.services.deadletters import DeadLetterHandler
from rota.services.declared import DeclaredSchedules
from rota.services.dependencies import DependencyService
from rota.services.dispatcher import Dispatcher
from rota.services.events import EventPublisher
from rota.services.idempotency import Idempotency
from rota.services.jobs import JobService
from rota.services.limits import LimitService
from rota.services.loader import Loader
from rota.services.maintenance import Maintenance
from rota.services.missed import FireWatch
from rota.services.pausing import Pausing
from rota.services.probes import ProbeReleaser
from rota.services.reactions import StatusReactions
from rota.services.routing import DeclinedAttempts
from rota.services.silence import KINDS as SILENCE_KINDS
from rota.services.silence import Alert, SilenceMonitor
from rota.services.tracker import LogCollector, StatusTracker
from rota.services.workers import RosterWatcher, WorkerDirectory
from rota.services.zombies import ZombieDetector
from rota.worker.claims import AttemptClaims
from rota.worker.config import ExecutorConfig
from rota.worker.executor import Executor
from rota.worker.localstore import LocalStore
from rota.worker.presence import WorkerPresence
from rota.worker.sealing import SealingBroker
from rota.worker.secrets import WorkerSecrets

EMBEDDED_WORKER_ID = "embedded"


def new_instance_id(prefix: str) -> str:
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def build_runtime(
    settings: Settings, registry: JobRegistry | None = None, tracing: Tracing | None = None
) -> Runtime:
    """Pick the adapters the settings name and build a :class:`Runtime` (with its own metrics
    registry; ``tracing`` off unless given). With a ``registry``, the embedded mode runs its
    worker in the same process."""
    seal = settings.encryption.seal()
    store = make_store(
        settings.effective_database_url, auto_disable=settings.scheduler.auto_disable, seal=seal
    )
    broker = make_broker(settings)
    index = make_index(settings)
    coordination = make_coordination(settings)
    metrics = RotaMetrics(CollectorRegistry())
    tracing = tracing or Tracing()
    traced = tracing.enabled
    instance_id = new_instance_id("rota")
    sched = settings.scheduler
    batching = settings.tracker

    events = EventPublisher(coordination)
    workers = WorkerDirectory(coordination, history=store)
    owner = BucketOwner(
        coordination,
        instance_id,
        bucket_count=sched.bucket_count,
        lease_seconds=sched.lease_seconds,
    )
    dispatcher = Dispatcher(
        store,
        index,
        broker,
        workers,
        dispatcher_config(sched),
        lambda: owner.buckets,
        utcnow,
        mark_on_commit=settings.is_embedded,
        pending_grace=0.0 if settings.is_embedded else sched.sweeper_grace_seconds,
        on_fired=metrics.record_dispatch,
        stamp=tracing.stamp_plan if traced else None,
        events=events,
        displace=lambda displacing: cancel_displaced(
            store, coordination, displacing, now=utcnow(), events=events
        ),
        seal=None if settings.encryption.plain_to_workers else seal,
    )
    loader = Loader(
        store,
        index,
        lambda: owner.buckets,
        window_seconds=sched.hot_window_seconds,
        interval_seconds=sched.loader_interval_seconds,
        on_loaded=dispatcher.wake,
    )
    dependencies = DependencyService(
        store,
        store,
        coordination,
        dependency_config(sched, settings.retention),
        events=events,
        workers=workers,
        now=utcnow,
    )
    jobs = JobService(
        store,
        index,
        coordination,
        jobs_config(sched),
        utcnow,
        max_job_data_bytes=settings.api.max_job_data_bytes,
        max_json_depth=settings.api.max_json_depth,
        on_triggered=metrics.record_trigger,
        stamp=tracing.stamp_trigger if traced else None,
        events=events,
        cancel_ahead=lambda job_id, reason: cancel_ahead(
            store, coordination, job_id, reason=reason, now=utcnow(), events=events
        ),
        supersede_ahead=lambda job: supersede_ahead(
            store,
            coordination,
            dispatcher.publish_addressed,
            job,
            max_retries=sched.default_max_retries if job.max_retries is None else job.max_retries,
            now=utcnow(),
            events=events,
        ),
        workers=workers,
        schemas=DataSchemas(checks=builtin_data_checks(settings)),
        on_dependencies=dependencies.edges_changed,
        judge_ahead=lambda fire, triggered: judge_at_due(
            store, coordination, fire, triggered, clock=utcnow, events=events
        ),
    )
    notifications = build_notifications(
        settings, store, metrics, instance_id, is_leader=lambda: 0 in owner.buckets
    )
    reactions = StatusReactions(
        events=events,
        dispatcher=dispatcher,
        jobs=jobs,
        on_status=metrics.record_status,
        notify=notifications.status_applied,
        dependencies=dependencies.status_applied,
    )
    audit = AuditService(store, utcnow)
    silence = settings.silence
    gauges = _alert_gauges(metrics)
    monitor = SilenceMonitor(
        store,
        silence_config(silence),
        instance_id=instance_id,
        buckets=lambda: owner.buckets,
        last_tick=lambda: dispatcher.stats.last_tick,
        on_raised=gauges,
        on_resolved=gauges,
        notify=silence_notifier(settings, notifications),
    )
    owner.connect(on_gained=lambda _buckets: loader.kick(), info=monitor.shared_info)
    executor: Executor | None = None
    presence: WorkerPresence | None = None
    if registry is not None and settings.is_embedded:
        executor = build_executor(
            settings,
            registry,
            broker=broker,
            coordination=coordination,
            worker_id=EMBEDDED_WORKER_ID,
            metrics=metrics,
            tracing=tracing,
        )
        presence = WorkerPresence(
            coordination,
            executor,
            registry,
            worker_id=EMBEDDED_WORKER_ID,
            concurrency=settings.worker.concurrency,
            heartbeat_seconds=settings.worker.heartbeat_seconds,
        )
    runtime = Runtime(
        settings=settings,
        instance_id=instance_id,
        store=store,
        index=index,
        broker=broker,
        coordination=coordination,
        registry=registry,
        metrics=metrics,
        tracing=tracing,
        events=events,
        workers=workers,
        owner=owner,
        dispatcher=dispatcher,
        loader=loader,
        jobs=jobs,
        reactions=reactions,
        tracker=StatusTracker(
            store,
            broker,
            batch_size=batching.batch_size,
            max_wait=batching.max_wait_seconds,
            on_applied=reactions,
            declines=DeclinedAttempts(store, store, workers, on_returned=dispatcher.wake),
        ),
        log_collector=LogCollector(
            store,
            broker,
            batch_size=batching.batch_size,
            max_wait=batching.max_wait_seconds,
            events=events,
        ),
        dead_letters=DeadLetterHandler(
            store,
            broker,
            batch_size=batching.batch_size,
            max_wait=batching.max_wait_seconds,
            on_applied=reactions,
        ),
        zombies=ZombieDetector(
            store,
            threshold_seconds=sched.zombie_threshold_seconds,
            interval_seconds=sched.zombie_interval_seconds,
            queued_threshold_seconds=sched.queued_zombie_threshold_seconds,
            policy=sched.zombie_policy,
            on_applied=reactions,
            live_workers=workers.live,
            live_threshold_seconds=sched.zombie_live_worker_threshold_seconds,
            max_requeues=sched.zombie_max_requeues,
            dead_interval_seconds=sched.dead_worker_interval_seconds,
            dead_silence_seconds=sched.dead_worker_silence_seconds,
            is_leader=lambda: 0 in owner.buckets,
        ),
        audit=audit,
        auth=AuthService(store, auth_config(settings), utcnow, audit=audit),
        idempotency=Idempotency(store, utcnow),
        backfill=Backfill(
            store, coordination, jobs_config(sched).plan, utcnow, events=events, workers=workers
        ),
        pausing=Pausing(
            store,
            audit,
            events,
            clock=utcnow,
            cancel_ahead=lambda job_id, reason: cancel_ahead(
                store, coordination, job_id, reason=reason, now=utcnow(), events=events
            ),
        ),
        probes=ProbeReleaser(jobs, interval_seconds=sched.auto_disable_probe_interval_seconds),
        maintenance=Maintenance(
            store,
            retention_policy(settings.retention),
            interval_seconds=settings.retention.interval_seconds,
            is_leader=lambda: 0 in owner.buckets,
            on_deleted=metrics.record_deleted,
            on_run=lambda _report: metrics.maintenance_runs.inc(),
        ),
        silence=monitor,
        notifications=notifications,
        fires=FireWatch(
            store,
            fire_watch_config(silence),
            monitor,
            instance_id=instance_id,
            buckets=lambda: owner.buckets,
            paused=lambda: dispatcher.paused_reason,
        ),
        declared=DeclaredSchedules(jobs, store, workers),
        switch=DispatcherSwitchFollower(store, dispatcher),
        roster=RosterWatcher(workers, events, lambda: 0 in owner.buckets),
        limits=LimitService(store, coordination),
        dependencies=dependencies,
        api_keys=ApiKeyService(store, audit, utcnow),
        executor=executor,
        presence=presence,
    )
    _watch_runtime(runtime)
    return runtime


def build_executor(
    settings: Settings,
    registry: JobRegistry,
    *,
    broker: Broker,
    coordination: Coordination,
    worker_id: str,
    metrics: RotaMetrics,
    tracing: Tracing,
    concurrency: int | None = None,
    local_store: LocalStore | None = None,
) -> Executor:
    """The one place an :class:`Executor` is configured (``settings.worker``), its metrics
    watched. ``concurrency``: the slots (default ``worker.concurrency``).

    A ``rota worker`` passes its ``local_store``: the finalized attempts, the outbox and the
    attempt claims are kept there, sync handlers get at least a thread per slot, and the
    worker settings' hand-back and finalized-attempt limits apply. The embedded worker (no
    ``local_store``) keeps those in memory with the executor's defaults, and claims no
    attempts."""
    ws = settings.worker
    instance_id = new_instance_id(worker_id)
    slots = ws.concurrency if concurrency is None else concurrency
    standalone = local_store is not None
    seal = settings.encryption.seal()
    config = ExecutorConfig(
        worker_id=worker_id,
        instance_id=instance_id,
        concurrency=slots,
        sync_threads=max(ws.sync_threads, slots) if standalone else ws.sync_threads,
        flush_interval=ws.flush_interval_seconds,
        heartbeat_interval=ws.heartbeat_seconds,
        default_timeout=ws.default_timeout_seconds,
        hold_capacity=ws.hold_capacity,
        limit_lease=max(ws.limit_lease_seconds, ws.heartbeat_seconds * 2),
    )
    if standalone:  # the worker settings' hand-back time and finalized-attempt limits
        config = replace(
            config,
            hand_back_after=ws.hand_back_after_seconds,
            finalized_retention=ws.finalized_retention_hours * 3600.0,
            finalized_max_entries=ws.finalized_max_entries,
        )
    executor = Executor(
        broker if seal is None else SealingBroker(broker, seal),
        registry,
        config,
        store=local_store,
        on_finished=metrics.record_finished,
        tracing=tracing,
        # The embedded worker is the only consumer of its in-process broker, which hands a
        # message to one consumer at a time: no other instance to claim an attempt against
        # (a copy of an attempt running or finished here is known to the executor itself).
        claims=AttemptClaims(
            coordination,
            instance_id,
            ttl=ws.claim_ttl_seconds,
            timeout=ws.claim_timeout_seconds,
            store=local_store,
        )
        if standalone
        else None,
        limits=coordination,
        secrets=WorkerSecrets(directory=ws.secrets_dir),
    )
    _watch_executor(metrics, executor)
    metrics.watched.broker_messages = broker.message_counts
    return executor


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerParts:
    """What one ``rota worker`` process runs (:mod:`rota.app.worker_process` starts them)."""

    broker: Broker
    coordination: Coordination
    metrics: RotaMetrics
    tracing: Tracing
    executor: Executor
    presence: WorkerPresence


def build_worker(
    settings: Settings,
    registry: JobRegistry,
    local_store: LocalStore,
    *,
    worker_id: str,
    concurrency: int,
) -> WorkerParts:
    """Pick the broker and coordination the settings name and build a ``rota worker``'s
    executor and presence (worker-only metrics; tracing as the environment says)."""
    broker = make_broker(settings)
    coordination = make_coordination(settings)
    metrics = RotaMetrics(CollectorRegistry(), server=False)
    tracing = tracing_from_env("rota-worker")
    executor = build_executor(
        settings,
        registry,
        broker=broker,
        coordination=coordination,
        worker_id=worker_id,
        metrics=metrics,
        tracing=tracing,
        concurrency=concurrency,
        local_store=local_store,
    )
    presence = WorkerPresence(
        coordination,
        executor,
        registry,
        worker_id=worker_id,
        concurrency=concurrency,
        heartbeat_seconds=settings.worker.heartbeat_seconds,
        envelope_jobs=broker.envelope_size(executor.prefetch),
    )
    return WorkerParts(
        broker=broker,
        coordination=coordination,
        metrics=metrics,
        tracing=tracing,
        executor=executor,
        presence=presence,
    )


# --- metrics: what the metrics read when scraped, and the silence gauges --------------------


def _alert_gauges(metrics: RotaMetrics) -> Callable[[Alert], None]:
    """Counts raised alerts and keeps the active ones per kind (an alert is active from its
    raise to its resolution)."""

    def changed(alert: Alert) -> None:
        if alert.resolved_at is None:
            metrics.silence_alerts.labels(alert.kind).inc()
            metrics.silence_active.labels(alert.kind).inc()
        else:
            metrics.silence_active.labels(alert.kind).dec()

    return changed


def _watch_runtime(runtime: Runtime) -> None:
    """The values a server's metrics read when scraped."""
    metrics = runtime.metrics
    watched = metrics.watched
    for kind in SILENCE_KINDS:
        metrics.silence_active.labels(kind).set(0)
    zombies, owner, dispatcher, events = (
        runtime.zombies,
        runtime.owner,
        runtime.dispatcher,
        runtime.events,
    )
    watched.zombies = lambda: {"requeued": zombies.requeued, "failed": zombies.failed}
    watched.leases_held = lambda: len(owner.buckets)
    watched.leases_taken_over = lambda: owner.taken_over
    watched.dispatcher_last_tick = lambda: dispatcher.stats.last_tick
    watched.dispatcher_paused = lambda: dispatcher.paused_reason is not None
    watched.fires_overdue = lambda: runtime.fires.overdue
    watched.events = lambda: (events.stats.published, events.stats.dropped)
    watched.broker_messages = runtime.broker.message_counts


def _watch_executor(metrics: RotaMetrics, executor: Executor) -> None:
    """What an executor's metrics read when scraped (a server's embedded one, a worker's)."""
    watched = metrics.watched
    watched.duplicate_deliveries = lambda: executor.stats.duplicates_skipped
    watched.claimed_elsewhere = lambda: executor.stats.claimed_elsewhere
    watched.outbox_pending = lambda: executor.reporter.outbox_entries
    watched.jobs_running = lambda: executor.load
    if (gate := executor.gate) is not None:
        watched.limit_waiting = lambda: gate.waiting
