"""The executor: takes job messages from the broker, runs their handlers, and reports status
and logs back in packed batches (DESIGN.md §3 step 5-6).

Per delivery: claim (job type known, data valid) -> report Running and acknowledge -> build the
context -> run the handler (async on the loop, sync in a thread pool) -> record the outcome.
The executor talks only to the :class:`~rota.core.ports.Broker`; it never touches the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import orjson
from pydantic import BaseModel

from rota.core.errors import JobCancelledError, PermanentError, ValidationError
from rota.core.models import (
    FailureType,
    JobMessage,
    JsonValue,
    LogRecord,
    OccurrenceStatus,
    StatusRecord,
    utcnow,
)
from rota.core.ports import Broker, Delivery
from rota.worker.discovery import AnyJobDefinition, JobRegistry
from rota.worker.sdk import JobContext

__all__ = ["Executor", "Reporter", "format_exception"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

DEFAULT_RETRY_DELAY = 10.0
"""Seconds before the first retry when the job type names no ``retry_delay``."""
MAX_EXCEPTION_BYTES = 8192
MAX_RETRY_DELAY = 30 * 24 * 3600.0
_MAX_REMEMBERED_CANCELS = 10_000
_TRACEBACK_FRAMES = 8
_CANCEL_WAIT = 10.0
"""Seconds stop() waits for cancelled handlers before giving up on them."""

S = OccurrenceStatus


# --- reporting --------------------------------------------------------------------------------


class Reporter:
    """Packs the status and log records of many occurrences and publishes them together: one
    ``publish_status`` and one ``publish_logs`` per flush, every ``flush_interval`` seconds or
    as soon as ``max_pending`` records wait.

    A Running record followed, before the flush, by the final status of the same attempt is
    dropped (the tracker accepts Queued -> final). Records keep their order per occurrence. When
    a publish fails the records are kept and sent first on the next flush.

    ``add_status`` must be called on the loop; ``add_log`` may be called from any thread.
    """

    def __init__(self, broker: Broker, *, flush_interval: float, max_pending: int = 500) -> None:
        if flush_interval <= 0:
            raise ValueError("flush_interval must be > 0")
        self._broker = broker
        self._interval = flush_interval
        self._max_pending = max_pending
        self._status: list[StatusRecord | None] = []
        self._running_at: dict[UUID, int] = {}
        """occurrence id -> index in ``_status`` of its pending Running record."""
        self._logs: list[LogRecord] = []
        self._log_lock = threading.Lock()
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._closing = False
        self._failures = 0

    @property
    def pending(self) -> int:
        """Records waiting to be published."""
        return sum(r is not None for r in self._status) + len(self._logs)

    def start(self) -> None:
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._closing = False
        self._task = self._loop.create_task(self._run(), name="rota-reporter")

    async def stop(self) -> bool:
        """Stop the periodic flush and flush what is left. ``False`` if records could not be
        published (they are lost for now: the worker outbox comes later)."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        ok = await self.flush()
        if not ok:
            log.warning(
                "reports left unpublished at stop",
                extra={"action": "reporter_stop", "pending": self.pending},
            )
        return ok

    def add_status(self, record: StatusRecord) -> None:
        status = self._status
        oid = record.occurrence_id
        if record.status is S.RUNNING:
            self._running_at[oid] = len(status)
        else:
            index = self._running_at.pop(oid, None)
            if index is not None:
                earlier = status[index]
                if earlier is not None and earlier.attempt == record.attempt:
                    status[index] = None
        status.append(record)
        if len(status) >= self._max_pending:
            self._wake.set()

    def has_pending_running(self, occurrence_id: UUID) -> bool:
        return occurrence_id in self._running_at

    def add_log(self, record: LogRecord) -> None:
        with self._log_lock:
            self._logs.append(record)
            count = len(self._logs)
        if count >= self._max_pending:
            self._wake_from_any_thread()

    def _wake_from_any_thread(self) -> None:
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            self._wake.set()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        while not self._closing:
            if self._failures:
                await asyncio.sleep(min(self._interval * 2**self._failures, 5.0))
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
            self._wake.clear()
            if not self._closing:
                await self.flush()

    async def flush(self) -> bool:
        """Publish everything pending now. ``True`` if nothing failed."""
        async with self._flush_lock:
            status = [r for r in self._status if r is not None]
            self._status = []
            self._running_at = {}
            with self._log_lock:
                logs, self._logs = self._logs, []
            if status and logs:
                results = await asyncio.gather(
                    self._publish_status(status), self._publish_logs(logs)
                )
                ok = all(results)
            elif status:
                ok = await self._publish_status(status)
            elif logs:
                ok = await self._publish_logs(logs)
            else:
                ok = True
            self._failures = 0 if ok else min(self._failures + 1, 8)
            return ok

    async def _publish_status(self, records: list[StatusRecord]) -> bool:
        try:
            await self._broker.publish_status(records)
        except Exception:
            log.warning(
                "publishing status records failed; kept for the next flush",
                exc_info=True,
                extra={"action": "publish_status", "count": len(records)},
            )
            shift = len(records)
            self._running_at = {k: v + shift for k, v in self._running_at.items()}
            self._status = [*records, *self._status]
            return False
        return True

    async def _publish_logs(self, records: list[LogRecord]) -> bool:
        try:
            await self._broker.publish_logs(records)
        except Exception:
            log.warning(
                "publishing log records failed; kept for the next flush",
                exc_info=True,
                extra={"action": "publish_logs", "count": len(records)},
            )
            with self._log_lock:
                self._logs = [*records, *self._logs]
            return False
        return True


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


