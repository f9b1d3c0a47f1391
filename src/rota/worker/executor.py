"""The executor: takes job messages from the broker, runs their handlers, and reports status
and logs back in packed batches (DESIGN.md §3 step 5-6).

Per delivery: wait for a slot (and the job type's turn) -> skip it if its attempt was finalized
here -> claim the attempt across the group (:mod:`rota.worker.claims`; skip it if another
instance holds it) -> check it (job type known, data valid) -> report Running, acknowledge
after the flush that hands it over -> run the handler (async on the loop, sync in a thread
pool) -> record the outcome. The executor talks to the :class:`~rota.core.ports.Broker` and its own
:class:`~rota.worker.localstore.LocalStore`; it never touches the scheduler's store.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import random
import time
import traceback
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import orjson
from pydantic import BaseModel

from rota.core.errors import JobCancelledError, PermanentError, ValidationError
from rota.core.models import (
    FailureType,
    JobMessage,
    JsonValue,
    OccurrenceStatus,
    StatusRecord,
    utcnow,
)
from rota.core.ports import Broker, Delivery
from rota.core.retry import retry_at, retry_delay
from rota.observability.logs import set_job_context
from rota.observability.tracing import Tracing
from rota.sdk.job import JobContext
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker.claims import AttemptClaims, ClaimVerdict
from rota.worker.localstore import LocalStore
from rota.worker.reporter import Reporter

__all__ = ["Executor", "Reporter", "format_exception"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

MAX_EXCEPTION_BYTES = 8192
_MAX_REMEMBERED_CANCELS = 10_000
_MAX_REMEMBERED_FINALS = 50_000
"""Finalized attempts kept in memory (checked for every delivery; the local store keeps more,
checked for redelivered messages)."""
_PRUNE_EVERY = 3600.0
_TRACEBACK_FRAMES = 8
_CANCEL_WAIT = 10.0
"""Seconds stop() waits for cancelled handlers before giving up on them."""

S = OccurrenceStatus


# --- outcomes ---------------------------------------------------------------------------------


def format_exception(exc: BaseException) -> str:
    """``Type: message`` then the last frames of the traceback, at most 8 KB (UTF-8)."""
    text = str(exc)
    header = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    frames = "".join(traceback.format_tb(exc.__traceback__, limit=-_TRACEBACK_FRAMES))
    if frames:
        header = f"{header}\nTraceback (most recent call last):\n{frames}"
    encoded = header.encode()
    if len(encoded) <= MAX_EXCEPTION_BYTES:
        return header
    return encoded[:MAX_EXCEPTION_BYTES].decode(errors="ignore")


def to_jsonable(result: object) -> JsonValue:
    """A handler's result as plain JSON values; what JSON cannot hold becomes ``str(result)``."""
    if result is None or isinstance(result, str | int | float | bool):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    try:
        return orjson.loads(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return str(result)


class _Running:
    """An occurrence whose handler is running here."""

    __slots__ = ("cancel_reason", "ctx", "is_async", "started", "task", "task_cancelled")

    def __init__(self, ctx: JobContext, task: asyncio.Task[Any] | None, is_async: bool) -> None:
        self.ctx = ctx
        self.task = task
        self.is_async = is_async
        self.started = time.monotonic()
        self.cancel_reason: str | None = None
        self.task_cancelled = False


class _TimedOut(Exception):
    pass


class _Held:
    """A delivery received but not started: no slot free, or its job type at its limit."""

    __slots__ = ("delivery", "since")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.since = time.monotonic()


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

    ``claims`` (optional) claims each attempt across the worker group before it starts: a
    delivery of an attempt another instance holds is acknowledged and not run
    (:mod:`rota.worker.claims`).
    """

    def __init__(
        self,
        broker: Broker,
        registry: JobRegistry,
        *,
        worker_id: str,
        instance_id: str,
        concurrency: int,
        sync_threads: int,
        flush_interval: float,
        clock: Clock = utcnow,
        heartbeat_interval: float = 5.0,
        store: LocalStore | None = None,
        hand_back_after: float = 600.0,
        finalized_retention: float = 7 * 24 * 3600.0,
        finalized_max_entries: int = 1_000_000,
        default_timeout: float | None = None,
        rng: random.Random | None = None,
        on_finished: Callable[[str, float | None], None] | None = None,
        tracing: Tracing | None = None,
        claims: AttemptClaims | None = None,
    ) -> None:
        if concurrency < 1 or sync_threads < 1:
            raise ValueError("concurrency and sync_threads must be >= 1")
        if default_timeout is not None and not default_timeout > 0:
            raise ValueError("default_timeout must be > 0 (or None)")
        self.default_timeout = default_timeout
        self._on_finished = on_finished
        self._tracing = tracing if tracing is not None and tracing.enabled else None
        """``on_finished(job_type, duration_ms)`` after a handler ran (metrics)."""
        self._rng = rng or random.Random()
        self._claims = claims
        self.worker_id = worker_id
        self.instance_id = instance_id
        self.concurrency = concurrency
        self._broker = broker
        self._registry = registry
        self._definitions = dict(registry)
        self._limits = {
            name: limit
            for name, d in self._definitions.items()
            if (limit := d.options.concurrency) is not None and limit < concurrency
        }
        self._sync_threads = sync_threads
        self._clock = clock
        self._heartbeat_interval = heartbeat_interval
        self._store = store
        self._hand_back_after = hand_back_after
        self._retention = finalized_retention
        self._max_finals = finalized_max_entries
        self.reporter = Reporter(
            broker,
            flush_interval=flush_interval,
            store=store,
            max_acks=max(concurrency // 2, 1),
        )
        self._free = concurrency
        self._by_type: dict[str, int] = {}
        """Handlers of each limited job type started and not finished."""
        self._held: deque[_Held] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[UUID, _Running] = {}
        self._early_cancels: OrderedDict[UUID, None] = OrderedDict()
        self._finals: OrderedDict[UUID, int] = OrderedDict()
        """Occurrence id -> highest attempt finalized here (the newest ones)."""
        self._pool: ThreadPoolExecutor | None = None
        self._intake: asyncio.Task[None] | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self._stopping = False
        self._next_prune = 0.0
        self.duplicates_skipped = 0
        """Deliveries of attempts finalized here, acknowledged without running."""
        self.handed_back = 0
        """Deliveries given back to the broker unstarted (held too long, or at stop)."""
        self.dropped_dead = 0
        """Held deliveries dropped because their channel was lost (the broker redelivers)."""
        self.claimed_elsewhere = 0
        """Deliveries of attempts claimed by another instance of the group (or whose claim
        could not be known for a redelivered message), acknowledged without running."""
        self.cancelled_unstarted = 0
        """Deliveries of occurrences cancelled before they started: reported Cancelled, the
        handler not run."""

    @property
    def load(self) -> int:
        """How many handlers are running now."""
        return len(self._running)

    @property
    def held(self) -> int:
        """Deliveries received and waiting for a slot or their job type's turn."""
        return len(self._held)

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Declare the group's queue for the registry's job types and start consuming."""
        if self._intake is not None:
            raise RuntimeError("executor already started")
        await self._broker.declare_worker_group(self.worker_id, list(self._registry))
        if self._store is not None:
            await self._load_state(self._store)
        if self._claims is not None:
            await self._claims.load()
        self._stopping = False
        self.reporter.start()
        loop = asyncio.get_running_loop()
        self._intake = loop.create_task(self._consume(), name=f"rota-intake-{self.worker_id}")
        self._housekeeping = loop.create_task(self._housekeep(), name="rota-executor-upkeep")

    async def _load_state(self, store: LocalStore) -> None:
        """Forget old finalized attempts, remember the newest, count the outbox (replayed by
        the reporter's first flush, before anything new)."""
        await self._prune(store)
        for occurrence_id, attempt in (await store.recent_finals(_MAX_REMEMBERED_FINALS)).items():
            self._finals[occurrence_id] = attempt
        await self.reporter.count_outbox()

    async def stop(self, grace: float) -> None:
        """Stop intake and give back every delivery not started; let running handlers finish
        for up to ``grace`` seconds, cancel the rest (reported Cancelled), and hand over the
        reports (to the outbox if publishing fails)."""
        self._stopping = True
        for task in (self._intake, self._housekeeping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._intake = self._housekeeping = None
        await self._hand_back_held(math.inf)
        if self._tasks and grace > 0:
            await asyncio.wait(set(self._tasks), timeout=grace)
        for entry in list(self._running.values()):
            self._cancel_entry(entry, "worker stopping", force=True)
        if self._tasks:
            _, stuck = await asyncio.wait(set(self._tasks), timeout=_CANCEL_WAIT)
            if stuck:
                log.warning(
                    "handlers ignored cancellation at stop",
                    extra={"action": "executor_stop", "count": len(stuck)},
                )
        await self.reporter.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def cancel(self, occurrence_id: UUID) -> bool:
        """Cancel a running occurrence: an async handler's task is cancelled, a sync handler's
        ``ctx.cancelled`` is set. ``False`` if it is not running here; it is then remembered,
        so a message for it arriving later is reported Cancelled without running."""
        entry = self._running.get(occurrence_id)
        if entry is None:
            self._early_cancels[occurrence_id] = None
            if len(self._early_cancels) > _MAX_REMEMBERED_CANCELS:
                self._early_cancels.popitem(last=False)
            return False
        self._cancel_entry(entry, "cancelled", force=False)
        return True

    def _cancel_entry(self, entry: _Running, reason: str, *, force: bool) -> None:
        if entry.cancel_reason is None:
            entry.cancel_reason = reason
        entry.ctx.request_cancel()
        if entry.task is not None and (entry.is_async or force):
            entry.task_cancelled = True
            entry.task.cancel()

    # --- intake: slots and job type limits ----------------------------------------------

    async def _consume(self) -> None:
        """Take every delivery the broker's prefetch (``concurrency``) lets through; those
        that cannot start yet are held here, where their wait is watched (none sits unseen in
        the consumer's buffer until the broker's consumer timeout)."""
        deliveries = self._broker.consume_jobs(self.worker_id, self.concurrency)
        try:
            async for delivery in deliveries:
                self._accept(delivery)
        finally:
            aclose = getattr(deliveries, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _accept(self, delivery: Delivery) -> None:
        if self._known_final(delivery.message):
            self._skip(delivery)
        elif not self._held and self._fits(delivery.message.job_type):
            self._launch(delivery)
        elif self._is_held_copy(delivery):
            self.reporter.ack_after_flush(delivery)
        else:
            self._held.append(_Held(delivery))
            self._pump()

    def _is_held_copy(self, delivery: Delivery) -> bool:
        """Whether a held delivery of the same occurrence makes this one a copy to drop. Two
        of one occurrence: a republish, or a redelivery after the channel of the held one was
        lost (its settle reaches nobody). The later attempt, else the newer delivery, stays;
        the other is acknowledged without running."""
        message = delivery.message
        for item in self._held:
            held = item.delivery.message
            if held.occurrence_id == message.occurrence_id:
                if held.attempt > message.attempt:
                    return True
                self._held.remove(item)
                self.reporter.ack_after_flush(item.delivery)
                return False
        return False

    def _fits(self, job_type: str) -> bool:
        if not self._free:
            return False
        limit = self._limits.get(job_type)
        return limit is None or self._by_type.get(job_type, 0) < limit

    def _pump(self) -> None:
        """Start held deliveries that fit now, oldest first."""
        held = self._held
        if self._stopping or not held or not self._free:
            return
        kept: deque[_Held] = deque()
        while held and self._free:
            item = held.popleft()
            if not item.delivery.is_live:
                # Its channel is gone: the broker delivers it again (maybe elsewhere); running
                # it here as well would run it twice.
                self.dropped_dead += 1
                continue
            if self._fits(item.delivery.message.job_type):
                self._launch(item.delivery)
            else:
                kept.append(item)
        kept.extend(held)
        self._held = kept

    def _launch(self, delivery: Delivery) -> None:
        job_type = delivery.message.job_type
        self._free -= 1
        if job_type in self._limits:
            self._by_type[job_type] = self._by_type.get(job_type, 0) + 1
        task = asyncio.get_running_loop().create_task(self._handle(delivery))
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._done, job_type))

    def _done(self, job_type: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._free += 1
        if job_type in self._limits:
            self._by_type[job_type] -= 1
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("job handling failed", exc_info=exc, extra={"action": "handle_delivery"})
        self._pump()

    async def _hand_back(self, delivery: Delivery) -> None:
        """Give an unstarted delivery back to the broker (not reported: it runs later)."""
        self.handed_back += 1
        try:
            await delivery.reject(requeue=True)
        except Exception:  # already handed back by the broker's close: it comes again
            log.debug("hand-back failed", exc_info=True, extra={"action": "hand_back"})

    async def _hand_back_held(self, cutoff: float) -> int:
        """Give back the held deliveries waiting since ``cutoff`` (monotonic) or longer."""
        chosen = [item.delivery for item in self._held if item.since <= cutoff]
        if chosen:
            self._held = deque(item for item in self._held if item.since > cutoff)
            # out of held now: see them all settled even if the caller is cancelled
            await asyncio.shield(self._hand_back_all(chosen))
        return len(chosen)

    async def _hand_back_all(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            await self._hand_back(delivery)

    # --- finalized attempts -------------------------------------------------------------

    def _known_final(self, message: JobMessage) -> bool:
        known = self._finals.get(message.occurrence_id)
        return known is not None and message.attempt <= known

    async def _finalized_here(self, delivery: Delivery) -> bool:
        """Whether the delivery's attempt (or a later one) was finalized by this worker: in
        memory, or in the local store for a redelivered message."""
        message = delivery.message
        if self._known_final(message):
            return True
        store = self._store
        if store is None or not delivery.redelivered or message.occurrence_id in self._finals:
            return False
        try:
            attempt = await store.finalized_attempt(message.occurrence_id)
        except Exception:
            log.warning("reading finalized attempts failed", exc_info=True)
            return False
        if attempt is None:
            return False
        self._remember_final(message.occurrence_id, attempt)
        return message.attempt <= attempt

    def _remember_final(self, occurrence_id: UUID, attempt: int) -> None:
        finals = self._finals
        if finals.get(occurrence_id, 0) < attempt:
            finals[occurrence_id] = attempt
        finals.move_to_end(occurrence_id)
        if len(finals) > _MAX_REMEMBERED_FINALS:
            finals.popitem(last=False)

    def _skip(self, delivery: Delivery) -> None:
        message = delivery.message
        self.duplicates_skipped += 1
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
        nobody to run it. So it is reported Running for its holder (``None`` if unknown), as
        of the claim: a live holder's own reports supersede it (a Running occurrence takes it
        as an older heartbeat), and a dead one's silence makes it a zombie that gets a new
        attempt after the zombie threshold."""
        message = delivery.message
        self.claimed_elsewhere += 1
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
            at = self._clock()
            if verdict.claimed_at is not None:
                at = min(at, datetime.fromtimestamp(verdict.claimed_at, UTC))
            self.reporter.add_status(
                StatusRecord(
                    occurrence_id=message.occurrence_id,
                    status=S.RUNNING,
                    timestamp=at,
                    attempt=message.attempt,
                    instance_id=verdict.owner,
                )
            )
        self.reporter.ack_after_flush(delivery)

    def _report_final(self, record: StatusRecord) -> None:
        self.reporter.add_status(record)
        self._remember_final(record.occurrence_id, record.attempt)

    async def _prune(self, store: LocalStore) -> None:
        self._next_prune = time.monotonic() + _PRUNE_EVERY
        try:
            removed = await store.prune(
                older_than=time.time() - self._retention, max_entries=self._max_finals
            )
        except Exception:
            log.warning("pruning finalized attempts failed", exc_info=True)
            return
        if removed:
            log.info(
                "forgot %d old finalized attempts", removed, extra={"action": "prune_finalized"}
            )

    # --- upkeep: heartbeats, held deliveries, pruning ------------------------------------

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            self._beat()
            if self._claims is not None:
                running = [(oid, e.ctx.attempt) for oid, e in self._running.items()]
                await self._claims.renew(running)
            returned = await self._hand_back_held(time.monotonic() - self._hand_back_after)
            if returned:
                log.info(
                    "deliveries held too long given back to the broker",
                    extra={"action": "hand_back", "count": returned},
                )
            if self._store is not None and time.monotonic() >= self._next_prune:
                await self._prune(self._store)

    def _beat(self) -> None:
        now = self._clock()
        threshold = time.monotonic() - self._heartbeat_interval
        for oid, entry in list(self._running.items()):
            if entry.started <= threshold and not self.reporter.has_pending_running(oid):
                self.reporter.add_status(self._record(entry.ctx, S.RUNNING, now))

    # --- one delivery: claim -> report Running (ack after its flush) -> run -> outcome ------

    async def _handle(self, delivery: Delivery) -> None:
        message = delivery.message
        if await self._finalized_here(delivery):
            self._skip(delivery)
            return
        if self._stopping:  # not started yet: someone runs it later
            await self._hand_back(delivery)
            return
        if self._claims is not None and message.occurrence_id not in self._running:
            verdict = await self._claims.claim(message, careful=delivery.redelivered)
            if self._known_final(message):  # finished here while claiming (a copy raced it)
                self._skip(delivery)
                return
            if not verdict.run:
                self._skip_claimed(delivery, verdict)
                return
        claimed = self._claim(message)
        if claimed is None:
            self.reporter.ack_after_flush(delivery)
            return
        definition, data = claimed
        ctx = self._context(message)
        # this task's own log context: its log lines (the handler's too) carry the ids
        set_job_context(message.occurrence_id, message.job_id, message.job_type, message.attempt)
        self.reporter.add_status(self._record(ctx, S.RUNNING, self._clock()))
        self.reporter.ack_after_flush(delivery)
        if self._early_cancels and message.occurrence_id in self._early_cancels:
            del self._early_cancels[message.occurrence_id]
            record = self._cancelled(ctx, "cancelled before it started", time.perf_counter())
            self.cancelled_unstarted += 1
        else:
            record = await self._traced(ctx, definition, data, message)
            if self._on_finished is not None:
                self._on_finished(message.job_type, record.duration_ms)
        self._report_final(record)

    async def _traced(
        self, ctx: JobContext, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        """Supervise the handler, inside its trace span when tracing is on."""
        if self._tracing is None:
            return await self._supervise(ctx, definition, data, message)
        with self._tracing.run_span(message) as end_span:
            record = await self._supervise(ctx, definition, data, message)
            end_span(record)
            return record

    async def _supervise(
        self, ctx: JobContext, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        """Run the handler as a cancellable entry of ``_running``."""
        task = asyncio.current_task()
        entry = _Running(ctx, task, definition.is_async)
        self._running[ctx.occurrence_id] = entry
        try:
            return await self._run(entry, definition, data, message)
        finally:
            del self._running[ctx.occurrence_id]
            if entry.task_cancelled and task is not None:
                task.uncancel()

    def _claim(self, message: JobMessage) -> tuple[AnyJobDefinition, Any] | None:
        """The definition and parsed data, or ``None`` after reporting why it cannot run."""
        if message.occurrence_id in self._running:
            return None  # a redelivery of what runs here already
        definition = self._definitions.get(message.job_type)
        if definition is None:
            text = f"no handler for job type {message.job_type!r} in worker {self.worker_id!r}"
            self._report_unrun(message, S.FAILED, FailureType.UNKNOWN_JOB_TYPE, text)
            return None
        try:
            data = definition.parse_data(message.job_data) if definition.takes_data else None
        except ValidationError as exc:
            self._report_unrun(message, S.FAILED, FailureType.INVALID_DATA, exc.message)
            return None
        return definition, data

    def _report_unrun(
        self,
        message: JobMessage,
        status: OccurrenceStatus,
        failure_type: FailureType | None,
        text: str,
    ) -> None:
        self._report_final(
            StatusRecord(
                occurrence_id=message.occurrence_id,
                status=status,
                timestamp=self._clock(),
                attempt=message.attempt,
                instance_id=self.instance_id,
                exception=text,
                failure_type=failure_type,
            )
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
            log_sink=self.reporter.add_log,
        )

    def _record(
        self, ctx: JobContext, status: OccurrenceStatus, now: datetime, **fields: Any
    ) -> StatusRecord:
        return StatusRecord(
            occurrence_id=ctx.occurrence_id,
            status=status,
            timestamp=now,
            attempt=ctx.attempt,
            instance_id=self.instance_id,
            **fields,
        )

    async def _run(
        self, entry: _Running, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        ctx = entry.ctx
        started = time.perf_counter()
        try:
            result = await self._invoke(definition, ctx, data, message)
        except asyncio.CancelledError:
            if not entry.task_cancelled:
                raise
            return self._cancelled(ctx, entry.cancel_reason or "cancelled", started)
        except _TimedOut as exc:
            ctx.request_cancel()
            return self._record(
                ctx,
                S.TIMED_OUT,
                self._clock(),
                exception=str(exc),
                duration_ms=_ms_since(started),
                failure_type=FailureType.TIMED_OUT,
            )
        except JobCancelledError as exc:
            return self._cancelled(ctx, str(exc) or "cancelled", started)
        except Exception as exc:
            return self._failed(ctx, definition, message, exc, started)
        return self._record(
            ctx,
            S.COMPLETED,
            self._clock(),
            result=to_jsonable(result),
            duration_ms=_ms_since(started),
        )

    async def _invoke(
        self, definition: AnyJobDefinition, ctx: JobContext, data: Any, message: JobMessage
    ) -> Any:
        timeout = message.timeout_seconds  # the job's (or its type's, known to the scheduler)
        if timeout is None:
            timeout = definition.options.timeout
        if timeout is None:
            timeout = self.default_timeout
        if timeout is None:
            return await self._call(definition, ctx, data)
        text = f"TimeoutError: the job exceeded its timeout of {timeout:g} s"
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                result = await self._call(definition, ctx, data)
        except Exception:
            # the scope's TimeoutError, or whatever the handler raised once cancelled
            if scope.expired():
                raise _TimedOut(text) from None
            raise
        if scope.expired():  # it swallowed its cancellation and returned: too late
            raise _TimedOut(text)
        return result

    def _call(self, definition: AnyJobDefinition, ctx: JobContext, data: Any) -> Any:
        """An awaitable of the handler's result: its coroutine, or its run in the pool."""
        func = definition.func
        args = (ctx, data) if definition.takes_data else (ctx,)
        if definition.is_async:
            return func(*args)
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(
            self._thread_pool(), contextvars.copy_context().run, func, *args
        )

    def _thread_pool(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(
                self._sync_threads, thread_name_prefix=f"rota-{self.worker_id}"
            )
        return pool

    def _cancelled(self, ctx: JobContext, reason: str, started: float) -> StatusRecord:
        return self._record(
            ctx, S.CANCELLED, self._clock(), exception=reason, duration_ms=_ms_since(started)
        )

    def _failed(
        self,
        ctx: JobContext,
        definition: AnyJobDefinition,
        message: JobMessage,
        exc: Exception,
        started: float,
    ) -> StatusRecord:
        duration = _ms_since(started)
        now = self._clock()
        retry_at = None
        if isinstance(exc, PermanentError):
            failure_type: FailureType | None = FailureType.PERMANENT
        else:
            retry_at = self._retry_at(ctx, definition, message, exc, now)
            failure_type = None if retry_at is not None else FailureType.RETRIES_EXHAUSTED
        return self._record(
            ctx,
            S.FAILED,
            now,
            exception=format_exception(exc),
            duration_ms=duration,
            retry_at=retry_at,
            failure_type=failure_type,
        )

    def _retry_at(
        self,
        ctx: JobContext,
        definition: AnyJobDefinition,
        message: JobMessage,
        exc: Exception,
        now: datetime,
    ) -> datetime | None:
        """When the next attempt is due (``None``: no retry). The job type's ``should_retry``
        decides if it has one; else :func:`rota.core.retry.retry_at` (while attempts are left,
        :meth:`retry_delay` from now)."""
        hook = definition.options.should_retry
        if hook is not None:
            try:
                when = hook(ctx, exc)
            except Exception:
                log.exception(
                    "should_retry hook failed; using the default policy",
                    extra={"action": "should_retry", "occurrence_id": str(ctx.occurrence_id)},
                )
            else:
                return None if when is None else _aware_utc(when)
        options = definition.options
        return retry_at(
            now,
            retry_count=message.retry_count,
            max_retries=message.max_retries,
            job_delay=message.retry_delay_seconds,
            type_delay=options.retry_delay,
            jitter=options.retry_jitter,
            max_delay=options.max_retry_delay,
            draw=self._rng.random,
        )

    def retry_delay(self, definition: AnyJobDefinition, message: JobMessage) -> float:
        """Seconds before the retry that follows the failure of ``message``'s attempt: the
        policy of :func:`rota.core.retry.retry_delay` with the job's and the job type's
        settings, the jitter drawn from this executor's generator."""
        options = definition.options
        return retry_delay(
            message.retry_count + 1,
            job_delay=message.retry_delay_seconds,
            type_delay=options.retry_delay,
            jitter=options.retry_jitter,
            max_delay=options.max_retry_delay,
            draw=self._rng.random,
        )


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _aware_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
