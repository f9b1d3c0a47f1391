"""Running one handler to its outcome: a final :class:`~rota.core.models.StatusRecord`.

The executor (:mod:`rota.worker.executor`) decides whether a delivery runs and reports what
comes back; a :class:`Runner` runs it. It keeps the handlers running here as cancellable
entries, runs async handlers on the loop and sync ones in its thread pool, applies the
attempt's timeout, and turns what the handler returned or raised into Completed, Failed
(with its ``retry_at``), Timed out, Cancelled, or Unknown (interrupted by the worker's
stop). :class:`ExecutorStats` holds the executor's counters, which its collaborators (this
runner, :mod:`rota.worker.flow`) add to.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import orjson
from pydantic import BaseModel

from rota.core.errors import JobCancelledError, PermanentError
from rota.core.models import (
    FailureType,
    JobMessage,
    JsonValue,
    OccurrenceStatus,
    StatusRecord,
)
from rota.core.retry import retry_at, retry_delay
from rota.observability.tracing import Tracing
from rota.sdk.context import JobContext
from rota.sdk.registry import AnyJobDefinition

__all__ = [
    "MAX_EXCEPTION_BYTES",
    "ExecutorStats",
    "Runner",
    "RunningHandler",
    "format_exception",
    "log_finished",
    "to_jsonable",
]

log = logging.getLogger(__name__)
executions = logging.getLogger("rota.executions")
"""One line per finished attempt (:func:`log_finished`): INFO when it completed or was
cancelled, WARNING otherwise."""

Clock = Callable[[], datetime]

MAX_EXCEPTION_BYTES = 8192
_MAX_REMEMBERED_CANCELS = 10_000
_TRACEBACK_FRAMES = 8

S = OccurrenceStatus


@dataclass
class ExecutorStats:
    """What an executor counts (read by the metrics)."""

    duplicates_skipped: int = 0
    """Deliveries of attempts finalized here, acknowledged without running."""
    handed_back: int = 0
    """Deliveries given back to the broker unstarted (held too long, or at stop)."""
    dropped_dead: int = 0
    """Held deliveries dropped because their channel was lost (the broker redelivers)."""
    claimed_elsewhere: int = 0
    """Deliveries of attempts claimed by another instance of the group (or whose claim
    could not be known for a redelivered message), acknowledged without running."""
    superseded: int = 0
    """Deliveries of an older job version than one sent again after an edit of the job
    before its due time: acknowledged without running or reporting (the newer copy runs)."""
    cancelled_unstarted: int = 0
    """Deliveries of occurrences cancelled before they started: reported Cancelled, the
    handler not run."""
    declined: int = 0
    """Deliveries of a job type this worker does not run, handed back to the servers."""


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


class RunningHandler:
    """An occurrence whose handler is running here."""

    __slots__ = (
        "cancel_reason",
        "ctx",
        "interrupted",
        "is_async",
        "started",
        "task",
        "task_cancelled",
    )

    def __init__(self, ctx: JobContext, task: asyncio.Task[Any] | None, is_async: bool) -> None:
        self.ctx = ctx
        self.task = task
        self.is_async = is_async
        self.started = time.monotonic()
        self.cancel_reason: str | None = None
        self.task_cancelled = False
        self.interrupted = False
        """Cut short by the worker's stop (not a cancel asked for it): reported Unknown."""


class _TimedOut(Exception):
    pass