class Executor:
    """Runs the handlers of a worker group's job messages (DESIGN.md §3 step 5).

    ``concurrency`` bounds how many handlers run at once; deliveries are acknowledged as soon
    as their Running report is handed to the :class:`Reporter`, so a long job holds no delivery
    open. Sync handlers run in a pool of ``sync_threads`` threads. Running occurrences are
    re-reported as Running every ``heartbeat_interval`` seconds (their sign of life).
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
    ) -> None:
        if concurrency < 1 or sync_threads < 1:
            raise ValueError("concurrency and sync_threads must be >= 1")
        self.worker_id = worker_id
        self.instance_id = instance_id
        self.concurrency = concurrency
        self._broker = broker
        self._registry = registry
        self._definitions = dict(registry)
        self._sync_threads = sync_threads
        self._clock = clock
        self._heartbeat_interval = heartbeat_interval
        self.reporter = Reporter(broker, flush_interval=flush_interval)
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[UUID, _Running] = {}
        self._early_cancels: OrderedDict[UUID, None] = OrderedDict()
        self._pool: ThreadPoolExecutor | None = None
        self._intake: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._stop_reason: str | None = None

    @property
    def load(self) -> int:
        """How many handlers are running now."""
        return len(self._running)

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Declare the group's queue for the registry's job types and start consuming."""
        if self._intake is not None:
            raise RuntimeError("executor already started")
        await self._broker.declare_worker_group(self.worker_id, list(self._registry))
        self._stop_reason = None
        self.reporter.start()
        loop = asyncio.get_running_loop()
        self._intake = loop.create_task(self._consume(), name=f"rota-intake-{self.worker_id}")
        self._heartbeat = loop.create_task(self._heartbeats(), name="rota-occurrence-heartbeat")

    async def stop(self, grace: float) -> None:
        """Stop intake, let running handlers finish for up to ``grace`` seconds, cancel the rest
        (reported Cancelled), and flush the reports."""
        for task in (self._intake, self._heartbeat):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._intake = self._heartbeat = None
        if self._tasks and grace > 0:
            await asyncio.wait(set(self._tasks), timeout=grace)
        self._stop_reason = "worker stopping"
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

    # --- intake -------------------------------------------------------------------------

    async def _consume(self) -> None:
        deliveries = self._broker.consume_jobs(self.worker_id, self.concurrency)
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._slots.acquire()
                try:
                    delivery = await anext(deliveries)
                except BaseException:
                    self._slots.release()
                    raise
                task = loop.create_task(self._handle(delivery))
                self._tasks.add(task)
                task.add_done_callback(self._done)
        except StopAsyncIteration:
            return
        finally:
            aclose = getattr(deliveries, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("job handling failed", exc_info=exc, extra={"action": "handle_delivery"})

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            now = self._clock()
            threshold = time.monotonic() - self._heartbeat_interval
            for oid, entry in list(self._running.items()):
                if entry.started <= threshold and not self.reporter.has_pending_running(oid):
                    self.reporter.add_status(self._record(entry.ctx, S.RUNNING, now))

    # --- one delivery: claim -> report Running, ack -> run -> record outcome ----------------

    async def _handle(self, delivery: Delivery) -> None:
        message = delivery.message
        claimed = self._claim(message)
        if claimed is None:
            await delivery.ack()
            return
        definition, data = claimed
        ctx = self._context(message)
        self.reporter.add_status(self._record(ctx, S.RUNNING, self._clock()))
        await delivery.ack()
        reason = self._cancelled_before_start(message.occurrence_id)
        if reason is not None:
            record = self._cancelled(ctx, reason, time.perf_counter())
        else:
            record = await self._supervise(ctx, definition, data, message)
        self.reporter.add_status(record)

    def _cancelled_before_start(self, occurrence_id: UUID) -> str | None:
        if self._stop_reason is not None:
            return self._stop_reason
        if self._early_cancels and occurrence_id in self._early_cancels:
            del self._early_cancels[occurrence_id]
            return "cancelled before it started"
        return None

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
        self.reporter.add_status(
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
        timeout = message.timeout_seconds
        if timeout is None:
            timeout = definition.options.timeout
        if timeout is None:
            return await self._call(definition, ctx, data)
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                return await self._call(definition, ctx, data)
        except TimeoutError:
            if scope.expired():
                text = f"TimeoutError: the job exceeded its timeout of {timeout:g} s"
                raise _TimedOut(text) from None
            raise

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
        decides if it has one; else ``base × 2^retry_count`` while attempts are left."""
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
        if message.retry_count >= message.max_retries:
            return None
        base = definition.options.retry_delay
        delay = DEFAULT_RETRY_DELAY if base is None else base
        seconds = min(delay * 2.0 ** min(message.retry_count, 64), MAX_RETRY_DELAY)
        return now + timedelta(seconds=seconds)


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _aware_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
