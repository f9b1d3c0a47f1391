"""``rota worker``: a standalone worker process (distributed mode). It opens its local state
(finalized attempts, outbox), declares its group's queue for the job types it has, registers
and heartbeats, runs jobs, and on SIGTERM stops intake (messages not started go back to the
broker), lets running jobs finish within the grace period, then cancels them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rota.app.builtins import load_registry
from rota.app.runtime import tune_process
from rota.app.settings import DEFAULT_HEALTH_PORT, Settings
from rota.app.startup import wait_for
from rota.app.wiring import build_worker
from rota.core.errors import ConfigurationError
from rota.core.ports import Broker, Coordination
from rota.sdk.registry import JobRegistry
from rota.worker.executor import Executor
from rota.worker.localstore import LocalStore
from rota.worker.metrics_server import Health, MetricsServer

log = logging.getLogger(__name__)


async def run_worker(
    settings: Settings,
    modules: Sequence[str],
    *,
    worker_id: str,
    concurrency: int,
    grace: float,
    stop: asyncio.Event | None = None,
    state_dir: Path | None = None,
    builtin: Sequence[str] = (),
) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set), then stop gracefully. ``state_dir``
    wins over ``settings.worker.state_dir``; ``builtin`` names built-in workers to run too."""
    if settings.is_embedded:
        raise ConfigurationError(
            "a separate `rota worker` process needs the distributed mode: set ROTA_AMQP_URL "
            "and ROTA_REDIS_URL (the embedded mode runs its workers inside `rota dev`)"
        )
    registry = load_registry(settings, modules, builtin)
    if not registry:
        where = ", ".join(modules) or "no module (give modules or --builtin)"
        raise ConfigurationError(f"no @rota.job handlers found in {where}")
    store = await LocalStore.open(state_dir or settings.worker_state_path(worker_id))
    try:
        await _run(settings, registry, store, worker_id, concurrency, grace, stop)
    finally:
        await store.close()


async def _run(
    settings: Settings,
    registry: JobRegistry,
    store: LocalStore,
    worker_id: str,
    concurrency: int,
    grace: float,
    stop: asyncio.Event | None,
) -> None:
    ws = settings.worker
    parts = build_worker(settings, registry, store, worker_id=worker_id, concurrency=concurrency)
    executor, presence = parts.executor, parts.presence
    stop = stop or asyncio.Event()
    _on_signals(stop)
    started = asyncio.Event()
    endpoints: list[MetricsServer] = []

    def health() -> tuple[bool, dict[str, Any]]:
        return worker_health(executor, started, stop)

    if ws.metrics_port is not None:
        endpoints.append(
            MetricsServer(
                parts.metrics,
                health,
                host=ws.metrics_host,
                port=ws.metrics_port,
                token=settings.metrics_token,
            )
        )
        await endpoints[-1].start()
    if ws.health:
        endpoints.append(await health_endpoint(settings, health))
    try:
        await _connect(settings, parts.broker, parts.coordination)
        # Bind the queue before announcing the job types: a fire the scheduler routes to us
        # must find a queue.
        await executor.start()
        await presence.start()
        tune_process()  # a collection or another thread's GIL slice would delay a held job's start
        started.set()
        log.info(
            "worker started",
            extra={"worker_id": worker_id, "instance_id": executor.instance_id,
                   "job_types": sorted(registry), "state_dir": str(store.directory)},
        )  # fmt: skip
        await stop.wait()
        log.info("worker stopping", extra={"grace_seconds": grace})
        await executor.stop(grace)
    finally:
        await presence.stop()
        await parts.broker.close()
        await parts.coordination.close()
        for endpoint in endpoints:
            await endpoint.close()
        parts.tracing.shutdown()


async def health_endpoint(
    settings: Settings, health: Health, default_port: int = DEFAULT_HEALTH_PORT
) -> MetricsServer:
    """The worker's health endpoint, started: on ``worker.health_port`` as set (a port
    taken is an error), else on ``default_port``, or on any free port when another process
    (a second worker on the host) has that one; the port is logged."""
    ws = settings.worker
    port = default_port if ws.health_port is None else ws.health_port
    endpoint = MetricsServer(
        None, health, host=ws.health_host, port=port, setting="ROTA_WORKER__HEALTH_PORT"
    )
    try:
        await endpoint.start()
    except ConfigurationError:
        if ws.health_port is not None:
            raise
        log.warning(
            "health port %d is taken: serving the health endpoint on a free port instead "
            "(give each worker on this host its own --health-port)",
            port,
        )
        endpoint = MetricsServer(
            None, health, host=ws.health_host, port=0, setting="ROTA_WORKER__HEALTH_PORT"
        )
        await endpoint.start()
    return endpoint


def worker_health(
    executor: Executor, started: asyncio.Event, stop: asyncio.Event
) -> tuple[bool, dict[str, Any]]:
    """Healthy while the worker takes jobs: started (its broker and Redis reached), not
    stopping."""
    state = "stopping" if stop.is_set() else "running" if started.is_set() else "starting"
    return state == "running", {
        "state": state,
        "workerId": executor.worker_id,
        "instanceId": executor.instance_id,
        "running": executor.load,
        "held": executor.held,
        "outboxPending": executor.reporter.outbox_entries,
    }


async def _connect(settings: Settings, broker: Broker, coordination: Coordination) -> None:
    """Reach Redis and RabbitMQ, waiting for them up to ``startup_wait_seconds``."""
    wait = settings.startup_wait_seconds
    if settings.redis_url:
        await wait_for("Redis", settings.redis_url, coordination.instances, within=wait)
    await wait_for("RabbitMQ", settings.amqp_url or "", broker.start, within=wait)


def _on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
