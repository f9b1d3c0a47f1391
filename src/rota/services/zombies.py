"""Zombie detection: an occurrence with no sign of life past its threshold becomes Unknown,
with the reason, and then — by its job's zombie policy (else the global one) — gets a new
attempt (``requeue``: at-least-once, as the embedded start-up recovery does) or fails
(``fail``: Failed with failure type ``zombie`` and a dead-letter record; for work that must
never run twice).

Two kinds:

- **Running**: no heartbeat from the worker past the job's ``zombie_threshold_seconds`` (else
  the global threshold). Silence alone is not proof: reports travel through the broker, the
  worker's registration through the coordination registry. While the worker instance is still
  registered (it heartbeats there), its occurrences are given the much longer
  ``live_threshold``: a broker outage or a tracker that lags holds reports back without
  anything being lost (the worker keeps them in its outbox).
- **Queued**: handed to the broker (``dispatched_at``) but never started, for longer than the
  Queued threshold (and than the job's own threshold). A Queued occurrence gives no sign of
  life while its message waits — in a backlog of its queue, or held by a worker whose slots are
  full (up to the worker's hand-back time) — so a short threshold would take a busy system for
  a broken one, and a requeue would then run the job twice (the old message is still there).
  Its threshold is therefore separate and much longer: it catches messages that were lost
  (a queue purged or deleted, a broker that lost its disk). And only while a registered
  worker instance able to run it has been up for that whole threshold: while its workers are
  down the message waits safely in the queue.

**A dead worker** is not waited for: every ``dead_interval`` seconds the detector asks the store
for the Running occurrences of worker instances that are no longer registered (their
registration expired: three missed heartbeats of the instance, 6 s by default) and that are
also silent in the store for ``dead_silence`` seconds (their Running re-reports stopped too: a
worker cut off from the registry alone still reports through the broker), and for the Unknown
ones (an attempt its worker reported interrupted at a stop, :mod:`rota.worker.run`): each gets
its next attempt at once, by the same policy, without the per-occurrence threshold, which stays
as the backstop for a live worker that lost a job. An occurrence reported Running for the
unknown holder (:data:`~rota.core.models.UNKNOWN_HOLDER`: a redelivered copy whose claim was
lost, not run by the worker that got it) is one of an unregistered instance too: unless its
real holder reports it within the silence (and is named its holder), it was never started, or
its holder died before reporting, and it gets its next attempt then. Only the server that
``is_leader()`` (the owner of bucket 0, as for maintenance) does this; without a registry it is
not done.

A requeue is bounded (``max_requeues`` attempts beyond the occurrence's retries), so a handler
that kills its worker every time ends Failed (``zombie``) with a dead-letter record.

Every server runs a detector; several finding the same zombie at once is harmless: the store
applies the first change and ignores the others (their attempt is stale by then), and so it
ignores a late report of the superseded attempt (counted by the status tracker as ``late``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from uuid import UUID

from rota.core.models import (
    UNKNOWN_HOLDER,
    FailureType,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    WorkerInfo,
    ZombiePolicy,
    utcnow,
)
from rota.core.ports import StatusStore
from rota.core.records import StaleOccurrence, StatusResult
from rota.services._loop import run_periodically

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
LiveWorkers = Callable[[], Awaitable[Sequence[WorkerInfo]]]
"""The worker instances registered now (raises when the registry cannot say)."""

DEFAULT_MAX_REQUEUES = 3
DEAD_INTERVAL = 1.0
"""Seconds between two looks for the occurrences of dead worker instances."""
DEAD_SILENCE = 5.0
"""Seconds an occurrence of an unregistered worker instance must also be silent in the store
(above the workers' Running re-report interval, 2 s by default, and the tracker's lag)."""

S = OccurrenceStatus


def zombie_reason(occurrence: Occurrence, now: datetime) -> str:
    if occurrence.status is S.QUEUED and occurrence.dispatched_at is not None:
        waited = max(0, round((now - occurrence.dispatched_at).total_seconds()))
        return f"dispatched {waited} s ago and never started: its message was lost"
    last = occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at
    silent = max(0, round((now - last).total_seconds()))
    worker = occurrence.instance_id or "unknown"
    return f"no heartbeat from worker instance {worker} for {silent} s"


def zombie_records(
    occurrence: Occurrence,
    now: datetime,
    policy: ZombiePolicy = ZombiePolicy.REQUEUE,
    *,
    max_requeues: int = DEFAULT_MAX_REQUEUES,
    reason: str | None = None,
) -> list[StatusRecord]:
    """What becomes of a zombie: Unknown with the reason, then a new attempt due now
    (``requeue``) or Failed with failure type ``zombie`` (``fail``).

    ``requeue`` is bounded: an occurrence gets at most ``max_requeues`` attempts beyond its
    retries (attempt ``max_retries + 1 + max_requeues`` is the last); a zombie past that fails.
    A handler that takes its worker down every time (a crash, the OOM killer) thus ends in a
    dead letter instead of felling worker after worker forever.

    ``reason``: why (default :func:`zombie_reason`). An occurrence already Unknown (an
    interrupted attempt) gets only the second record."""
    reason = reason or zombie_reason(occurrence, now)
    if (
        policy is ZombiePolicy.REQUEUE
        and occurrence.attempt > occurrence.max_retries + max_requeues
    ):
        policy = ZombiePolicy.FAIL
        reason = f"{reason}; gave up after {occurrence.attempt} attempts"
    unknown = StatusRecord(
        occurrence_id=occurrence.id,
        status=S.UNKNOWN,
        timestamp=now,
        attempt=occurrence.attempt,
        exception=reason,
        failure_type=FailureType.ZOMBIE,
    )
    if policy is ZombiePolicy.FAIL:
        end = StatusRecord(
            occurrence_id=occurrence.id,
            status=S.FAILED,
            timestamp=now,
            attempt=occurrence.attempt,
            exception=f"zombie: {reason}",
            failure_type=FailureType.ZOMBIE,
        )
    else:
        end = StatusRecord(
            occurrence_id=occurrence.id,
            status=S.QUEUED,
            timestamp=now,
            attempt=occurrence.attempt + 1,
            retry_at=now,
        )
    if occurrence.status is S.UNKNOWN:
        return [end]
    return [unknown, end]


def orphan_reason(occurrence: Occurrence, now: datetime) -> str:
    """Why an occurrence of a dead worker gets its next attempt."""
    if occurrence.status is S.UNKNOWN:
        return occurrence.exception or "interrupted"
    last = occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at
    silent = max(0, round((now - last).total_seconds()))
    if occurrence.instance_id == UNKNOWN_HOLDER:
        return (
            "redelivered while its claim was lost (Redis lost its data, or could not be "
            f"read) and reported running by no worker instance for {silent} s"
        )
    return (
        f"worker instance {occurrence.instance_id} is gone (its registration expired); "
        f"no heartbeat for {silent} s"
    )


class ZombieDetector:
    """Periodically turns silent Running and lost Queued occurrences into new attempts or
    failures, by policy."""

    def __init__(
        self,
        store: StatusStore,
        *,
        threshold_seconds: float,
        interval_seconds: float,
        queued_threshold_seconds: float = 1800.0,
        policy: ZombiePolicy = ZombiePolicy.REQUEUE,
        batch_size: int = 500,
        clock: Clock = utcnow,
        on_applied: Callable[[StatusResult], None] | None = None,
        live_workers: LiveWorkers | None = None,
        live_threshold_seconds: float = 600.0,
        max_requeues: int = DEFAULT_MAX_REQUEUES,
        dead_interval_seconds: float = DEAD_INTERVAL,
        dead_silence_seconds: float = DEAD_SILENCE,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self._store = store
        self._dead_interval = dead_interval_seconds
        self._dead_silence = dead_silence_seconds
        self._is_leader = is_leader
        self._threshold = threshold_seconds
        self._queued_threshold = queued_threshold_seconds
        self._policy = policy
        self._live_threshold = live_threshold_seconds
        self._live_workers = live_workers
        self._max_requeues = max_requeues
        self._interval = interval_seconds
        self._batch = batch_size
        self._clock = clock
        self._on_applied = on_applied
        self._stopping = asyncio.Event()
        self.requeued = 0
        """Zombies this detector requeued since start."""
        self.failed = 0
        """Zombies this detector failed (policy ``fail``) since start."""

    async def sweep(self) -> int:
        """One pass: handle every zombie found now; returns how many this call handled."""
        total = 0
        live = list(await self._live_workers()) if self._live_workers is not None else None
        while not self._stopping.is_set():
            now = self._clock()
            stale = await self._store.stale_occurrences(
                now,
                running_threshold=self._threshold,
                queued_threshold=self._queued_threshold,
                limit=self._batch,
            )
            zombies = [s for s in stale if not self._still_alive(s, live, now)]
            if not zombies:
                break
            policies = {s.occurrence.id: s.zombie_policy or self._policy for s in zombies}
            records = [
                r
                for s in zombies
                for r in zombie_records(
                    s.occurrence, now, policies[s.occurrence.id], max_requeues=self._max_requeues
                )
            ]
            result = await self._store.apply_status(records)
            ended = {
                c.occurrence_id: c.to_status
                for c in result.applied
                if c.to_status in (S.QUEUED, S.FAILED)
            }
            for s in zombies:
                status = ended.get(s.occurrence.id)
                if status is None:
                    continue
                occ = s.occurrence
                action = "requeued" if status is S.QUEUED else "failed"
                log.warning(
                    "zombie occurrence %s: %s",
                    action,
                    zombie_reason(occ, now),
                    extra={"action": "zombie", "occurrence_id": occ.id, "job_id": occ.job_id},
                )
            total += self._count(result, ended)
            if len(stale) < self._batch or not ended:
                break  # done, or what is left is being handled by another server
        return total

    async def sweep_dead(self) -> int:
        """One look for the occurrences of dead worker instances (and interrupted attempts):
        each gets its next attempt (or fails) at once, by policy. Only on the leader, and only
        with a registry; returns how many this call handled."""
        if self._live_workers is None or not self._is_leader():
            return 0
        live = [w.instance_id for w in await self._live_workers()]
        total = 0
        while not self._stopping.is_set():
            now = self._clock()
            orphans = await self._store.orphaned_occurrences(
                now, live_instances=live, silent_for=self._dead_silence, limit=self._batch
            )
            if not orphans:
                break
            reasons = {s.occurrence.id: orphan_reason(s.occurrence, now) for s in orphans}
            records = [
                r
                for s in orphans
                for r in zombie_records(
                    s.occurrence,
                    now,
                    s.zombie_policy or self._policy,
                    max_requeues=self._max_requeues,
                    reason=reasons[s.occurrence.id],
                )
            ]
            result = await self._store.apply_status(records)
            ended = {
                c.occurrence_id: c.to_status
                for c in result.applied
                if c.to_status in (S.QUEUED, S.FAILED)
            }
            for s in orphans:
                status = ended.get(s.occurrence.id)
                if status is not None:
                    occ = s.occurrence
                    log.warning(
                        "occurrence of a dead worker %s: %s",
                        "requeued" if status is S.QUEUED else "failed",
                        reasons[occ.id],
                        extra={
                            "action": "dead_worker",
                            "occurrence_id": occ.id,
                            "job_id": occ.job_id,
                            "instance_id": occ.instance_id,
                        },
                    )
            total += self._count(result, ended)
            if len(orphans) < self._batch or not ended:
                break
        return total

    def _count(self, result: StatusResult, ended: Mapping[UUID, OccurrenceStatus]) -> int:
        requeued = sum(1 for status in ended.values() if status is S.QUEUED)
        self.requeued += requeued
        self.failed += len(ended) - requeued
        if result.applied and self._on_applied is not None:
            self._on_applied(result)
        return len(ended)

    def _still_alive(
        self, stale: StaleOccurrence, live: list[WorkerInfo] | None, now: datetime
    ) -> bool:
        """Whether silence is no proof of loss yet.

        Running: its worker instance is registered, and it is within the long threshold (or
        the job's own, if longer). Queued: no registered worker instance able to run it has
        been up for the whole Queued threshold — while the workers of its group are down (or
        just came back and work through the backlog) its message waits safely in the queue,
        and a new attempt would only make it run twice. Without a registry (``live`` is
        ``None``) only the thresholds count."""
        occurrence = stale.occurrence
        if live is None:
            return False
        if occurrence.status is S.QUEUED:
            up_since = now - timedelta(seconds=self._queued_threshold)
            return not any(
                w.started_at <= up_since
                and occurrence.job_type in w.job_types
                and (occurrence.worker_id is None or w.worker_id == occurrence.worker_id)
                for w in live
            )
        if occurrence.instance_id is None or occurrence.instance_id not in {
            w.instance_id for w in live
        }:
            return False
        threshold = max(
            self._live_threshold, stale.zombie_threshold_seconds or 0.0, self._threshold
        )
        last = occurrence.last_heartbeat or occurrence.start_time or occurrence.created_at
        return now - last < timedelta(seconds=threshold)

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Sweep every interval, and look for dead workers' occurrences every dead interval,
        until :meth:`stop`; errors are logged, the loops never die."""
        await asyncio.gather(
            run_periodically(
                "zombie detection", self.sweep, self._interval, self._stopping, log=log
            ),
            run_periodically(
                "dead worker detection",
                self.sweep_dead,
                self._dead_interval,
                self._stopping,
                log=log,
            ),
        )
