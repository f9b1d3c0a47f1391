"""A scheduler that notices its own silence.

Every interval, each server looks at the cron jobs of the buckets it owns: a job whose cron
expected at least one fire in the recent window (``window`` seconds back, up to ``grace``
seconds ago) and that has no occurrence at all scheduled in it raises a ``missed_fire``
alert; so does its own dispatcher, when its loop has not ticked for ``stall`` seconds
(``dispatcher_stalled``). An alert is raised once, stays active while the condition lasts
and is resolved when it ends. Raising one is logged (the event), counted in the metrics and,
optionally, POSTed as JSON to a webhook.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import orjson

from rota.core.errors import CronError
from rota.core.models import Job, utcnow
from rota.core.planning import first_run_at
from rota.core.ports import SilenceReader
from rota.services._loop import run_periodically

log = logging.getLogger(__name__)

AlertKind = Literal["missed_fire", "dispatcher_stalled", "fire_overdue"]
MISSED_FIRE: AlertKind = "missed_fire"
DISPATCHER_STALLED: AlertKind = "dispatcher_stalled"
FIRE_OVERDUE: AlertKind = "fire_overdue"
"""A fire not recorded within seconds of its due time (:mod:`rota.services.missed`)."""
KINDS: tuple[AlertKind, ...] = (MISSED_FIRE, DISPATCHER_STALLED, FIRE_OVERDUE)

RECENT = 200
"""Resolved alerts remembered for the API."""
SHARED = 100
"""Most active alerts an instance publishes in its heartbeat."""
INFO_KEY = "alerts"
"""The instance heartbeat key holding its active alerts (JSON), for the other instances."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    kind: AlertKind
    key: str
    """What the alert is about: ``job:<id>``, ``fire:<job id>`` or ``dispatcher:<instance id>``."""
    message: str
    raised_at: datetime
    instance_id: str
    job_id: UUID | None = None
    job_type: str | None = None
    expected_at: datetime | None = None
    """missed_fire: the first fire the cron expected in the window; fire_overdue: the first
    fire not recorded."""
    resolved_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SilenceConfig:
    interval_seconds: float = 30.0
    window_seconds: float = 900.0
    grace_seconds: float = 120.0
    stall_seconds: float = 60.0
    page_size: int = 500


Notify = Callable[[Alert], Awaitable[None]]


