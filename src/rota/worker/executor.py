"""The executor: takes job messages from the broker, runs their handlers, and reports status
and logs back in packed batches (DESIGN.md §3 step 5-6, docs/protocol.md §10).

The :class:`Executor` is the worker's composition and life cycle: it builds one collaborator
per concern from its collaborators and its :class:`~rota.worker.config.ExecutorConfig`, starts
and stops them, cancels, and keeps the running ones alive (heartbeats, claim renewal). What
happens to one delivery is the intake's, stage by stage (:mod:`rota.worker.intake`):

* :class:`~rota.worker.intake.Intake` -- one delivery's way: known type? finalized here?
  superseded? hold until due, limit gate, slot, claim, check, run;
* :class:`~rota.worker.flow.Flow` -- slots, per-job-type limits, held deliveries, hand-back;
* :class:`~rota.worker.finals.FinalizedAttempts` -- the attempts finalized here, pruned;
* :class:`~rota.worker.run.Runner` -- one handler run to its final status record (timeouts,
  cancellation, retries), and :class:`~rota.worker.run.ExecutorStats`, the counters;
* :class:`~rota.worker.reporter.Reporter` -- the status and log batches, and the acks.

The executor talks to the :class:`~rota.core.ports.Broker` and its own
:class:`~rota.worker.localstore.LocalStore`; it never touches the scheduler's store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from rota.core.models import JobMessage, OccurrenceStatus, utcnow
from rota.core.ports import Broker
from rota.core.ports.limits import LimitMemory
from rota.core.timing import off_the_second
from rota.observability.tracing import Tracing
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker.claims import AttemptClaims
from rota.worker.config import ExecutorConfig
from rota.worker.finals import FinalizedAttempts
from rota.worker.gate import LimitGate
from rota.worker.intake import Intake
from rota.worker.localstore import LocalStore
from rota.worker.reporter import Reporter
from rota.worker.run import ExecutorStats, Runner, format_exception
from rota.worker.secrets import WorkerSecrets

__all__ = ["Executor", "ExecutorConfig", "ExecutorStats", "Reporter", "format_exception"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

_CANCEL_WAIT = 10.0
"""Seconds stop() waits for cancelled handlers before giving up on them."""

S = OccurrenceStatus


class Executor:
    """Runs the handlers of a worker group's job messages (DESIGN.md §3 step 5).

    ``config`` holds its settings (:class:`~rota.worker.config.ExecutorConfig`: the slots,
    the held deliveries' room, timeouts, heartbeat, hand-back time, leases); the rest are its
    collaborators. ``concurrency`` bounds how many handlers run at once; a job type's own
    ``concurrency`` bounds its handlers within that, and its further messages wait while
    other types pass them. A delivery is acknowledged after the flush that hands over its
    Running report (published, or in the ``store``'s outbox), so a long job holds no delivery
    open. Running occurrences are re-reported as Running every ``heartbeat_interval`` seconds
    (their sign of life). What happens to each delivery is the intake's
    (:mod:`rota.worker.intake`: known type, finalized here, superseded, hold until due,
    limit gate, slot, claim, check, run).

    ``store`` (optional: ``None`` keeps everything in memory) keeps the outbox and the
    finalized attempts. ``claims`` (optional) claims each attempt across the worker group
    before it starts (:mod:`rota.worker.claims`). ``limits`` (optional): the coordination's
    cluster-wide limits, followed by the intake's limit gate (:mod:`rota.worker.gate`); the
    consumer's prefetch (:meth:`ExecutorConfig.prefetch`) then has room for the deliveries
    waiting there. ``rng`` draws the retry jitter (a fresh generator by default);
    ``on_finished(job_type, duration_ms)`` is called after a handler ran (metrics);
    ``secrets``: the secret references' values, masked in reports
    (:mod:`rota.worker.secrets`). ``stats`` counts the deliveries skipped, handed back,
    dropped or cancelled unstarted.
    """

    def __init__(
        self,
        broker: Broker,
        registry: JobRegistry,
        config: ExecutorConfig,
        *,
        clock: Clock = utcnow,
        store: LocalStore | None = None,
        claims: AttemptClaims | None = None,
        limits: LimitMemory | None = None,
        secrets: WorkerSecrets | None = None,
        rng: random.Random | None = None,
        on_finished: Callable[[str, float | None], None] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.instance_id = config.instance_id
        self.concurrency = config.concurrency
        self.prefetch = config.prefetch(limited=limits is not None)
        self.envelopes = False  # whether the group gets envelopes now (set by its presence)
        self._broker = broker
        self._registry = registry
        self._clock = clock
        self._store = store
        self._claims = claims
        self.stats = ExecutorStats()
        self.reporter = Reporter(
            broker,
            flush_interval=config.flush_interval,
            store=store,
            max_acks=max(config.concurrency // 2, 1),
        )
        self._finals = FinalizedAttempts(
            store,
            retention=config.finalized_retention,
            max_entries=config.finalized_max_entries,
        )
        secrets = WorkerSecrets() if secrets is None else secrets
        self._runner = Runner(
            worker_id=config.worker_id,
            instance_id=config.instance_id,
            sync_threads=config.sync_threads,
            clock=clock,
            stats=self.stats,
            default_timeout=config.default_timeout,
            rng=rng or random.Random(),
            on_finished=on_finished,
            tracing=tracing if tracing is not None and tracing.enabled else None,
            mask=secrets.record,
        )
        self._intake = Intake(
            config,
            definitions=dict(registry),
            reporter=self.reporter,
            runner=self._runner,
            finals=self._finals,
            stats=self.stats,
            secrets=secrets,
            clock=clock,
            claims=claims,
            limits=limits,
        )
        self._consuming: asyncio.Task[None] | None = None
        self._housekeeping: asyncio.Task[None] | None = None

    @property
    def default_timeout(self) -> float | None:
        """Seconds an attempt may run when neither its job nor its job type sets a limit."""
        return self._runner.default_timeout

    @property
    def load(self) -> int:
        """How many handlers are running now."""
        return len(self._runner.running)

    @property
    def held(self) -> int:
        """Deliveries received and waiting for a slot or their job type's turn."""
        return self._intake.held

    @property
    def gate(self) -> LimitGate | None:
        """The cluster-wide limits' gate (``None``: limits not followed)."""
        return self._intake.gate

    @property
    def early(self) -> int:
        """Deliveries received before their due time, held until it."""
        return self._intake.early

    def retry_delay(self, definition: AnyJobDefinition, message: JobMessage) -> float:
        """Seconds before the retry that follows the failure of ``message``'s attempt
        (:meth:`rota.worker.run.Runner.retry_delay`, the jitter drawn from ``rng``)."""
        return self._runner.retry_delay(definition, message)

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Declare the group's queue for the registry's job types and start consuming."""
        if self._consuming is not None:
            raise RuntimeError("executor already started")
        await self._broker.declare_worker_group(self.worker_id, list(self._registry))
        if self._store is not None:
            # old finalized attempts forgotten, the newest remembered; the outbox counted
            # (replayed by the reporter's first flush, before anything new)
            await self._finals.load()
            await self.reporter.count_outbox()
        if self._claims is not None:
            await self._claims.load()
        if (gate := self._intake.gate) is not None:
            await gate.refresh()
            gate.start()
        self._intake.stopping = False
        self.reporter.start()
        loop = asyncio.get_running_loop()
        self._consuming = loop.create_task(self._consume(), name=f"rota-intake-{self.worker_id}")
        self._housekeeping = loop.create_task(self._housekeep(), name="rota-executor-upkeep")

    async def _consume(self) -> None:
        """The group's deliveries, up to the prefetch unsettled, into the intake."""
        deliveries = self._broker.consume_jobs(
            self.worker_id, self.prefetch, envelopes=lambda: self.envelopes
        )
        await self._intake.consume(deliveries)

    async def stop(self, grace: float) -> None:
        """Stop intake and give back every delivery not started; let running handlers finish
        for up to ``grace`` seconds, cut the rest short (reported interrupted: Unknown, and
        the scheduler gives each its next attempt at once), and hand over the reports (to the
        outbox if publishing fails)."""
        intake = self._intake
        intake.stopping = True
        for task in (self._consuming, self._housekeeping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._consuming = self._housekeeping = None
        await intake.give_back_unstarted()
        if intake.tasks and grace > 0:
            # Draining is being alive: the running ones keep their heartbeats and claims
            # (else the scheduler takes them for a dead worker's and runs them again).
            upkeep = asyncio.get_running_loop().create_task(
                self._keep_running_alive(), name="rota-executor-drain-upkeep"
            )
            try:
                await asyncio.wait(intake.tasks, timeout=grace)
            finally:
                upkeep.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await upkeep
        self._runner.cancel_all(f"worker stopped; still running after its grace of {grace:g} s")
        if tasks := intake.tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_CANCEL_WAIT)
            if stuck:
                log.warning(
                    "handlers ignored cancellation at stop",
                    extra={"action": "executor_stop", "count": len(stuck)},
                )
        if intake.gate is not None:
            await intake.gate.close()
        await self.reporter.stop()
        self._runner.close()

    def cancel(self, occurrence_id: UUID, reason: str | None = None) -> bool:
        """Cancel a running occurrence: an async handler's task is cancelled, a sync handler's
        ``ctx.cancelled`` is set; it is reported Cancelled with ``reason`` (else
        ``cancelled``). ``False`` if it is not running here; it is then remembered, so a
        message for it arriving later is reported Cancelled without running. A held delivery
        of it (not due yet, or waiting for a limit) is reported Cancelled and acknowledged
        at once."""
        if self._intake.cancel_unstarted(occurrence_id, reason):
            return True
        return self._runner.cancel(occurrence_id, reason)

    def supersede(self, occurrence_id: UUID, below: int) -> None:
        """The occurrence's message was sent again for job version ``below`` (its job edited
        before its due time): a held copy of an older version is acknowledged without
        running or a report, its claim given up (the newer copy runs, here or on another
        instance); one arriving later is dropped on arrival. One that started runs on."""
        self._intake.supersede(occurrence_id, below)

    # --- upkeep: heartbeats, claims, waiting deliveries, pruning ------------------------

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(off_the_second(self.config.heartbeat_interval))
            await self._heartbeat()
            await self._intake.watch_waiting()
            await self._finals.prune_if_due()

    async def _heartbeat(self) -> None:
        """The running occurrences' heartbeats (Running again) and their claims renewed."""
        self._beat()
        if self._claims is not None:
            running = [(oid, e.ctx.attempt) for oid, e in self._runner.running.items()]
            await self._claims.renew(running)

    async def _keep_running_alive(self) -> None:
        """While a stop lets the running handlers finish: only their heartbeats."""
        while True:
            await asyncio.sleep(off_the_second(self.config.heartbeat_interval))
            await self._heartbeat()

    def _beat(self) -> None:
        now = self._clock()
        threshold = time.monotonic() - self.config.heartbeat_interval
        for oid, entry in list(self._runner.running.items()):
            if entry.started <= threshold and not self.reporter.has_pending_running(oid):
                self.reporter.add_status(self._runner.record(entry.ctx, S.RUNNING, now))
