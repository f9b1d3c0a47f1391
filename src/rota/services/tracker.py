"""The status tracker and the log collector: consume batches from the broker and write them
to the store with one call per batch. A batch is acknowledged only after it is stored; a store
outage stalls the loop (with backoff) but never kills it and loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from rota.core.errors import RotaError
from rota.core.models import LogRecord, OccurrenceStatus, StatusRecord
from rota.core.ports import Broker, StatusStore
from rota.core.records import Batch, StatusResult
from rota.services._loop import Backoff, run_periodically
from rota.services.events import EventPublisher
from rota.services.routing import DeclinedAttempts

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_RESTART_BACKOFF = 0.1
MAX_RESTART_BACKOFF = 5.0
HEALTHY_SECONDS = 60.0
"""A consumer that ran this long before it broke restarts after the shortest backoff."""


@dataclass(slots=True)
class TrackerStats:
    batches: int = 0
    applied: int = 0
    ignored: int = 0
    late: int = 0
    heartbeats: int = 0
    completed: int = 0
    """Occurrences this tracker recorded Completed (store committed)."""
    log_lines: int = 0
    errors: int = 0
    holding: bool = False
    """A batch is taken from the broker and not yet stored and acknowledged."""


async def _store_with_retry(
    name: str, write: Callable[[], Awaitable[None]], stats: TrackerStats, stopping: asyncio.Event
) -> bool:
    """Retry ``write`` with backoff until it succeeds or the loop stops. The backoff stays
    at most a second: runs' ends wait in the batch while the store is away, and the
    dispatcher (which retries faster) judges Skip-policy fires by what the store holds."""
    backoff = 0.05
    while True:
        try:
            await write()
            return True
        except (RotaError, OSError) as exc:
            stats.errors += 1
            log.warning("%s: store write failed, retrying in %.2fs: %s", name, backoff, exc)
        if stopping.is_set():
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=backoff)
        backoff = min(backoff * 2, 1.0)


class _BatchConsumer(Generic[T]):
    """What the tracker and the collector share: one broker consumer of batches, restarted
    with backoff, each batch written to the store (with retry) before it is acknowledged."""

    name: ClassVar[str]

    def __init__(
        self, store: StatusStore, broker: Broker, *, batch_size: int, max_wait: float
    ) -> None:
        self._store = store
        self._broker = broker
        self._batch_size = batch_size
        self._max_wait = max_wait
        self._stopping = asyncio.Event()
        self.stats = TrackerStats()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await _run_consumer(self.name, self._batches, self._write, self.stats, self._stopping)

    def _batches(self) -> AsyncIterator[Batch[T]]:
        raise NotImplementedError

    async def _write(self, batch: Batch[T]) -> None:
        raise NotImplementedError


class StatusTracker(_BatchConsumer[StatusRecord]):
    """Applies status records to the store in batches."""

    name = "status tracker"

    def __init__(
        self,
        store: StatusStore,
        broker: Broker,
        *,
        batch_size: int,
        max_wait: float,
        on_applied: Callable[[StatusResult], None] | None = None,
        declines: DeclinedAttempts | None = None,
    ) -> None:
        """``declines``: settles the attempts a worker group declined (a job type it does
        not run) before the rest of the batch is applied."""
        super().__init__(store, broker, batch_size=batch_size, max_wait=max_wait)
        self._on_applied = on_applied
        self._declines = declines

    async def handle(self, records: Sequence[StatusRecord]) -> StatusResult:
        if self._declines is not None:
            records = await self._declines.settle(records)
        result = await self._store.apply_status(records)
        self.stats.batches += 1
        self.stats.applied += len(result.applied)
        self.stats.ignored += len(result.ignored)
        self.stats.late += sum(1 for i in result.ignored if i.reason == "late")
        self.stats.heartbeats += result.heartbeats
        self.stats.completed += sum(
            1 for c in result.applied if c.to_status is OccurrenceStatus.COMPLETED
        )
        if self._on_applied is not None:
            self._on_applied(result)
        return result

    def _batches(self) -> AsyncIterator[Batch[StatusRecord]]:
        return self._broker.consume_status(self._batch_size, self._max_wait)

    async def _write(self, batch: Batch[StatusRecord]) -> None:
        await self.handle(batch.items)


class LogCollector(_BatchConsumer[LogRecord]):
    """Appends log lines to the store in batches."""

    name = "log collector"

    def __init__(
        self,
        store: StatusStore,
        broker: Broker,
        *,
        batch_size: int,
        max_wait: float,
        events: EventPublisher | None = None,
    ) -> None:
        super().__init__(store, broker, batch_size=batch_size, max_wait=max_wait)
        self._events = events

    def _batches(self) -> AsyncIterator[Batch[LogRecord]]:
        return self._broker.consume_logs(self._batch_size, self._max_wait)

    async def _write(self, batch: Batch[LogRecord]) -> None:
        await self._store.append_logs(batch.items)
        if self._events is not None:
            self._events.logs_stored(batch.items)
        self.stats.batches += 1
        self.stats.log_lines += len(batch.items)


async def _run_consumer(
    name: str,
    consume: Callable[[], AsyncIterator[Batch[T]]],
    write: Callable[[Batch[T]], Awaitable[None]],
    stats: TrackerStats,
    stopping: asyncio.Event,
) -> None:
    """Consume until stopped. A consumer that cannot start or breaks (the broker away when it
    is declared, a channel closed under it) is started again with backoff: the loop never
    ends by itself while the server runs. Unacknowledged batches come back from the broker."""
    restart = Backoff(MIN_RESTART_BACKOFF, MAX_RESTART_BACKOFF)
    loop = asyncio.get_running_loop()

    async def run_consumer() -> None:
        started = loop.time()
        batches = consume()
        try:
            await _consume(name, batches, write, stats, stopping)
            if not stopping.is_set():
                log.warning("%s: the broker ended the consumer; starting it again", name)
        finally:
            # Cancel the broken consumer's subscription: left open, the broker would keep
            # handing it a share of the messages that nobody reads.
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            if loop.time() - started > HEALTHY_SECONDS:
                restart.reset()  # it ran well for a while: a fresh failure

    def failed() -> None:
        stats.errors += 1

    # Whatever broke the consumer (any exception) restarts it; so does its ending by itself.
    await run_periodically(
        f"{name} consumer",
        run_consumer,
        restart.next,
        stopping,
        log=log,
        expected=(Exception,),
        on_error=failed,
    )


async def _consume(
    name: str,
    batches: AsyncIterator[Batch[T]],
    write: Callable[[Batch[T]], Awaitable[None]],
    stats: TrackerStats,
    stopping: asyncio.Event,
) -> None:
    async for batch in batches:
        stats.holding = True
        try:
            stored = await _store_with_retry(name, lambda b=batch: write(b), stats, stopping)  # type: ignore[misc]
            if not stored:
                return
            await batch.ack()
        finally:
            stats.holding = False
        if stopping.is_set():
            return