class SilenceMonitor:
    """Raises and resolves silence alerts for this server's buckets and dispatcher."""

    def __init__(
        self,
        store: SilenceReader,
        config: SilenceConfig,
        *,
        instance_id: str,
        buckets: Callable[[], Sequence[int]],
        last_tick: Callable[[], float],
        clock: Callable[[], datetime] = utcnow,
        on_raised: Callable[[Alert], None] | None = None,
        on_resolved: Callable[[Alert], None] | None = None,
        notify: Notify | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._instance_id = instance_id
        self._buckets = buckets
        self._last_tick = last_tick
        self._clock = clock
        self._on_raised = on_raised
        self._on_resolved = on_resolved
        self._notify = notify
        self._active: dict[str, Alert] = {}
        self._recent: deque[Alert] = deque(maxlen=RECENT)
        self._stopping = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()
        self.checks = 0

    @property
    def active(self) -> list[Alert]:
        return sorted(self._active.values(), key=lambda a: a.raised_at, reverse=True)

    def shared_info(self) -> dict[str, str]:
        """What this instance's heartbeat carries: its active alerts as JSON (at most
        :data:`SHARED`), so that any server can list every server's alerts."""
        active = self.active
        if not active:
            return {}
        return {INFO_KEY: orjson.dumps([alert_json(a) for a in active[:SHARED]]).decode()}

    @property
    def recent(self) -> list[Alert]:
        """Resolved alerts, newest first."""
        return list(reversed(self._recent))

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await run_periodically(
            "silence check",
            self.check,
            lambda: self._config.interval_seconds,
            self._stopping,
            log=log,
            wait_first=True,
        )
        for task in list(self._sending):
            task.cancel()

    async def check(self) -> list[Alert]:
        """One pass; returns the alerts active after it."""
        now = self._clock()
        self._check_dispatcher(now)
        await self._check_jobs(now)
        self.checks += 1
        return self.active

    # --- the dispatcher ----------------------------------------------------------------------

    def _check_dispatcher(self, now: datetime) -> None:
        key = f"dispatcher:{self._instance_id}"
        silent = time.time() - self._last_tick()
        if silent > self._config.stall_seconds:
            self._raise(
                Alert(
                    kind=DISPATCHER_STALLED,
                    key=key,
                    message=f"the dispatcher of {self._instance_id} has not ticked for "
                    f"{silent:.0f} s",
                    raised_at=now,
                    instance_id=self._instance_id,
                )
            )
        else:
            self._resolve(key, now)

    # --- the jobs ------------------------------------------------------------------------------

    async def _check_jobs(self, now: datetime) -> None:
        mine = set(self._buckets())
        end = now - timedelta(seconds=self._config.grace_seconds)
        start = now - timedelta(seconds=self._config.window_seconds)
        seen: set[str] = set()
        expected: dict[UUID, tuple[Job, datetime]] = {}
        after = None
        while mine:
            page = await self._store.recurring_jobs(sorted(mine), self._config.page_size, after)
            for job in page:
                due = _first_expected(job, start, end)
                if due is not None:
                    expected[job.id] = (job, due)
            if len(page) < self._config.page_size:
                break
            after = page[-1].id
        fired = await self._store.jobs_with_fires(list(expected), start, end) if expected else set()
        for job_id, (job, due) in expected.items():
            key = f"job:{job_id}"
            seen.add(key)
            if job_id in fired:
                self._resolve(key, now)
                continue
            self._raise(
                Alert(
                    kind=MISSED_FIRE,
                    key=key,
                    message=f"job {job.display_name or job.job_type} ({job_id}) should have "
                    f"fired at {due.isoformat()} and has no occurrence since "
                    f"{start.isoformat()}",
                    raised_at=now,
                    instance_id=self._instance_id,
                    job_id=job_id,
                    job_type=job.job_type,
                    expected_at=due,
                )
            )
        # jobs no longer expected here (fired, disabled, deleted, bucket moved): resolved
        for key in [k for k, a in self._active.items() if a.kind == MISSED_FIRE]:
            if key not in seen:
                self._resolve(key, now)

    # --- alert life cycle ------------------------------------------------------------------

    def settle(self, kind: AlertKind, alerts: Sequence[Alert], now: datetime) -> None:
        """Another check's findings of ``kind``: each alert not active yet is raised, each
        active one of that kind no longer found is resolved."""
        found = {a.key for a in alerts}
        for alert in alerts:
            self._raise(alert)
        for key in [k for k, a in self._active.items() if a.kind == kind and k not in found]:
            self._resolve(key, now)

    def _raise(self, alert: Alert) -> None:
        if alert.key in self._active:
            return
        self._active[alert.key] = alert
        log.warning(
            "silence alert: %s",
            alert.message,
            extra={"action": "silence_alert", "kind": alert.kind, "job_id": alert.job_id},
        )
        if self._on_raised is not None:
            self._on_raised(alert)
        if self._notify is not None:
            task = asyncio.create_task(self._send(alert))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    def _resolve(self, key: str, now: datetime) -> None:
        alert = self._active.pop(key, None)
        if alert is None:
            return
        resolved = replace(alert, resolved_at=now)
        self._recent.append(resolved)
        log.info(
            "silence alert resolved: %s",
            alert.message,
            extra={"action": "silence_resolved", "kind": alert.kind, "job_id": alert.job_id},
        )
        if self._on_resolved is not None:
            self._on_resolved(resolved)

    async def _send(self, alert: Alert) -> None:
        assert self._notify is not None
        try:
            await self._notify(alert)
        except Exception as exc:
            log.warning("alert webhook failed: %s", exc, extra={"action": "alert_webhook"})


def _first_expected(job: Job, start: datetime, end: datetime) -> datetime | None:
    """The first fire ``job``'s cron expects in ``(max(start, since it changed), end]`` (none
    before its start, nor after its ``end_at`` or its ``max_runs``)."""
    since = max(start, job.created_at, job.updated_at)
    if since >= end or not job.is_recurring:
        return None
    try:
        fire = first_run_at(job, since)
    except CronError:
        return None
    return fire if fire is not None and fire <= end else None


def shared_alerts(instances: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """The active alerts other instances publish in their heartbeats (unreadable ones are
    left out)."""
    out: list[dict[str, Any]] = []
    for info in instances.values():
        raw = info.get(INFO_KEY)
        if not raw:
            continue
        try:
            alerts = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(alerts, list):
            out.extend(a for a in alerts if isinstance(a, dict))
    return out


def alert_json(alert: Alert) -> dict[str, object]:
    """The webhook body (and the API's shape): camelCase JSON."""
    return {
        "kind": alert.kind,
        "key": alert.key,
        "message": alert.message,
        "raisedAt": alert.raised_at.isoformat(),
        "resolvedAt": None if alert.resolved_at is None else alert.resolved_at.isoformat(),
        "instanceId": alert.instance_id,
        "jobId": None if alert.job_id is None else str(alert.job_id),
        "jobType": alert.job_type,
        "expectedAt": None if alert.expected_at is None else alert.expected_at.isoformat(),
    }
