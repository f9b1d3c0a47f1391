"""The intake: one delivery's way through a worker, from the broker to its handler, as named
stages (docs/protocol.md §10 steps 1-7, each job of an envelope being a delivery of its own).

Each stage settles the delivery (acknowledges it without running it, gives it back) or passes
it on to the next one. :meth:`Intake.accept` runs the arrival stages, in order, for each
delivery the broker lets through; the waiting stages (hold, limit gate, slot) hand it on
when its time, its limit or its slot comes:

==  ========================  ==========================================================
 1  known type?               :meth:`~Intake._declined`: a job type not run here is
                              reported Failed (``unknown_job_type``) and acknowledged
 2  finalized here?           :meth:`~Intake._finalized`: a copy of an attempt this worker
                              finalized is acknowledged, not run
 3  superseded?               :meth:`~Intake._superseded`: a copy of an older job version
                              than one sent again is acknowledged unreported
 4  hold until due            :meth:`~Intake._held_until_due`: one sent ahead waits on the
                              hold's timer (:mod:`rota.worker.hold`), prepared meanwhile
                              (:meth:`~Intake._prepare`: claimed, parsed, its context
                              built); at its instant, :meth:`~Intake.due`
4b  claimed together          :meth:`~Intake._claimed_together`: one due now waits for one
                              claim call with the rest of its burst, prepared as a held one
                              is, and the burst starts as a held group does at its instant
 5  limit gate                :meth:`~Intake._limit_gate`: a limited job type waits for a
                              slot of its cluster-wide limit (:mod:`rota.worker.gate`)
 6  slot                      the flow (:mod:`rota.worker.flow`): a free slot and the job
                              type's own turn; the flow's task runs :meth:`~Intake.start`
 7  start                     :meth:`~Intake.start`: one prepared ahead starts as it is;
                              any other goes :meth:`~Intake._walk`'s whole way:
                              finalized here (the store asked)? stopping? then
                              :meth:`~Intake._claim` across the group, running here already?,
                              :meth:`~Intake._check` (its data valid)
 8  run                       :meth:`~Intake._run`: Running reported (the delivery acked
                              after the flush that carries it), the handler run
                              (:class:`~rota.worker.run.Runner`), its outcome reported
==  ========================  ==========================================================

What leaves the intake on the way unstarted (superseded, lost with its channel, given back)
goes through :meth:`~Intake._unstarted`, which gives up a claim made ahead; a held delivery
whose occurrence is cancelled is reported Cancelled (:meth:`~Intake.cancel_unstarted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine
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
from rota.core.ports import Delivery
from rota.core.ports.limits import LimitMemory
from rota.observability.logs import set_job_context
from rota.sdk.context import JobContext
from rota.sdk.registry import AnyJobDefinition
from rota.worker.claims import AttemptClaims, ClaimVerdict
from rota.worker.config import ExecutorConfig
from rota.worker.early import Early, Parsed, granted
from rota.worker.finals import FinalizedAttempts
from rota.worker.flow import Flow
from rota.worker.gate import LimitGate
from rota.worker.hold import Entry, Hold
from rota.worker.reporter import Reporter
from rota.worker.run import ExecutorStats, Runner, declined, log_finished
from rota.worker.secrets import WorkerSecrets

__all__ = ["Intake"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

S = OccurrenceStatus

_MAX_SUPERSEDED = 10_000
_INTAKE_SLICE = 0.0005
"""Seconds of intake after which it lets the loop run other work (a due start's timer)."""


class Intake:
    """The stages of one delivery (see the module). It owns the waiting stages (the hold,
    the limits' gate when ``limits`` is given, the flow's slots) and what was done ahead for
    the held deliveries; the executor owns its life cycle and upkeep."""

    def __init__(
        self,
        config: ExecutorConfig,
        *,
        definitions: dict[str, AnyJobDefinition],
        reporter: Reporter,
        runner: Runner,
        finals: FinalizedAttempts,
        stats: ExecutorStats,
        secrets: WorkerSecrets,
        clock: Clock,
        claims: AttemptClaims | None,
        limits: LimitMemory | None,
    ) -> None:
        self._worker_id = config.worker_id
        self._instance_id = config.instance_id
        self._heartbeat_interval = config.heartbeat_interval
        self._definitions = definitions
        self._reporter = reporter
        self._runner = runner
        self._finals = finals
        self._stats = stats
        self._secrets = secrets
        self._clock = clock
        self._start_clock: Clock = (
            functools.partial(datetime.now, UTC) if clock is utcnow else clock
        )
        """The clock of a group's starts (the same time, a call less per start)."""
        self._claims = claims
        self._flow = Flow(
            concurrency=config.concurrency,
            definitions=definitions,
            hand_back_after=config.hand_back_after,
            stats=stats,
            handle=self.start,
            ack=reporter.ack_after_flush,
            unstarted=self._unstarted,
            finished=None if limits is None else self._limit_done,
        )
        self.gate = (
            None
            if limits is None
            else LimitGate(
                limits,
                config.instance_id,
                room=lambda: self._flow.room,
                admit=self._flow.admit,
                note=self._note_waiting,
                hand_back=self._flow.hand_back,
                lease=config.limit_lease,
            )
        )
        """The cluster-wide limits' gate (``None``: limits not followed)."""
        self._hold = Hold(
            release=self.due,
            drop=reporter.ack_after_flush,
            ready=self._ready,
            release_group=self._release_group,
        )
        self._early: dict[UUID, Early] = {}
        """What was done ahead for the held (or released, not started) deliveries."""
        self._burst: list[tuple[Delivery, asyncio.Future[ClaimVerdict], bool]] = []
        """Claims to make together (stages 4 and 4b): the delivery, its claim's future, and
        whether it starts once it is made (due now)."""
        self._claiming: asyncio.Task[None] | None = None
        self._give_up: list[tuple[UUID, int]] = []
        """Attempts claimed ahead that will not start here: their claims to give up."""
        self._giving_up: asyncio.Task[None] | None = None
        self._superseded_below: OrderedDict[UUID, int] = OrderedDict()
        """Occurrences sent again for a newer job version -> that version (copies of older
        versions are dropped), the latest few thousand."""

    @property
    def held(self) -> int:
        """Deliveries received and waiting for a slot or their job type's turn."""
        return self._flow.held

    @property
    def early(self) -> int:
        """Deliveries received before their due time, held until it."""
        return len(self._hold)

    @property
    def stopping(self) -> bool:
        """Set at stop: nothing more starts; what was received goes back to the broker."""
        return self._flow.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self._flow.stopping = value

    @property
    def tasks(self) -> set[asyncio.Task[None]]:
        """The tasks of the deliveries started (a copy)."""
        return self._flow.tasks

    # --- receive ------------------------------------------------------------------------

    async def consume(self, deliveries: AsyncIterator[Delivery]) -> None:
        """Take every delivery the broker's prefetch lets through into :meth:`accept`; those
        not due yet wait on the hold's timer, those that cannot start yet are held by the
        flow, where their wait is watched (none sits unseen until the consumer timeout)."""
        clock = time.perf_counter
        since = clock()
        try:
            async for delivery in deliveries:
                self.accept(delivery)
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

    def accept(self, delivery: Delivery) -> None:
        """A delivery just received: the arrival stages, in order, then the limit gate."""
        if (
            self._declined(delivery)
            or self._finalized(delivery)
            or self._superseded(delivery)
            or self._held_until_due(delivery)
            or self._claimed_together(delivery)
        ):
            return
        self._limit_gate(delivery)

    # --- 1-3: settled on arrival --------------------------------------------------------

    def _declined(self, delivery: Delivery) -> bool:
        """1. Known type? A job type not run here (:func:`~rota.worker.run.declined`) is
        reported and acknowledged: no claim, no slot."""
        if delivery.message.job_type in self._definitions:
            return False
        self._stats.declined += 1
        now = self._clock()
        self._reporter.add_status(
            declined(delivery.message, self._worker_id, self._instance_id, now)
        )
        self._reporter.ack_after_flush(delivery)
        return True

    def _finalized(self, delivery: Delivery) -> bool:
        """2. Finalized here? (remembered in memory; a redelivery's attempt is also looked up
        in the local store when it starts, :meth:`_walk`)."""
        if not self._finals.known(delivery.message):
            return False
        self._skip(delivery)
        return True

    def _superseded(self, delivery: Delivery) -> bool:
        """3. Superseded? A copy of a job version older than the one its occurrence was sent
        again for (:meth:`supersede`) is dropped."""
        below, message = self._superseded_below, delivery.message
        if not below or message.job_version >= below.get(message.occurrence_id, 0):
            return False
        self._drop_superseded(delivery)
        return True

    def supersede(self, occurrence_id: UUID, below: int) -> None:
        """The occurrence's message was sent again for job version ``below``: a held copy of
        an older version is dropped now, one arriving later on arrival (stage 3)."""
        superseded = self._superseded_below
        superseded[occurrence_id] = max(below, superseded.get(occurrence_id, 0))
        superseded.move_to_end(occurrence_id)
        if len(superseded) > _MAX_SUPERSEDED:
            superseded.popitem(last=False)
        delivery = self._hold.get(occurrence_id)
        if delivery is not None and delivery.message.job_version < below:
            self._hold.take(occurrence_id)
            self._drop_superseded(delivery)

    def _drop_superseded(self, delivery: Delivery) -> None:
        self._stats.superseded += 1
        self._unstarted(delivery)
        self._reporter.ack_after_flush(delivery)

    # --- 4: hold until due --------------------------------------------------------------

    def _held_until_due(self, delivery: Delivery) -> bool:
        """4. Hold until due: a delivery sent ahead of its ``scheduledFor`` waits on the
        hold's timer, prepared meanwhile; the hold hands it to :meth:`due` (or a group of
        them to :meth:`_release_group`) at its instant."""
        if not self._hold.hold(delivery):
            return False
        self._prepare(delivery)
        return True

    def _prepare(self, delivery: Delivery, *, due_now: bool = False) -> None:
        """While a delivery is held (or, ``due_now``, its burst is claimed: stage 4b): claim
        its attempt (one call for the deliveries of this turn), parse its data, build its
        context."""
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
            claim = self._claim_soon(delivery, due_now=due_now)
        self._early[oid] = Early(message, claim, self._parse(message), self._context(message))

    # --- 4b: claimed together ---------------------------------------------------------

    def _claimed_together(self, delivery: Delivery) -> bool:
        """4b. Claimed together: a delivery due now (of an attempt neither running nor
        prepared here) is prepared as a held one is, its claim made in one call with the
        rest of its burst; then the burst starts as a held group does at its instant
        (:meth:`_claim_burst`): no start waits for a claim of its own."""
        if self._claims is None or self._flow.stopping:
            return False
        oid = delivery.message.occurrence_id
        if oid in self._runner.running or oid in self._early:
            return False
        self._prepare(delivery, due_now=True)
        return True

    def _claim_soon(self, delivery: Delivery, *, due_now: bool) -> asyncio.Future[ClaimVerdict]:
        """The claim of a delivery's attempt, made with the others asked in this turn of the
        loop (:meth:`_claim_burst`); ``due_now``: the delivery starts once it is made."""
        claim: asyncio.Future[ClaimVerdict] = asyncio.get_running_loop().create_future()
        self._burst.append((delivery, claim, due_now))
        if self._claiming is None or self._claiming.done():
            loop = asyncio.get_running_loop()
            self._claiming = loop.create_task(self._claim_burst(), name="rota-claims")
        return claim

    async def _claim_burst(self) -> None:
        """Make the claims asked by :meth:`_claim_soon` in one call per turn's burst, then
        release the burst's deliveries due now as one group (:meth:`_release_group`)."""
        assert self._claims is not None
        await asyncio.sleep(0)  # the rest of this turn's deliveries
        while self._burst:
            burst, self._burst = self._burst, []
            try:
                wanted = [(d.message, d.redelivered) for d, _, _ in burst]
                verdicts = await self._claims.claim_many(wanted)
            except BaseException:  # cancelled (the loop ends): nobody waits for them
                for _, claim, _ in burst:
                    claim.cancel()
                raise
            for (_, claim, _), verdict in zip(burst, verdicts, strict=True):
                if not claim.done():
                    claim.set_result(verdict)
            entries = [Entry(delivery) for delivery, _, due_now in burst if due_now]
            if not entries:
                continue
            try:
                tokens = self._ready([entry.delivery for entry in entries])
            except Exception:  # nothing readied: they start one by one
                log.exception("readying claimed deliveries failed", extra={"action": "claim"})
                tokens = [None] * len(entries)
            for entry, token in zip(entries, tokens, strict=True):
                entry.token = token
            self._release_group(entries)

    def _ready(self, deliveries: list[Delivery]) -> list[object]:
        """Held deliveries, shortly before their due instant: the ``Early`` of each that can
        then start as it is (:meth:`_prepared`, its channel live, no limit to wait for), else
        ``None``; a cancel in between takes the delivery out of the hold."""
        tokens: list[object] = [None] * len(deliveries)
        if self._flow.stopping:
            return tokens
        gate, flow = self.gate, self._flow
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
        :meth:`~rota.worker.flow.Flow.start_ready`, stages 5-6 passed when readied), then the
        others one by one (:meth:`due`)."""
        rest = self._flow.start_ready(entries, self._run_prepared, self._start_clock)
        if len(rest) < len(entries):
            early, unstarted = self._early, {id(delivery) for delivery in rest}
            for entry in entries:
                if entry.token is None or id(entry.delivery) in unstarted:
                    continue
                oid = entry.delivery.message.occurrence_id
                if early.get(oid) is entry.token:
                    del early[oid]
        for delivery in rest:
            self.due(delivery)

    def due(self, delivery: Delivery) -> None:
        """A held delivery's due instant has come: on to the limit gate (as if it arrived
        now)."""
        if not delivery.is_live:
            # Its channel is gone: the broker delivers it again (maybe elsewhere).
            self._stats.dropped_dead += 1
            self._unstarted(delivery)
        else:  # at stop, the flow's handling gives it back unstarted
            early = self._early.get(delivery.message.occurrence_id)
            if early is not None and early.of(delivery.message):
                early.released = True
            self._limit_gate(delivery)

    # --- 5-6: limit gate, slot ----------------------------------------------------------

    def _limit_gate(self, delivery: Delivery) -> None:
        """5. Limit gate: a delivery of a limited job type waits for a slot of its limit (the
        gate then admits it to the flow); any other goes to 6, the flow's slots."""
        gate = self.gate
        if gate is not None and gate.applies(delivery.message.job_type):
            gate.wait(delivery)
        else:
            self._flow.admit(delivery)

    def _limit_done(self, delivery: Delivery) -> None:
        if self.gate is not None:
            self.gate.finished(delivery)

    def _note_waiting(self, message: JobMessage, text: str) -> None:
        """The occurrence waits for a limit: a line in its log says so."""
        self._reporter.add_log(
            LogRecord(
                occurrence_id=message.occurrence_id,
                timestamp=self._clock(),
                level="INFO",
                message=text,
                category="rota.limits",
                attempt=message.attempt,
            )
        )

    # --- 7: start -----------------------------------------------------------------------

    def start(self, delivery: Delivery) -> Coroutine[Any, Any, None]:
        """7. Start: what the flow's task for a delivery given a slot runs. One released at
        its due instant whose preparation is complete (claimed ahead, data parsed) starts
        here and now: this is its start time (:meth:`_run_prepared`). Any other goes the
        whole way (:meth:`_walk`)."""
        early = self._prepared(delivery)
        if early is None or not early.released or self._flow.stopping:
            return self._walk(delivery)
        del self._early[delivery.message.occurrence_id]
        return self._run_prepared(delivery, early, self._clock())

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

    def _run_prepared(
        self, delivery: Delivery, early: Early, started: datetime
    ) -> Coroutine[Any, Any, None]:
        """A delivery prepared ahead, started at ``started``: straight to 8 (run)."""
        definition, data = early.parsed
        assert definition is not None  # checked by _prepared
        return self._run(delivery, early.ctx, definition, data, started)

    async def _walk(self, delivery: Delivery) -> None:
        """The whole way from 7 to 8 of a delivery not prepared ahead (or whose preparation
        does not let it start as it is)."""
        message = delivery.message
        oid = message.occurrence_id
        early = self._early.get(oid)
        if early is not None and not early.of(message):
            early = None  # another copy's (attempt or job version); left for it
        released = early is not None and early.released
        if await self._finals.finalized_here(delivery):  # a redelivery: the store asked too
            self._forget_early(oid, early)
            self._skip(delivery)
            return
        if self._flow.stopping:  # not started yet: someone runs it later
            await self._flow.hand_back(delivery)  # (its claim made ahead given up)
            return
        self._forget_early(oid, early)
        if not await self._claim(delivery, early):
            return
        if oid in self._runner.running:
            self._reporter.ack_after_flush(delivery)  # a redelivery of what runs here already
            return
        checked = self._check(delivery, early)
        if checked is None:
            return
        definition, data, ctx = checked
        # One turn of the loop before the handler for one released by the hold: deliveries
        # released together (a cron second's fires) each start at that instant, not after
        # the handlers of those before them have run.
        await self._run(delivery, ctx, definition, data, self._clock(), pause=released)

    async def _claim(self, delivery: Delivery, early: Early | None) -> bool:
        """Claim the attempt across the group (the claim made ahead if it was granted):
        ``False`` when it is settled instead, held by another instance or finalized here
        while claiming (a copy raced it). No claim for an occurrence running here."""
        message = delivery.message
        if self._claims is None or message.occurrence_id in self._runner.running:
            return True
        verdict = await self._claimed(self._claims, delivery, early)
        if self._finals.known(message):  # finished here while claiming (a copy raced it)
            self._skip(delivery)
            return False
        if not verdict.run:
            self._skip_claimed(delivery, verdict)
            return False
        return True

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

    def _check(
        self, delivery: Delivery, early: Early | None
    ) -> tuple[AnyJobDefinition, Any, JobContext] | None:
        """Its definition, parsed data (secret references resolved) and context, made ahead
        or now; data that does not validate is reported Failed (``invalid_data``) and
        acknowledged (``None``)."""
        message = delivery.message
        definition, data = early.parsed if early is not None else self._parse(message)
        if definition is None:
            failure_type, text = data
            self._report_unrun(message, S.FAILED, failure_type, text)
            self._reporter.ack_after_flush(delivery)
            return None
        ctx = early.ctx if early is not None else self._context(message)
        return definition, data, ctx

    # --- 8: run -------------------------------------------------------------------------

    async def _run(
        self,
        delivery: Delivery,
        ctx: JobContext,
        definition: AnyJobDefinition,
        data: Any,
        started: datetime,
        *,
        pause: bool = False,
    ) -> None:
        """8. Run: report Running as of ``started`` and queue the delivery's ack (after the
        flush that carries it) in the task's first step, before its handler runs; run the
        handler (``pause``: one turn of the loop first); report its outcome."""
        message = delivery.message
        self._reporter.add_status(self._runner.record(ctx, S.RUNNING, started))
        self._reporter.ack_after_flush(delivery)
        # this task's own log context: its log lines (the handler's too) carry the ids
        set_job_context(message.occurrence_id, message.job_id, message.job_type, message.attempt)
        if pause:
            await asyncio.sleep(0)
        self._report_final(message, await self._runner.run(ctx, definition, data, message))

    def _forget_early(self, oid: UUID, early: Early | None) -> None:
        if early is not None:
            del self._early[oid]

    def _parse(self, message: JobMessage) -> Parsed:
        """The definition and parsed data (its secret references resolved), or ``None`` and
        why it cannot run."""
        return self._secrets.parse(self._definitions[message.job_type], message)

    def _context(self, message: JobMessage) -> JobContext:
        return JobContext(
            job_type=message.job_type,
            occurrence_id=message.occurrence_id,
            job_id=message.job_id,
            correlation_id=message.original_correlation_id or message.occurrence_id,
            attempt=message.attempt,
            max_retries=message.max_retries,
            scheduled_for=message.scheduled_for,
            instance_id=self._instance_id,
            log_sink=self._secrets.sink(self._reporter.add_log),
        )

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
                instance_id=self._instance_id,
                exception=text,
                failure_type=failure_type,
            ),
        )

    def _report_final(self, message: JobMessage, record: StatusRecord) -> None:
        record = self._secrets.record(record)  # no resolved secret leaves the worker
        log_finished(message.job_type, record)
        self._reporter.add_status(record)
        self._finals.remember(record.occurrence_id, record.attempt)

    # --- settled without running --------------------------------------------------------

    def _skip(self, delivery: Delivery) -> None:
        message = delivery.message
        self._stats.duplicates_skipped += 1
        log.info(
            "delivery of an attempt already finalized here: acknowledged, not run",
            extra={
                "action": "skip_finalized",
                "occurrence_id": str(message.occurrence_id),
                "attempt": message.attempt,
            },
        )
        self._reporter.ack_after_flush(delivery)

    def _skip_claimed(self, delivery: Delivery, verdict: ClaimVerdict) -> None:
        """Acknowledge, without running, a delivery of an attempt another instance holds (or
        may hold: its claim was lost, or could not be read, and the message is a redelivery).

        A redelivered message means the channel of an earlier delivery died: its holder may
        have died before its Running report went out, leaving the occurrence Queued with
        nobody to run it. So it is reported Running for its holder as of the claim: a live
        holder's reports supersede it (an older heartbeat), a dead one's silence gets it its
        next attempt; an unknown holder (``UNKNOWN_HOLDER``) is settled by the store."""
        message = delivery.message
        self._stats.claimed_elsewhere += 1
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
            self._reporter.add_status(
                StatusRecord(
                    occurrence_id=message.occurrence_id,
                    status=S.RUNNING,
                    timestamp=at,
                    attempt=message.attempt,
                    instance_id=UNKNOWN_HOLDER if verdict.owner is None else verdict.owner,
                )
            )
        self._reporter.ack_after_flush(delivery)

    def cancel_unstarted(self, occurrence_id: UUID, reason: str | None) -> bool:
        """A delivery of the occurrence held here (not due yet, or waiting for a limit) is
        reported Cancelled and acknowledged at once; ``False`` if none is."""
        delivery = self._hold.take(occurrence_id)
        if delivery is None and self.gate is not None:
            delivery = self.gate.take(occurrence_id)  # waiting for a limit
        if delivery is None:
            return False
        self._early.pop(occurrence_id, None)  # final here: its claim may stay
        self._stats.cancelled_unstarted += 1
        text = reason or "cancelled before it started"
        self._report_unrun(delivery.message, S.CANCELLED, None, text)
        self._reporter.ack_after_flush(delivery)
        return True

    # --- leaving unstarted: hand-back, lost channels, claims made ahead given up --------

    def _unstarted(self, delivery: Delivery) -> None:
        """A delivery will not start here (given back, or lost with its channel): give up
        the claim made ahead for it, once it is known."""
        message = delivery.message
        if self.gate is not None:
            self.gate.finished(delivery)
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

    def _give_up_claim(self, key: tuple[UUID, int], claim: asyncio.Future[ClaimVerdict]) -> None:
        if claim.cancelled() or claim.exception() is not None or not claim.result().run:
            return
        self._give_up.append(key)
        if self._giving_up is None or self._giving_up.done():
            self._giving_up = asyncio.get_running_loop().create_task(self.give_up_claims())

    async def give_up_claims(self) -> None:
        """Give up the claims queued so far, in one call (each turn's, batched)."""
        await asyncio.sleep(0)
        while self._give_up and self._claims is not None:
            batch, self._give_up = self._give_up, []
            await self._claims.release(batch)

    async def give_back_unstarted(self) -> None:
        """At stop: every delivery received and not started (held until due, waiting for a
        slot or a limit) goes back to the broker, its claim made ahead given up. A burst
        being claimed is released first (nothing starts at stop: it comes back too)."""
        if self._claiming is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._claiming)
        for delivery in self._hold.take_all():
            await self._flow.hand_back(delivery)
        await self._flow.hand_back_held(float("inf"))
        if self.gate is not None:
            for delivery in await self.gate.stop():
                await self._flow.hand_back(delivery)
        await self.give_up_claims()

    async def watch_waiting(self) -> None:
        """At each heartbeat: the waiting deliveries whose channel is gone dropped (the
        broker delivers them again, maybe to another instance, which must find their claims
        made ahead given up by now, not at their due time), those waiting too long given
        back; the limits' slots renewed and the limits read again."""
        for delivery in self._hold.take_dead():
            self._stats.dropped_dead += 1
            self._unstarted(delivery)
        self._flow.drop_dead()
        await self._flow.hand_back_overdue()
        if self.gate is not None:
            await self.gate.renew()
            await self.gate.refresh()
            await self.gate.hand_back_overdue(self._flow.hand_back_after)
