"""The executor: takes job messages from the broker, runs their handlers, and reports status
and logs back in packed batches (DESIGN.md §3 step 5-6).

Per delivery: wait for a slot (and the job type's turn) -> skip it if its attempt was finalized
here -> claim the attempt across the group (:mod:`rota.worker.claims`; skip it if another
instance holds it) -> check it (job type known, data valid) -> report Running, acknowledge
after the flush that hands it over -> run the handler (async on the loop, sync in a thread
pool) -> record the outcome. The executor talks to the :class:`~rota.core.ports.Broker` and its own
:class:`~rota.worker.localstore.LocalStore`; it never touches the scheduler's store.

The :class:`Executor` here is the intake (consume, accept, the per-delivery steps above), the
life cycle (start, stop, cancel) and the upkeep (heartbeats, claim renewal). It composes one
collaborator per concern, each in its own module:

* :class:`~rota.worker.flow.Flow` -- slots, per-job-type limits, held deliveries, hand-back;
* :class:`~rota.worker.finals.FinalizedAttempts` -- the attempts finalized here, pruned;
* :class:`~rota.worker.run.Runner` -- one handler run to its final status record (timeouts,
  cancellation, retries), and :class:`~rota.worker.run.ExecutorStats`, the counters;
* :class:`~rota.worker.reporter.Reporter` -- the status and log batches, and the acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from rota.core.models import (
    UNKNOWN_HOLDER,
    FailureType,
    JobMessage,
    LogRecord,
    OccurrenceStatus,
    StatusRecord,
    utcnow,
)
from rota.core.ports import Broker, Delivery
from rota.core.ports.limits import LimitMemory
from rota.core.timing import off_the_second
from rota.observability.logs import set_job_context
from rota.observability.tracing import Tracing
from rota.sdk.context import JobContext
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker.claims import AttemptClaims, ClaimVerdict
from rota.worker.config import ExecutorConfig
from rota.worker.early import Early, Parsed, granted
from rota.worker.finals import FinalizedAttempts
from rota.worker.flow import Flow
from rota.worker.gate import LimitGate
from rota.worker.hold import Entry, Hold
from rota.worker.localstore import LocalStore
from rota.worker.reporter import Reporter
from rota.worker.run import ExecutorStats, Runner, declined, format_exception, log_finished
from rota.worker.secrets import WorkerSecrets

__all__ = ["Executor", "ExecutorConfig", "ExecutorStats", "Reporter", "format_exception"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

_CANCEL_WAIT = 10.0
"""Seconds stop() waits for cancelled handlers before giving up on them."""

S = OccurrenceStatus

_MAX_SUPERSEDED = 10_000
_INTAKE_SLICE = 0.0005
"""Seconds of intake after which it lets the loop run other work (a due start's timer)."""


class Executor:
    """Runs the handlers of a worker group's job messages (DESIGN.md §3 step 5).

    ``concurrency`` bounds how many handlers run at once (and is the consumer's prefetch); a
    job type's own ``concurrency`` bounds its handlers within that, and its further messages
    wait while other types pass them. A delivery is acknowledged after the flush that hands
    over its Running report (published, or in the ``store``'s outbox), so a long job holds no
    delivery open. A delivery of an attempt already finalized here is acknowledged and not run.
    Sync handlers run in a pool of ``sync_threads`` threads. Running occurrences are
    re-reported as Running every ``heartbeat_interval`` seconds (their sign of life).

    A delivery waiting longer than ``hand_back_after`` seconds (for a slot, or its job type's
    turn) is given back to the broker, which delivers it again: no delivery stays unsettled
    long enough to meet the broker's consumer timeout.
    ``store`` (optional: ``None`` keeps everything in memory) also keeps the finalized attempts
    for ``finalized_retention`` seconds, at most ``finalized_max_entries`` of them.

    An attempt may run for the message's ``timeoutSeconds`` (the job's, else its job type's as
    the scheduler knows it), else the job type's ``timeout`` here, else ``default_timeout``
    (``None``: no limit). ``rng`` draws the retry jitter (a fresh generator by default).
    ``on_finished(job_type, duration_ms)`` is called after a handler ran (metrics).

    ``claims`` (optional) claims each attempt across the worker group before it starts: a
    delivery of an attempt another instance holds is acknowledged and not run
    (:mod:`rota.worker.claims`).

    A delivery received before its ``scheduledFor`` (the dispatcher sends fires ahead by its
    lead) is held on a timer (:mod:`rota.worker.hold`), unstarted and unacknowledged, and
    starts at its due instant; it takes no slot. ``hold_capacity``: how many may be held
    beyond ``concurrency`` (the consumer's prefetch is their sum; 0, the default, leaves the
    prefetch at ``concurrency``, so held deliveries then narrow what can be received). A held
    delivery whose occurrence is cancelled is reported Cancelled and not run. What can be
    done for a held delivery before its due instant is done while it waits (its attempt
    claimed, its data parsed, its context built), so that its start is only its start; a
    claim made ahead for a delivery that then does not start here is given up.

    ``limits`` (optional): the coordination's cluster-wide limits; a delivery of a limited
    job type waits (without a slot) until it gets a slot of its limit
    (:mod:`rota.worker.gate`), held for ``limit_lease`` seconds between heartbeats. The
    consumer's prefetch grows by ``limit_capacity`` (default ``concurrency``) for the
    deliveries waiting there, so that they do not keep other work from being received.

    ``stats`` counts the deliveries skipped, handed back, dropped or cancelled unstarted.
    ``secrets``: the secret references' values, masked in reports (:mod:`rota.worker.secrets`).
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
        worker_id, instance_id = config.worker_id, config.instance_id
        concurrency = config.concurrency
        self._claims = claims
        self.prefetch = config.prefetch(limited=limits is not None)
        self.envelopes = False  # whether the group gets envelopes now (set by its presence)
        self.worker_id = worker_id
        self.instance_id = instance_id
        self.concurrency = concurrency
        self._broker = broker
        self._registry = registry
        self._definitions = dict(registry)
        self._clock = clock
        self._start_clock: Clock = (
            functools.partial(datetime.now, UTC) if clock is utcnow else clock
        )
        """The clock of a group's starts (the same time, a call less per start)."""
        self._heartbeat_interval = config.heartbeat_interval
        self._store = store
        self.stats = ExecutorStats()
        self.reporter = Reporter(
            broker,
            flush_interval=config.flush_interval,
            store=store,
            max_acks=max(concurrency // 2, 1),
        )
        self._flow = Flow(
            concurrency=concurrency,
            definitions=self._definitions,
            hand_back_after=config.hand_back_after,
            stats=self.stats,
            handle=self._start,
            ack=self.reporter.ack_after_flush,
            unstarted=self._unstarted,
            finished=None if limits is None else self._limit_done,
        )
        self._gate = (
            None
            if limits is None
            else LimitGate(
                limits,
                instance_id,
                room=lambda: self._flow.room,
                admit=self._flow.admit,
                note=self._note_waiting,
                hand_back=self._flow.hand_back,
                lease=config.limit_lease,
            )
        )
        self._hold = Hold(
            release=self._release,
            drop=self.reporter.ack_after_flush,
            ready=self._ready,
            release_group=self._release_group,
        )
        self._early: dict[UUID, Early] = {}
        """What was done ahead for the held (or released, not started) deliveries."""
        self._give_up: list[tuple[UUID, int]] = []
        """Attempts claimed ahead that will not start here: their claims to give up."""
        self._giving_up: asyncio.Task[None] | None = None
        self._superseded: OrderedDict[UUID, int] = OrderedDict()
        """Occurrences sent again for a newer job version -> that version (copies of older
        versions are dropped), the latest few thousand."""
        self._finals = FinalizedAttempts(
            store,
            retention=config.finalized_retention,
            max_entries=config.finalized_max_entries,
        )
        self._secrets = WorkerSecrets() if secrets is None else secrets
        self._runner = Runner(
            worker_id=worker_id,
            instance_id=instance_id,
            sync_threads=config.sync_threads,
            clock=clock,
            stats=self.stats,
            default_timeout=config.default_timeout,
            rng=rng or random.Random(),
            on_finished=on_finished,
            tracing=tracing if tracing is not None and tracing.enabled else None,
            mask=self._secrets.record,
        )
        self._intake: asyncio.Task[None] | None = None
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
        return self._flow.held

    @property
    def gate(self) -> LimitGate | None:
        """The cluster-wide limits' gate (``None``: limits not followed)."""
        return self._gate

    @property
    def early(self) -> int:
        """Deliveries received before their due time, held until it."""
        return len(self._hold)

    def retry_delay(self, definition: AnyJobDefinition, message: JobMessage) -> float:
        """Seconds before the retry that follows the failure of ``message``'s attempt
        (:meth:`rota.worker.run.Runner.retry_delay`, the jitter drawn from ``rng``)."""
        return self._runner.retry_delay(definition, message)

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Declare the group's queue for the registry's job types and start consuming."""
        if self._intake is not None:
            raise RuntimeError("executor already started")
        await self._broker.declare_worker_group(self.worker_id, list(self._registry))
        if self._store is not None:
            # old finalized attempts forgotten, the newest remembered; the outbox counted
            # (replayed by the reporter's first flush, before anything new)
            await self._finals.load()
            await self.reporter.count_outbox()
        if self._claims is not None:
            await self._claims.load()
        if self._gate is not None:
            await self._gate.refresh()
            self._gate.start()
        self._flow.stopping = False
        self.reporter.start()
        loop = asyncio.get_running_loop()
        self._intake = loop.create_task(self._consume(), name=f"rota-intake-{self.worker_id}")
        self._housekeeping = loop.create_task(self._housekeep(), name="rota-executor-upkeep")

    async def stop(self, grace: float) -> None:
        """Stop intake and give back every delivery not started; let running handlers finish
        for up to ``grace`` seconds, cut the rest short (reported interrupted: Unknown, and
        the scheduler gives each its next attempt at once), and hand over the reports (to the
        outbox if publishing fails)."""
        self._flow.stopping = True
        for task in (self._intake, self._housekeeping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._intake = self._housekeeping = None
        for delivery in self._hold.take_all():
            await self._flow.hand_back(delivery)
        await self._flow.hand_back_held(math.inf)
        if self._gate is not None:
            for delivery in await self._gate.stop():
                await self._flow.hand_back(delivery)
        await self._give_up_claims()
        if self._flow.tasks and grace > 0:
            # Draining is being alive: the running ones keep their heartbeats and claims
            # (else the scheduler takes them for a dead worker's and runs them again).
            upkeep = asyncio.get_running_loop().create_task(
                self._keep_running_alive(), name="rota-executor-drain-upkeep"
            )
            try:
                await asyncio.wait(self._flow.tasks, timeout=grace)
            finally:
                upkeep.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await upkeep
        self._runner.cancel_all(f"worker stopped; still running after its grace of {grace:g} s")
        if tasks := self._flow.tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_CANCEL_WAIT)
            if stuck:
                log.warning(
                    "handlers ignored cancellation at stop",
                    extra={"action": "executor_stop", "count": len(stuck)},
                )
        if self._gate is not None:
            await self._gate.close()
        await self.reporter.stop()
        self._runner.close()

    def cancel(self, occurrence_id: UUID, reason: str | None = None) -> bool:
        """Cancel a running occurrence: an async handler's task is cancelled, a sync handler's
        ``ctx.cancelled`` is set; it is reported Cancelled with ``reason`` (else
        ``cancelled``). ``False`` if it is not running here; it is then remembered, so a
        message for it arriving later is reported Cancelled without running. A held delivery
        of it (not due yet, or waiting for a limit) is reported Cancelled and acknowledged
        at once."""
        delivery = self._hold.take(occurrence_id)
        if delivery is None and self._gate is not None:
            delivery = self._gate.take(occurrence_id)  # waiting for a limit
        if delivery is not None:
            self._early.pop(occurrence_id, None)  # final here: its claim may stay
            self.stats.cancelled_unstarted += 1
            text = reason or "cancelled before it started"
            self._report_unrun(delivery.message, S.CANCELLED, None, text)
            self.reporter.ack_after_flush(delivery)
            return True
        return self._runner.cancel(occurrence_id, reason)

    def supersede(self, occurrence_id: UUID, below: int) -> None:
        """The occurrence's message was sent again for job version ``below`` (its job edited
        before its due time): a held copy of an older version is acknowledged without
        running or a report, its claim given up (the newer copy runs, here or on another
        instance); one arriving later is dropped on arrival. One that started runs on."""
        superseded = self._superseded
        superseded[occurrence_id] = max(below, superseded.get(occurrence_id, 0))
        superseded.move_to_end(occurrence_id)
        if len(superseded) > _MAX_SUPERSEDED:
            superseded.popitem(last=False)
        delivery = self._hold.get(occurrence_id)
        if delivery is not None and delivery.message.job_version < below:
            self._hold.take(occurrence_id)
            self._drop_superseded(delivery)

    def _drop_superseded(self, delivery: Delivery) -> None:
        self.stats.superseded += 1
        self._unstarted(delivery)
        self.reporter.ack_after_flush(delivery)

    # --- intake -------------------------------------------------------------------------

    async def _consume(self) -> None:
        """Take every delivery the broker's ``prefetch`` lets through; those not due yet wait
        on the hold's timer, those that cannot start yet are held by the flow, where their
        wait is watched (none sits unseen until the broker's consumer timeout)."""
        deliveries = self._broker.consume_jobs(
            self.worker_id, self.prefetch, envelopes=lambda: self.envelopes
        )
        clock = time.perf_counter
        since = clock()
        try:
            async for delivery in deliveries:
                self._accept(delivery)
                if clock() - since > _INTAKE_SLICE:
                    # A burst of deliveries (a batch sent ahead) is taken in slices: the hold's
                    # timers and the handlers get the loop in between.
                    await asyncio.sleep(0)
                    since = clock()
        finally:
            aclose = getattr(deliveries, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _accept(self, delivery: Delivery) -> None:
        message = delivery.message
        if message.job_type not in self._definitions:
            self._decline(delivery)
        elif self._finals.known(message):
            self._skip(delivery)
        elif self._superseded and message.job_version < self._superseded.get(
            message.occurrence_id, 0
        ):
            self._drop_superseded(delivery)
        elif self._hold.hold(delivery):
            self._prepare(delivery)
        else:
            self._admit(delivery)

    def _admit(self, delivery: Delivery) -> None:
        """To the flow, through the limits' gate for a limited job type."""
        gate = self._gate
        if gate is not None and gate.applies(delivery.message.job_type):
            gate.wait(delivery)
        else:
            self._flow.admit(delivery)

    def _limit_done(self, delivery: Delivery) -> None:
        if self._gate is not None:
            self._gate.finished(delivery)

    def _note_waiting(self, message: JobMessage, text: str) -> None:
        """The occurrence waits for a limit: a line in its log says so."""
        self.reporter.add_log(
            LogRecord(
                occurrence_id=message.occurrence_id,
                timestamp=self._clock(),
                level="INFO",
                message=text,
                category="rota.limits",
                attempt=message.attempt,
            )
        )

    def _prepare(self, delivery: Delivery) -> None:
        """While a delivery is held: claim its attempt (one call for the deliveries of this
        turn), parse its data, build its context."""
        message = delivery.message
        oid = message.occurrence_id
        current = self._early.get(oid)
        if current is not None and (current.attempt, current.version) > (
            message.attempt,
            message.job_version,
        ):
            return  # a copy of an earlier attempt or job version, dropped by the hold
        claim = None
        if self._claims is not None and oid not in self._runner.running:
            claim = asyncio.get_running_loop().create_task(
                self._claims.claim(message, careful=delivery.redelivered)
            )
        self._early[oid] = Early(message, claim, self._parse(message), self._context(message))

    def _unstarted(self, delivery: Delivery) -> None:
        """A delivery will not start here (given back, or lost with its channel): give up
        the claim made ahead for it, once it is known."""
        message = delivery.message
        if self._gate is not None:
            self._gate.finished(delivery)
        early = self._early.get(message.occurrence_id)
        if early is None or not early.of(message):
            return  # what was done ahead is another copy's
        del self._early[message.occurrence_id]
        claim = early.claim
        if claim is None:
            return
        key = (message.occurrence_id, message.attempt)
        if claim.done():
            self._give_up_claim(key, claim)
        else:
            claim.add_done_callback(functools.partial(self._give_up_claim, key))

    def _give_up_claim(self, key: tuple[UUID, int], claim: asyncio.Task[ClaimVerdict]) -> None:
        if claim.cancelled() or claim.exception() is not None or not claim.result().run:
            return
        self._give_up.append(key)
        if self._giving_up is None or self._giving_up.done():
            self._giving_up = asyncio.get_running_loop().create_task(self._give_up_claims())

    async def _give_up_claims(self) -> None:
        """Give up the claims queued so far, in one call (each turn's, batched)."""
        await asyncio.sleep(0)
        while self._give_up and self._claims is not None:
            batch, self._give_up = self._give_up, []
            await self._claims.release(batch)

    def _ready(self, deliveries: list[Delivery]) -> list[object]:
        """Held deliveries, shortly before their due instant: the ``Early`` of each that can
        then start as it is (:meth:`_prepared`, its channel live, no limit to wait for), else
        ``None``; a cancel in between takes the delivery out of the hold."""
        tokens: list[object] = [None] * len(deliveries)
        if self._flow.stopping:
            return tokens
        gate, flow = self._gate, self._flow
        for i, delivery in enumerate(deliveries):
            job_type = delivery.message.job_type
            early = self._prepared(delivery)
            if (
                early is None
                or not delivery.is_live
                or flow.limited(job_type)
                or (gate is not None and gate.applies(job_type))
            ):
                continue
            tokens[i] = early
        return tokens

    def _release_group(self, entries: list[Entry]) -> None:
        """A group's due instant: the readied deliveries start in one tight loop (the flow's
        :meth:`~rota.worker.flow.Flow.start_ready`), then the others one by one."""
        rest = self._flow.start_ready(entries, self._run, self._start_clock)
        if len(rest) < len(entries):
            early, unstarted = self._early, {id(delivery) for delivery in rest}
            for entry in entries:
                if entry.token is None or id(entry.delivery) in unstarted:
                    continue
                oid = entry.delivery.message.occurrence_id
                if early.get(oid) is entry.token:
                    del early[oid]
        for delivery in rest:
            self._release(delivery)

    def _release(self, delivery: Delivery) -> None:
        """A held delivery's due instant has come: start it (as if it arrived now)."""
        if not delivery.is_live:
            # Its channel is gone: the broker delivers it again (maybe elsewhere).
            self.stats.dropped_dead += 1
            self._unstarted(delivery)
        else:  # at stop, the flow's handling gives it back unstarted
            early = self._early.get(delivery.message.occurrence_id)
            if early is not None and early.of(delivery.message):
                early.released = True
            self._admit(delivery)

    # --- upkeep: heartbeats, claims, held deliveries, pruning ---------------------------

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(off_the_second(self._heartbeat_interval))
            await self._heartbeat()
            self._drop_dead()
            await self._flow.hand_back_overdue()
            if self._gate is not None:
                await self._gate.renew()
                await self._gate.refresh()
                await self._gate.hand_back_overdue(self._flow.hand_back_after)
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
            await asyncio.sleep(off_the_second(self._heartbeat_interval))
            await self._heartbeat()

    def _drop_dead(self) -> None:
        """Drop the received, unstarted deliveries whose channel is gone (a lost broker
        connection): the broker delivers them again, maybe to another instance, which must
        find their claims made ahead given up by now, not at their due time."""
        for delivery in self._hold.take_dead():
            self.stats.dropped_dead += 1
            self._unstarted(delivery)
        self._flow.drop_dead()

    def _beat(self) -> None:
        now = self._clock()
        threshold = time.monotonic() - self._heartbeat_interval
        for oid, entry in list(self._runner.running.items()):
            if entry.started <= threshold and not self.reporter.has_pending_running(oid):
                self.reporter.add_status(self._runner.record(entry.ctx, S.RUNNING, now))

    # --- one delivery: claim -> report Running (ack after its flush) -> run -> outcome ------

    def _start(self, delivery: Delivery) -> Coroutine[Any, Any, None]:
        """What the flow's task for a delivery it starts runs. A delivery released at its due
        instant whose preparation is complete (claimed ahead, data parsed) starts here and
        now: this is its start time, and its task (:meth:`_run`) reports it and runs its
        handler. Any other goes the whole way (:meth:`_handle`)."""
        early = self._prepared(delivery)
        if early is None or not early.released or self._flow.stopping:
            return self._handle(delivery)
        del self._early[delivery.message.occurrence_id]
        return self._run(delivery, early, self._clock())

    def _prepared(self, delivery: Delivery) -> Early | None:
        """What was done ahead for this very copy, if it lets the delivery start as it is:
        its data parsed, its claim granted, not redelivered, not running or finalized here."""
        message = delivery.message
        oid = message.occurrence_id
        early = self._early.get(oid)
        if (
            early is None
            or not early.of(message)
            or early.parsed[0] is None
            or delivery.redelivered
            or oid in self._runner.running
            or self._finals.known(message)
            or not granted(early.claim, self._claims is not None)
        ):
            return None
        return early

    async def _run(self, delivery: Delivery, early: Early, started: datetime) -> None:
        """Run a delivery started at ``started`` by :meth:`_start`: its ``Running`` report
        (with that time) and its ack are queued in the task's first step, before its handler
        runs, not while the deliveries released with it are still being started."""
        message = delivery.message
        definition, data = early.parsed
        assert definition is not None  # checked by _start
        self.reporter.add_status(self._runner.record(early.ctx, S.RUNNING, started))
        self.reporter.ack_after_flush(delivery)
        set_job_context(message.occurrence_id, message.job_id, message.job_type, message.attempt)
        self._report_final(message, await self._runner.run(early.ctx, definition, data, message))

    async def _handle(self, delivery: Delivery) -> None:
        message = delivery.message
        oid = message.occurrence_id
        early = self._early.get(oid)
        if early is not None and not early.of(message):
            early = None  # another copy's (attempt or job version); left for it
        released = early is not None and early.released
        if await self._finals.finalized_here(delivery):
            self._forget_early(oid, early)
            self._skip(delivery)
            return
        if self._flow.stopping:  # not started yet: someone runs it later
            await self._flow.hand_back(delivery)  # (its claim made ahead given up)
            return
        self._forget_early(oid, early)
        if self._claims is not None and oid not in self._runner.running:
            verdict = await self._claimed(self._claims, delivery, early)
            if self._finals.known(message):  # finished here while claiming (a copy raced it)
                self._skip(delivery)
                return
            if not verdict.run:
                self._skip_claimed(delivery, verdict)
                return
        if oid in self._runner.running:
            self.reporter.ack_after_flush(delivery)  # a redelivery of what runs here already
            return
        definition, data = early.parsed if early is not None else self._parse(message)
        if definition is None:
            failure_type, text = data
            self._report_unrun(message, S.FAILED, failure_type, text)
            self.reporter.ack_after_flush(delivery)
            return
        ctx = early.ctx if early is not None else self._context(message)
        # this task's own log context: its log lines (the handler's too) carry the ids
        set_job_context(message.occurrence_id, message.job_id, message.job_type, message.attempt)
        self.reporter.add_status(self._runner.record(ctx, S.RUNNING, self._clock()))
        self.reporter.ack_after_flush(delivery)
        if released:
            # One turn of the loop before the handler: deliveries released together by the
            # hold (a cron second's fires) are each started at that instant, not after the
            # handlers of those before them have run.
            await asyncio.sleep(0)
        self._report_final(message, await self._runner.run(ctx, definition, data, message))

    async def _claimed(
        self, claims: AttemptClaims, delivery: Delivery, early: Early | None
    ) -> ClaimVerdict:
        """The claim of the delivery's attempt: the one made ahead if it was granted, else
        asked now."""
        message = delivery.message
        if early is not None and early.claim is not None:
            verdict = await early.claim
            if verdict.run:
                return verdict
        # Not claimed ahead, or taken then: ask now (a copy another instance held may have
        # been given up since: superseded, or lost with its channel).
        verdict = await claims.claim(message, careful=delivery.redelivered)
        if delivery.redelivered and verdict.outcome == "taken" and not self._flow.stopping:
            # Its holder may have claimed it ahead and lost its delivery with a broker
            # connection: it gives the claim up at its next heartbeat. Ask once more after
            # that, before taking it for a run of that holder's.
            await asyncio.sleep(self._heartbeat_interval * 1.5 + 0.2)
            verdict = await claims.claim(message, careful=True)
        return verdict

    def _forget_early(self, oid: UUID, early: Early | None) -> None:
        if early is not None:
            del self._early[oid]

    def _parse(self, message: JobMessage) -> Parsed:
        """The definition and parsed data (its secret references resolved), or ``None`` and
        why it cannot run."""
        return self._secrets.parse(self._definitions[message.job_type], message)

    def _report_unrun(
        self,
        message: JobMessage,
        status: OccurrenceStatus,
        failure_type: FailureType | None,
        text: str,
    ) -> None:
        self._report_final(
            message,
            StatusRecord(
                occurrence_id=message.occurrence_id,
                status=status,
                timestamp=self._clock(),
                attempt=message.attempt,
                instance_id=self.instance_id,
                exception=text,
                failure_type=failure_type,
            ),
        )

    def _context(self, message: JobMessage) -> JobContext:
        return JobContext(
            job_type=message.job_type,
            occurrence_id=message.occurrence_id,
            job_id=message.job_id,
            correlation_id=message.original_correlation_id or message.occurrence_id,
            attempt=message.attempt,
            max_retries=message.max_retries,
            scheduled_for=message.scheduled_for,
            instance_id=self.instance_id,
            log_sink=self._secrets.sink(self.reporter.add_log),
        )

    def _report_final(self, message: JobMessage, record: StatusRecord) -> None:
        record = self._secrets.record(record)  # no resolved secret leaves the worker
        log_finished(message.job_type, record)
        self.reporter.add_status(record)
        self._finals.remember(record.occurrence_id, record.attempt)

    # --- deliveries acknowledged without running ------------------------------------------

    def _decline(self, delivery: Delivery) -> None:
        """A job type not run here (:func:`~rota.worker.run.declined`): no claim, no slot."""
        self.stats.declined += 1
        now = self._clock()
        self.reporter.add_status(declined(delivery.message, self.worker_id, self.instance_id, now))
        self.reporter.ack_after_flush(delivery)

    def _skip(self, delivery: Delivery) -> None:
        message = delivery.message
        self.stats.duplicates_skipped += 1
        log.info(
            "delivery of an attempt already finalized here: acknowledged, not run",
            extra={
                "action": "skip_finalized",
                "occurrence_id": str(message.occurrence_id),
                "attempt": message.attempt,
            },
        )
        self.reporter.ack_after_flush(delivery)

    def _skip_claimed(self, delivery: Delivery, verdict: ClaimVerdict) -> None:
        """Acknowledge, without running, a delivery of an attempt another instance holds (or
        may hold: its claim was lost, or could not be read, and the message is a redelivery).

        A redelivered message means the channel of an earlier delivery died: its holder may
        have died before its Running report went out, leaving the occurrence Queued with
        nobody to run it. So it is reported Running for its holder as of the claim: a live
        holder's reports supersede it (an older heartbeat), a dead one's silence gets it its
        next attempt; an unknown holder (``UNKNOWN_HOLDER``) is settled by the store."""
        message = delivery.message
        self.stats.claimed_elsewhere += 1
        log.info(
            "delivery of an attempt claimed by another worker instance: acknowledged, not run",
            extra={
                "action": "skip_claimed",
                "occurrence_id": str(message.occurrence_id),
                "attempt": message.attempt,
                "owner": verdict.owner,
                "claim": verdict.outcome,
                "redelivered": delivery.redelivered,
            },
        )
        if delivery.redelivered:
            at = self._clock()  # an unknown holder's: now, the store's silence starts now
            if verdict.claimed_at is not None and verdict.owner is not None:
                at = min(at, datetime.fromtimestamp(verdict.claimed_at, UTC))
            self.reporter.add_status(
                StatusRecord(
                    occurrence_id=message.occurrence_id,
                    status=S.RUNNING,
                    timestamp=at,
                    attempt=message.attempt,
                    instance_id=UNKNOWN_HOLDER if verdict.owner is None else verdict.owner,
                )
            )
        self.reporter.ack_after_flush(delivery)