class Runner:
    """Runs handlers to their final status record for one executor (see the module).

    An attempt may run for the message's ``timeoutSeconds``, else the job type's ``timeout``
    here, else ``default_timeout`` (``None``: no limit). Sync handlers run in a pool of
    ``sync_threads`` threads, started on first use. ``rng`` draws the retry jitter;
    ``on_finished(job_type, duration_ms)`` is called after a handler ran (metrics).
    """

    def __init__(
        self,
        *,
        worker_id: str,
        instance_id: str,
        sync_threads: int,
        clock: Clock,
        stats: ExecutorStats,
        default_timeout: float | None,
        rng: random.Random,
        on_finished: Callable[[str, float | None], None] | None,
        tracing: Tracing | None,
        mask: Callable[[StatusRecord], StatusRecord] | None = None,
    ) -> None:
        self.default_timeout = default_timeout
        self._mask = mask
        """Masks secret values in a final record before it is traced or returned."""
        self._worker_id = worker_id
        self._instance_id = instance_id
        self._sync_threads = sync_threads
        self._clock = clock
        self._stats = stats
        self._rng = rng
        self._on_finished = on_finished
        self._tracing = tracing
        self._running: dict[UUID, RunningHandler] = {}
        self._early_cancels: OrderedDict[UUID, None] = OrderedDict()
        self._pool: ThreadPoolExecutor | None = None

    @property
    def running(self) -> Mapping[UUID, RunningHandler]:
        """The handlers running now, by occurrence id."""
        return self._running

    def close(self) -> None:
        """Shut the thread pool down (its queued calls are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # --- cancellation -------------------------------------------------------------------

    def cancel(self, occurrence_id: UUID, reason: str | None = None) -> bool:
        """Cancel a running occurrence (see :meth:`rota.worker.executor.Executor.cancel`);
        ``False`` if it is not running here, and it is then remembered for :meth:`run`."""
        entry = self._running.get(occurrence_id)
        if entry is None:
            self._early_cancels[occurrence_id] = None
            if len(self._early_cancels) > _MAX_REMEMBERED_CANCELS:
                self._early_cancels.popitem(last=False)
            return False
        self._cancel_entry(entry, reason or "cancelled", force=False)
        return True

    def cancel_all(self, reason: str) -> None:
        """Cut every running handler short, a sync one's thread's task too (at stop). An
        attempt not already being cancelled is *interrupted*: reported Unknown with
        ``reason``, and the scheduler gives its occurrence the next attempt at once (by its
        zombie policy), counting no failure; one being cancelled stays Cancelled."""
        for entry in list(self._running.values()):
            if entry.cancel_reason is None:
                entry.interrupted = True
            self._cancel_entry(entry, reason, force=True)

    def _cancel_entry(self, entry: RunningHandler, reason: str, *, force: bool) -> None:
        if entry.cancel_reason is None:
            entry.cancel_reason = reason
        entry.ctx.request_cancel()
        if entry.task is not None and (entry.is_async or force):
            entry.task_cancelled = True
            entry.task.cancel()

    # --- running ------------------------------------------------------------------------

    def record(
        self, ctx: JobContext, status: OccurrenceStatus, now: datetime, **fields: Any
    ) -> StatusRecord:
        """A status record of ``ctx``'s attempt, from this instance."""
        return StatusRecord(
            occurrence_id=ctx.occurrence_id,
            status=status,
            timestamp=now,
            attempt=ctx.attempt,
            instance_id=self._instance_id,
            **fields,
        )

    async def run(
        self, ctx: JobContext, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        """The attempt's final record: Cancelled unrun if it was cancelled before it
        started, else what its handler did."""
        if self._early_cancels and message.occurrence_id in self._early_cancels:
            del self._early_cancels[message.occurrence_id]
            record = self._cancelled(ctx, "cancelled before it started", time.perf_counter())
            self._stats.cancelled_unstarted += 1
            return record
        record = await self._traced(ctx, definition, data, message)
        if self._on_finished is not None:
            self._on_finished(message.job_type, record.duration_ms)
        return record

    async def _traced(
        self, ctx: JobContext, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        """Supervise the handler, inside its trace span when tracing is on."""
        mask = self._mask
        if self._tracing is None:
            record = await self._supervise(ctx, definition, data, message)
            return record if mask is None else mask(record)
        with self._tracing.run_span(message) as end_span:
            record = await self._supervise(ctx, definition, data, message)
            if mask is not None:
                record = mask(record)
            end_span(record)
            return record

    async def _supervise(
        self, ctx: JobContext, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        """Run the handler as a cancellable entry of ``running``."""
        task = asyncio.current_task()
        entry = RunningHandler(ctx, task, definition.is_async)
        self._running[ctx.occurrence_id] = entry
        try:
            return await self._run(entry, definition, data, message)
        finally:
            del self._running[ctx.occurrence_id]
            if entry.task_cancelled and task is not None:
                task.uncancel()

    async def _run(
        self, entry: RunningHandler, definition: AnyJobDefinition, data: Any, message: JobMessage
    ) -> StatusRecord:
        ctx = entry.ctx
        started = time.perf_counter()
        try:
            result = await self._invoke(definition, ctx, data, message)
        except asyncio.CancelledError:
            if not entry.task_cancelled:
                raise
            if entry.interrupted:
                return self._interrupted(entry, started)
            return self._cancelled(ctx, entry.cancel_reason or "cancelled", started)
        except _TimedOut as exc:
            ctx.request_cancel()
            return self.record(
                ctx,
                S.TIMED_OUT,
                self._clock(),
                exception=str(exc),
                duration_ms=_ms_since(started),
                failure_type=FailureType.TIMED_OUT,
            )
        except JobCancelledError as exc:  # asked (the reason given), or its own doing
            if entry.interrupted:
                return self._interrupted(entry, started)
            return self._cancelled(ctx, entry.cancel_reason or str(exc) or "cancelled", started)
        except Exception as exc:
            return self._failed(ctx, definition, message, exc, started)
        return self.record(
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
                self._sync_threads, thread_name_prefix=f"rota-{self._worker_id}"
            )
        return pool

    def _cancelled(self, ctx: JobContext, reason: str, started: float) -> StatusRecord:
        return self.record(
            ctx, S.CANCELLED, self._clock(), exception=reason, duration_ms=_ms_since(started)
        )

    def _interrupted(self, entry: RunningHandler, started: float) -> StatusRecord:
        return self.record(
            entry.ctx,
            S.UNKNOWN,
            self._clock(),
            exception=f"interrupted: {entry.cancel_reason or 'worker stopped'}",
            duration_ms=_ms_since(started),
            failure_type=FailureType.ZOMBIE,
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
        return self.record(
            ctx,
            S.FAILED,
            now,
            exception=format_exception(exc),
            duration_ms=duration,
            retry_at=retry_at,
            failure_type=failure_type,
        )

    # --- retries ------------------------------------------------------------------------

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
        settings, the jitter drawn from this runner's generator."""
        options = definition.options
        return retry_delay(
            message.retry_count + 1,
            job_delay=message.retry_delay_seconds,
            type_delay=options.retry_delay,
            jitter=options.retry_jitter,
            max_delay=options.max_retry_delay,
            draw=self._rng.random,
        )


_QUIET = frozenset({S.COMPLETED, S.CANCELLED})
_STATUS_NAMES = {S.TIMED_OUT: "TimedOut"}


def declined(message: JobMessage, worker_id: str, instance_id: str, at: datetime) -> StatusRecord:
    """The report of a delivery of a job type this worker does not run (its group no longer
    declares it, or it was sent here before a deploy took the type away): ``Failed`` with
    ``unknown_job_type``, sent at once and acknowledged, without claiming the attempt. The
    servers send the attempt to a group that runs the type, or fail it when none does
    (docs/concepts.md#worker-groups-and-routing)."""
    log.info(
        "declined: worker %r does not run job type %r (the servers send it elsewhere)",
        worker_id,
        message.job_type,
        extra={
            "action": "declined",
            "occurrence_id": str(message.occurrence_id),
            "attempt": message.attempt,
        },
    )
    return StatusRecord(
        occurrence_id=message.occurrence_id,
        status=S.FAILED,
        timestamp=at,
        attempt=message.attempt,
        instance_id=instance_id,
        exception=f"no handler for job type {message.job_type!r} in worker {worker_id!r}",
        failure_type=FailureType.UNKNOWN_JOB_TYPE,
    )


def log_finished(job_type: str, record: StatusRecord) -> None:
    """The line that ends an attempt: ``Completed in 12 ms``, ``Failed in 3 ms, retry at
    10:00:05Z: RuntimeError: …`` (the exception's first line), with its job type, status,
    duration and the attempt's ids as fields."""
    level = logging.INFO if record.status in _QUIET else logging.WARNING
    if not executions.isEnabledFor(level):
        return
    status = _STATUS_NAMES.get(record.status, record.status.name.title())
    text = status if record.duration_ms is None else f"{status} in {_duration(record.duration_ms)}"
    if record.retry_at is not None:
        text += f", retry at {record.retry_at.strftime('%H:%M:%S')}Z"
    elif record.failure_type is not None:
        text += f" ({record.failure_type.value})"
    if record.exception and record.status is not S.COMPLETED:
        first = record.exception.partition("\n")[0]
        text += f": {first[:200]}"
    executions.log(
        level,
        text,
        extra={
            "action": "finished",
            "job_type": job_type,
            "occurrence_id": record.occurrence_id,
            "attempt": record.attempt,
            "status": status,
            "duration_ms": record.duration_ms,
        },
    )


def _duration(ms: float) -> str:
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.1f} s"


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _aware_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
