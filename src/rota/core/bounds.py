"""Checking a job's schedule: which of cron, interval and one-time it is, its time zone, and
its bounds (``start_at``, ``end_at``, ``max_runs``), jitter and misfire window.

Pure: :func:`checked_schedule` returns the fields in canonical form or raises a
``ValidationError`` naming the API field. The planner's rules for these fields live in
:mod:`rota.core.planning`, the parsing of intervals in :mod:`rota.core.intervals`.
"""

from __future__ import annotations

import math
import zoneinfo
from datetime import datetime
from typing import Any, Final, Protocol

from rota.core.cron import parse_cached
from rota.core.errors import ValidationError
from rota.core.intervals import parse_duration
from rota.core.jobspec import MAX_SECONDS, as_utc

MAX_JITTER_SECONDS: Final = 3600
MAX_RUNS: Final = 1_000_000_000


class ScheduleFields(Protocol):
    """A job or a job spec: the fields checked here."""

    @property
    def cron_expression(self) -> str | None: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def execute_at(self) -> datetime | None: ...
    @property
    def interval_seconds(self) -> int | str | None: ...
    @property
    def start_at(self) -> datetime | None: ...
    @property
    def end_at(self) -> datetime | None: ...
    @property
    def max_runs(self) -> int | None: ...
    @property
    def jitter_seconds(self) -> float | None: ...
    @property
    def misfire_window_seconds(self) -> float | None: ...


def checked_schedule(job: ScheduleFields) -> dict[str, Any]:
    """The schedule fields of a job (or spec) checked and in canonical form, by attribute name.

    At most one of ``cronExpression``, ``every`` and ``executeAt`` — except the older form
    ``cronExpression`` with ``executeAt``, a cron whose fires start at ``executeAt`` (as
    ``startAt``); none: the job runs only when triggered (by hand, or by its upstreams).
    ``startAt``, ``endAt`` and ``maxRuns`` bound a recurring job only."""
    cron = _text(job.cron_expression, "cronExpression").strip() or None
    zone = _text(job.time_zone, "timeZone").strip() or "UTC"
    every = None if job.interval_seconds is None else parse_duration(job.interval_seconds)
    execute_at = _moment(job.execute_at, "executeAt")
    if every is not None and (cron is not None or execute_at is not None):
        other = "cronExpression" if cron is not None else "executeAt (use startAt)"
        raise ValidationError(f"give every or {other}, not both", field="every")
    if cron is not None:
        parse_cached(cron, zone)
    else:
        _check_zone(zone)
    start_at, end_at = _moment(job.start_at, "startAt"), _moment(job.end_at, "endAt")
    max_runs = _whole(job.max_runs, "maxRuns", 1, MAX_RUNS)
    if cron is None and every is None:
        for value, name in ((start_at, "startAt"), (end_at, "endAt"), (max_runs, "maxRuns")):
            if value is not None:
                raise ValidationError(
                    f"{name} bounds a recurring job (cronExpression or every), not a one-time one",
                    field=name,
                )
    start = start_at if start_at is not None else (execute_at if cron is not None else None)
    if end_at is not None and start is not None and end_at <= start:
        raise ValidationError("endAt must be after startAt", field="endAt")
    return {
        "cron_expression": cron,
        "time_zone": zone,
        "execute_at": execute_at,
        "interval_seconds": every,
        "start_at": start_at,
        "end_at": end_at,
        "max_runs": max_runs,
        "jitter_seconds": _seconds(job.jitter_seconds, "jitterSeconds", MAX_JITTER_SECONDS, 0),
        "misfire_window_seconds": _seconds(
            job.misfire_window_seconds, "misfireWindowSeconds", MAX_SECONDS, 1
        ),
    }


def _check_zone(zone: str) -> None:
    try:
        zoneinfo.ZoneInfo(zone)
    except (ValueError, KeyError) as exc:
        raise ValidationError(f"unknown time zone {zone!r}", field="timeZone") from exc


def _text(value: object, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    return value


def _moment(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(f"{field} must be a date and time", field=field)
    return as_utc(value)


def _whole(value: object, field: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{field} must be a whole number from {low} to {high}", field=field)
    return value


def _seconds(value: object, field: str, high: float, low: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{field} must be a number of seconds", field=field)
    if not math.isfinite(value) or not low <= value <= high:
        raise ValidationError(f"{field} must be from {low:g} to {high:g} seconds", field=field)
    return float(value)
