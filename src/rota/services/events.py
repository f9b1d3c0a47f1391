"""The event publisher: services hand it change events without waiting; a background loop
publishes what has gathered to the coordination feed, one call (one pipelined round trip) per
batch.

Events are notifications for dashboards: they must never slow down or fail the change they
describe. :meth:`EventPublisher.emit` only appends to a bounded buffer (the oldest events are
dropped and counted when it is full); a publish that fails is logged and its events dropped.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from rota.core.events import (
    Event,
    EventType,
    job_changed,
    occurrence_changed,
    occurrence_created,
    occurrence_logs,
)
from rota.core.models import LogRecord, Occurrence
from rota.core.ports import EventFeed
from rota.core.records import StatusResult

log = logging.getLogger(__name__)

MAX_PENDING: Final = 50_000
"""Events waiting to be published at most; beyond it the oldest are dropped."""
MAX_BATCH: Final = 5_000
"""Events handed to the coordination in one call at most."""


@dataclass(slots=True)
class EventStats:
    published: int = 0
    dropped: int = 0
    """Events lost: the buffer overflowed, or their publish failed."""
    failures: int = 0


class EventPublisher:
    """Buffers events and publishes them in batches (see the module)."""

    def __init__(self, coordination: EventFeed, *, max_pending: int = MAX_PENDING) -> None:
        self._coordination = coordination
        self._pending: collections.deque[Event] = collections.deque()
        self._max_pending = max(1, max_pending)
        self._ready = asyncio.Event()
        self._stopping = False
        self.stats = EventStats()

    # --- what services call ----------------------------------------------------------------

    def emit(self, events: Iterable[Event]) -> None:
        """Queue events for publication; never blocks, never raises."""
        pending = self._pending
        before = len(pending)
        pending.extend(events)
        if len(pending) == before:
            return
        overflow = len(pending) - self._max_pending
        if overflow > 0:
            for _ in range(overflow):
                pending.popleft()
            self.stats.dropped += overflow
            log.warning("event buffer full: %d oldest events dropped", overflow)
        self._ready.set()

    def occurrences_created(self, occurrences: Iterable[Occurrence]) -> None:
        self.emit(map(occurrence_created, occurrences))

    def status_applied(self, result: StatusResult) -> None:
        """``occurrence.updated`` for every applied status change; ``job.updated`` for jobs
        the batch disabled."""
        self.emit(map(occurrence_changed, result.applied))
        if result.disabled:
            for disabled in result.disabled:
                self.emit(
                    job_changed(EventType.JOB_UPDATED, [disabled.job_id], reason=disabled.reason)
                )

    def logs_stored(self, records: Sequence[LogRecord]) -> None:
        self.emit(occurrence_logs(records))

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Publish until :meth:`stop`, then what is still pending."""
        while not self._stopping:
            await self._ready.wait()
            self._ready.clear()
            await self.flush()
        await self.flush()

    def stop(self) -> None:
        self._stopping = True
        self._ready.set()

    async def flush(self) -> None:
        """Publish everything pending now (failures are logged, their events dropped)."""
        while self._pending:
            batch = [self._pending.popleft() for _ in range(min(MAX_BATCH, len(self._pending)))]
            try:
                await self._coordination.publish_events(batch)
                self.stats.published += len(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a notification must never take anything down
                self.stats.failures += 1
                self.stats.dropped += len(batch)
                log.warning("publishing %d events failed (dropped): %s", len(batch), exc)
