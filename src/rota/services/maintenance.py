"""Retention: delete what is older than its retention — final occurrences per status (with
their status history and logs), log lines, resolved dead letters — in small steps, each its
own short transaction, so that no lock is held for long and dispatch goes on meanwhile.

On PostgreSQL, where occurrences, their history and log lines are partitioned by time, a run
first creates the coming partitions and drops the expired ones whole (the store decides what
may go: see ``rota.stores.partitions``); log lines then go with their partitions rather than
with their occurrences.

``rota maintenance`` runs it once; each server runs it periodically, but only while it owns
bucket 0 (one instance at a time, handed over with the bucket).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rota.core.errors import RotaError
from rota.core.models import OccurrenceStatus, utcnow
from rota.core.ports import MaintenanceStore
from rota.core.records import PartitionUpkeep
from rota.services._loop import run_periodically

log = logging.getLogger(__name__)

S = OccurrenceStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """How long things are kept; ``None``: forever."""

    occurrences: Mapping[OccurrenceStatus, timedelta | None] = field(default_factory=dict)
    """Final status -> retention of its occurrences (by creation time)."""
    logs: timedelta | None = None
    resolved_dead_letters: timedelta | None = None
    """By resolution time; unresolved records are kept."""
    batch_size: int = 1000
    partition_period: str = "month"
    """A store partitioned by time: the range of one partition (``day``, ``week``, ``month``)."""
    partitions_ahead: int = 2

    def upkeep(self, now: datetime, *, drop: bool = True) -> PartitionUpkeep:
        """What the store's time partitions need at ``now``."""
        return PartitionUpkeep(
            period=self.partition_period,
            ahead=self.partitions_ahead,
            drop=drop,
            occurrences_kept_since={
                status: None if keep is None else now - keep
                for status, keep in self.occurrences.items()
            },
            logs_before=None if self.logs is None else now - self.logs,
        )

    def logs_go_with(self, status: OccurrenceStatus) -> bool:
        """Whether an occurrence's log lines go when it does, on a time-partitioned store:
        not when the log retention takes them as soon (by dropping whole partitions)."""
        keep = self.occurrences.get(status)
        return self.logs is None or keep is None or self.logs > keep


@dataclass(slots=True)
class MaintenanceReport:
    occurrences: dict[str, int] = field(default_factory=dict)
    """Status name -> occurrences deleted."""
    logs: int = 0
    dead_letters: int = 0
    idempotency_keys: int = 0
    """Expired ``Idempotency-Key`` answers forgotten."""
    partitions_created: tuple[str, ...] = ()
    partitions_dropped: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.occurrences.values()) + self.logs + self.dead_letters


Deleted = Callable[[str, int], None]
"""``on_deleted(kind, rows)``: kind is ``occurrences``, ``logs`` or ``dead_letters``."""


class Maintenance:
    """Applies a :class:`RetentionPolicy` to the store, and forgets expired idempotency keys
    (their 24 hours are not a setting)."""

    def __init__(
        self,
        store: MaintenanceStore,
        policy: RetentionPolicy,
        *,
        clock: Callable[[], datetime] = utcnow,
        interval_seconds: float = 3600.0,
        is_leader: Callable[[], bool] = lambda: True,
        on_deleted: Deleted | None = None,
        on_run: Callable[[MaintenanceReport], None] | None = None,
    ) -> None:
        self._store = store
        self._policy = policy
        self._clock = clock
        self._interval = interval_seconds
        self._is_leader = is_leader
        self._on_deleted = on_deleted
        self._on_run = on_run
        self._stopping = asyncio.Event()
        self.last_run: MaintenanceReport | None = None

    def stop(self) -> None:
        self._stopping.set()

    async def run_once(self) -> MaintenanceReport:
        """Delete everything past its retention now (stops early when asked to stop)."""
        started = time.monotonic()
        now = self._clock()
        report = MaintenanceReport()
        if self._store.time_partitioned:
            partitions = await self._store.maintain_partitions(now, self._policy.upkeep(now))
            report.partitions_created = partitions.created
            report.partitions_dropped = partitions.dropped
        for status, keep in self._policy.occurrences.items():
            if keep is not None:
                deleted = await self._occurrences(status, now - keep)
                if deleted:
                    report.occurrences[status.name.lower()] = deleted
        if self._policy.logs is not None:
            logs_cutoff = now - self._policy.logs
            report.logs = await self._repeat(
                "logs", lambda: self._store.purge_logs(logs_cutoff, self._batch)
            )
        if self._policy.resolved_dead_letters is not None:
            cutoff = now - self._policy.resolved_dead_letters
            report.dead_letters = await self._repeat(
                "dead_letters", lambda: self._store.purge_failed(cutoff, self._batch)
            )
        report.idempotency_keys = await self._repeat(
            "idempotency_keys", lambda: self._store.purge_idempotency_keys(now, self._batch)
        )
        report.seconds = time.monotonic() - started
        self.last_run = report
        if self._on_run is not None:
            self._on_run(report)
        if report.total or report.partitions_dropped:
            log.info(
                "retention deleted %d occurrences, %d log lines, %d dead letters; "
                "dropped partitions: %s",
                sum(report.occurrences.values()), report.logs, report.dead_letters,
                ", ".join(report.partitions_dropped) or "none",
                extra={"action": "retention", "seconds": round(report.seconds, 3)},
            )  # fmt: skip
        return report

    async def prepare_partitions(self) -> None:
        """Create the time partitions of the current and coming periods (a store partitioned
        by time; idempotent, any instance may run it): at start, and when retention is off."""
        if not self._store.time_partitioned:
            return
        now = self._clock()
        try:
            report = await self._store.maintain_partitions(
                now, self._policy.upkeep(now, drop=False)
            )
        except (RotaError, OSError) as exc:
            log.warning("time partitions not prepared: %s", exc)
            return
        if report.created:
            log.info("created partitions: %s", ", ".join(report.created))

    async def run(self, *, retention: bool = True) -> None:
        """Every interval, while this instance is the leader (owns bucket 0): retention, or
        (``retention`` off) only the upkeep of the time partitions."""
        await self.prepare_partitions()
        await run_periodically(
            "retention run",
            lambda: self._pass(retention=retention),
            self._interval,
            self._stopping,
            log=log,
            wait_first=True,
        )

    async def _pass(self, *, retention: bool) -> None:
        if not self._is_leader():
            return
        if retention:
            await self.run_once()
        else:
            await self.prepare_partitions()

    def _with_logs(self, status: OccurrenceStatus) -> bool:
        return not self._store.time_partitioned or self._policy.logs_go_with(status)

    @property
    def _batch(self) -> int:
        return self._policy.batch_size

    async def _occurrences(self, status: OccurrenceStatus, cutoff: datetime) -> int:
        total = 0
        after = None
        while not self._stopping.is_set():
            batch = await self._store.purge_occurrences(
                status, cutoff, self._batch, after, with_logs=self._with_logs(status)
            )
            total += batch.deleted
            if batch.deleted and self._on_deleted is not None:
                self._on_deleted("occurrences", batch.deleted)
            if batch.next_after is None:
                break
            after = batch.next_after
            await asyncio.sleep(0)  # let the other writers in between two steps
        return total

    async def _repeat(self, kind: str, step: Callable[[], Awaitable[int]]) -> int:
        """Run a one-statement deletion step until it deletes less than a batch."""
        total = 0
        while not self._stopping.is_set():
            deleted = await step()
            total += deleted
            if deleted and self._on_deleted is not None:
                self._on_deleted(kind, deleted)
            if deleted < self._batch:
                break
            await asyncio.sleep(0)
        return total
