"""What follows an applied status batch, wherever it was applied (the status tracker, the
dead-letter handler, the zombie detector): the metrics and events hear of it, auto-disabled
jobs leave the schedule index, and the dispatcher wakes for what is pending now."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol
from uuid import UUID

from rota.core.models import OccurrenceStatus
from rota.core.records import StatusResult
from rota.services.events import EventPublisher

log = logging.getLogger(__name__)


class Waking(Protocol):
    """The part of the dispatcher the reactions use."""

    def wake(self, due: float | None) -> None: ...


class Dropping(Protocol):
    """The part of the job service the reactions use."""

    async def drop_disabled(self, entries: Sequence[tuple[int, UUID]]) -> None: ...


class StatusReactions:
    """The ``on_applied`` callback of every service that applies status changes."""

    def __init__(
        self,
        *,
        events: EventPublisher,
        dispatcher: Waking,
        jobs: Dropping,
        on_status: Callable[[StatusResult], None] | None = None,
        notify: Callable[[StatusResult], None] | None = None,
        dependencies: Callable[[StatusResult], None] | None = None,
    ) -> None:
        """``on_status(result)``: called first for every batch (metrics); ``notify(result)``:
        the notification service hears of every batch (final failures, auto-disables);
        ``dependencies(result)``: the dependency engine (graph runs started and resolved)."""
        self._events = events
        self._dispatcher = dispatcher
        self._jobs = jobs
        self._on_status = on_status
        self._notify = notify
        self._dependencies = dependencies
        self._background: set[asyncio.Task[None]] = set()

    def __call__(self, result: StatusResult) -> None:
        if self._on_status is not None:
            self._on_status(result)
        self._events.status_applied(result)
        if self._notify is not None:
            self._notify(result)
        if self._dependencies is not None:
            self._dependencies(result)
        if result.disabled:
            self._drop_disabled(result)
        # A retry (back to Queued) is pending now; a finished occurrence of a Queue-policy job
        # may release one held behind it: this server's sweep publishes it at once, whichever
        # server fired it (the store knows the policy, so no server needs to remember what it
        # holds). Otherwise there is nothing new for the dispatcher.
        for change in result.applied:
            if change.to_status is OccurrenceStatus.QUEUED or (
                change.queue_policy and change.to_status.is_terminal
            ):
                self._dispatcher.wake(None)
                return

    def _drop_disabled(self, result: StatusResult) -> None:
        """Auto-disabled jobs leave the schedule index (in the background: the dispatcher
        skips inactive jobs anyway, this only spares it the visit)."""
        for job in result.disabled:
            log.warning(
                "job auto-disabled: %s",
                job.reason,
                extra={"action": "auto_disable", "job_id": job.job_id},
            )
        entries = [(job.bucket, job.job_id) for job in result.disabled]
        task = asyncio.create_task(self._jobs.drop_disabled(entries))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
