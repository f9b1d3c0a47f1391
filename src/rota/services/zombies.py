"""Zombie detection (the Running side): an occurrence that stays Running with no heartbeat
from its worker past the threshold becomes Unknown, with the reason, and gets a new attempt
(at-least-once), as the embedded start-up recovery does.

Every server runs a detector; several finding the same zombie at once is harmless: the store
applies the first requeue and ignores the others (their attempt is stale by then), and so it
ignores a late report of the superseded attempt.

Silence alone is not proof: reports travel through the broker, the worker's registration through
the coordination registry. While the worker instance is still registered (it heartbeats there),
its occurrences are given the much longer ``live_threshold``: a broker outage or a tracker that
lags holds reports back without anything being lost (the worker keeps them in its outbox).

Not handled here: occurrences dispatched but never started (Queued). A worker may be busy for a
long time with its slots full, so silence there is not a sign of loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from rota.core.errors import RotaError
from rota.core.models import FailureType, Occurrence, OccurrenceStatus, StatusRecord, utcnow
from rota.core.ports import StatusResult, Store

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
LiveInstances = Callable[[], Awaitable[set[str]]]
"""The ids of the worker instances registered now (raises when the registry cannot say)."""


def zombie_reason(occurrence: Occurrence, now: datetime) -> str:
    last = occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at
    silent = max(0, round((now - last).total_seconds()))
    worker = occurrence.instance_id or "unknown"
    return f"no heartbeat from worker instance {worker} for {silent} s"


def zombie_records(occurrence: Occurrence, now: datetime) -> list[StatusRecord]:
    """What becomes of a zombie: Unknown with the reason, then a new attempt due now.

    The one place for the job's zombie policy: a job that must never run twice would get
    Unknown then Failed here instead of the requeue.
    """
    return [
        StatusRecord(
            occurrence_id=occurrence.id,
            status=OccurrenceStatus.UNKNOWN,
            timestamp=now,
            attempt=occurrence.attempt,
            exception=zombie_reason(occurrence, now),
            failure_type=FailureType.ZOMBIE,
        ),
        StatusRecord(
            occurrence_id=occurrence.id,
            status=OccurrenceStatus.QUEUED,
            timestamp=now,
            attempt=occurrence.attempt + 1,
            retry_at=now,
        ),
    ]


class ZombieDetector:
    """Periodically turns silent Running occurrences into new attempts."""

    def __init__(
        self,
        store: Store,
        *,
        threshold_seconds: float,
        interval_seconds: float,
        batch_size: int = 500,
        clock: Clock = utcnow,
        on_applied: Callable[[StatusResult], None] | None = None,
        live_instances: LiveInstances | None = None,
        live_threshold_seconds: float = 600.0,
    ) -> None:
        self._store = store
        self._threshold = timedelta(seconds=threshold_seconds)
        self._live_threshold = timedelta(seconds=max(live_threshold_seconds, threshold_seconds))
        self._live_instances = live_instances
        self._interval = interval_seconds
        self._batch = batch_size
        self._clock = clock
        self._on_applied = on_applied
        self._stopping = asyncio.Event()
        self.requeued = 0
        """Zombies this detector requeued since start."""

    async def sweep(self) -> int:
        """One pass: requeue every zombie found now; returns how many this call requeued."""
        total = 0
        live = await self._live_instances() if self._live_instances is not None else set()
        while not self._stopping.is_set():
            now = self._clock()
            stale = await self._store.stale_running(now - self._threshold, self._batch)
            zombies = [o for o in stale if not self._still_alive(o, live, now)]
            if not zombies:
                break
            records = [r for occ in zombies for r in zombie_records(occ, now)]
            result = await self._store.apply_status(records)
            requeued = {
                c.occurrence_id for c in result.applied if c.to_status is OccurrenceStatus.QUEUED
            }
            for occ in (o for o in zombies if o.id in requeued):
                log.warning(
                    "zombie occurrence requeued: %s",
                    zombie_reason(occ, now),
                    extra={"action": "zombie", "occurrence_id": occ.id, "job_id": occ.job_id},
                )
            total += len(requeued)
            if result.applied and self._on_applied is not None:
                self._on_applied(result)
            if len(stale) < self._batch or not requeued:
                break  # done, or what is left is being requeued by another server
        self.requeued += total
        return total

    def _still_alive(self, occurrence: Occurrence, live: set[str], now: datetime) -> bool:
        """Its worker instance is registered and the long threshold has not run out."""
        if occurrence.instance_id is None or occurrence.instance_id not in live:
            return False
        last = occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at
        return now - last < self._live_threshold

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Sweep every interval until :meth:`stop`; errors are logged, the loop never dies."""
        while not self._stopping.is_set():
            try:
                await self.sweep()
            except (RotaError, OSError) as exc:
                log.warning("zombie detection failed: %s", exc)
            except Exception:
                log.exception("unexpected zombie detection error")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self._interval)
