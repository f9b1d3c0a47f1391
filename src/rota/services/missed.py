"""Missed fires, noticed in seconds and per job.

The silence monitor (:mod:`rota.services.silence`) flags a recurring job only after a whole
window without any occurrence. This check is finer: every ``interval`` (a second by default)
each server reads the active recurring jobs (cron or interval) of the buckets it owns, each with
the latest fire recorded for it (one statement per page of jobs,
:meth:`~rota.core.ports.SilenceReader.watched_schedules`), and computes with the job's schedule
(:func:`rota.core.planning.first_run_at`) the first fire expected after that one. A fire due
more than ``grace`` seconds ago and not recorded (no occurrence for that ``scheduledFor``: run,
queued, or Skipped with a reason by the misfire or concurrency policy) raises a ``fire_overdue``
alert naming the job and the fire, through the silence monitor's alert channel (log, metrics,
webhook, ``/admin/alerts``). It is resolved once the job's fires are recorded again, up to its
latest due one.

Expected fires start after the job was created or last changed (an edit, an enable or a
probe release all move ``updated_at``), never before its ``execute_at``; disabled and paused
jobs expect none (a paused job's fires are recorded Skipped anyway). The dispatcher records
every fire it handles, in order, so the latest recorded fire tells which are missing: a
dispatcher paused on purpose, stalled or gone shows on every job it should have fired within
the grace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from rota.core.errors import CronError
from rota.core.models import Job, utcnow
from rota.core.planning import first_run_at
from rota.core.ports import SilenceReader
from rota.core.records import WatchedSchedule
from rota.services._loop import run_periodically
from rota.services.silence import FIRE_OVERDUE, Alert, SilenceMonitor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class FireWatchConfig:
    interval_seconds: float = 1.0
    grace_seconds: float = 5.0
    lookback_seconds: float = 3600.0
    """How far back recorded fires are read: a job silent for longer is named by its first
    expected fire in this span."""
    page_size: int = 500


class FireWatch:
    """Compares the expected fires of this server's recurring jobs with the recorded ones."""

    def __init__(
        self,
        store: SilenceReader,
        config: FireWatchConfig,
        alerts: SilenceMonitor,
        *,
        instance_id: str,
        buckets: Callable[[], Sequence[int]],
        paused: Callable[[], str | None] = lambda: None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._config = config
        self._alerts = alerts
        self._instance_id = instance_id
        self._buckets = buckets
        self._paused = paused
        self._clock = clock
        self._stopping = asyncio.Event()
        self.checks = 0
        self.overdue = 0
        """Jobs with an overdue fire at the last check."""

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await run_periodically(
            "missed-fire check",
            self.check,
            lambda: self._config.interval_seconds,
            self._stopping,
            log=log,
            wait_first=True,
        )

    async def check(self) -> list[Alert]:
        """One round; returns the overdue fires found (an alert each)."""
        now = self._clock()
        until = now - timedelta(seconds=self._config.grace_seconds)
        since = now - timedelta(seconds=self._config.lookback_seconds)
        mine = sorted(set(self._buckets()))
        found: list[Alert] = []
        after: UUID | None = None
        while mine:
            page = await self._store.watched_schedules(
                mine, since, until, self._config.page_size, after
            )
            for schedule in page:
                due = overdue_fire(schedule, since, until)
                if due is not None:
                    found.append(self._alert(schedule, due, now))
            if len(page) < self._config.page_size:
                break
            after = page[-1].job_id
        self._alerts.settle(FIRE_OVERDUE, found, now)
        self.overdue = len(found)
        self.checks += 1
        return found

    def _alert(self, schedule: WatchedSchedule, due: datetime, now: datetime) -> Alert:
        late = (now - due).total_seconds()
        paused = self._paused()
        why = "" if paused is None else f" (the dispatcher is paused: {paused})"
        return Alert(
            kind=FIRE_OVERDUE,
            key=f"fire:{schedule.job_id}",
            message=f"job {schedule.display_name or schedule.job_type} ({schedule.job_id}): "
            f"its fire due at {due.isoformat()} is not recorded {late:.1f} s later{why}",
            raised_at=now,
            instance_id=self._instance_id,
            job_id=schedule.job_id,
            job_type=schedule.job_type,
            expected_at=due,
        )


def overdue_fire(schedule: WatchedSchedule, since: datetime, until: datetime) -> datetime | None:
    """The first fire ``schedule`` expects after its latest recorded one (and after it was
    created or changed, and ``since``) if it is due by ``until``; else ``None``."""
    start = max(since, schedule.created_at, schedule.updated_at)
    if schedule.last_fire is not None:
        start = max(start, schedule.last_fire)
    if start >= until:
        return None
    try:
        fire = first_run_at(_as_job(schedule), start)
    except CronError:
        return None
    return fire if fire is not None and fire <= until else None


def _as_job(schedule: WatchedSchedule) -> Job:
    """The schedule as a job, for the planner's rules of its fires and bounds."""
    return Job(
        id=schedule.job_id,
        job_type=schedule.job_type,
        cron_expression=schedule.cron_expression,
        interval_seconds=schedule.interval_seconds,
        time_zone=schedule.time_zone,
        execute_at=schedule.execute_at,
        created_at=schedule.created_at,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
        max_runs=schedule.max_runs,
        run_count=schedule.run_count,
    )
