"""Interval schedules: a job that fires every fixed number of seconds instead of by a cron.

The API takes the interval as a duration string (``"90m"``, ``"1h30m"``, ``"45s"``, ``"2d"``,
or a whole number of seconds); the job keeps it as ``interval_seconds``. Fires are aligned to
an anchor — the job's ``start_at``, or its creation time (to the whole second) when it has
none: ``anchor + k × interval``. An interval is absolute time: a DST change in any zone moves
nothing (``timeZone`` is not read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from rota.core.errors import ValidationError

MIN_INTERVAL_SECONDS: Final = 1
MAX_INTERVAL_SECONDS: Final = 366 * 86_400
"""The longest interval (366 days)."""

_UNITS: Final = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION: Final = re.compile(r"(\d{1,9})\s*([dhms])")


def parse_duration(value: object, field: str = "every") -> int:
    """Seconds of a duration: ``"1h30m"``, ``"90m"``, ``"45s"``, ``"2d"`` (units ``d h m s``,
    each at most once, largest first) or a whole number of seconds; 1 s to 366 days.
    Anything else is a ``ValidationError`` naming ``field``."""
    if isinstance(value, bool):
        raise ValidationError(f"{field} must be a duration like '90m' or '1h30m'", field=field)
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str):
        seconds = _parse_text(value.strip().lower(), field)
    else:
        raise ValidationError(f"{field} must be a duration like '90m' or '1h30m'", field=field)
    if not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
        raise ValidationError(
            f"{field} must be between 1s and 366d (got {seconds} seconds)", field=field
        )
    return seconds


def _parse_text(text: str, field: str) -> int:
    if text.isdigit():
        return int(text)
    position, total, seen = 0, 0, ""
    for match in _DURATION.finditer(text):
        unit = match.group(2)
        if match.start() != position or unit in seen or (seen and _rank(unit) <= _rank(seen[-1])):
            break
        total += int(match.group(1)) * _UNITS[unit]
        seen += unit
        position = match.end()
        while position < len(text) and text[position] == " ":
            position += 1
    if not seen or position != len(text):
        raise ValidationError(
            f"{field} must be a duration like '90m', '1h30m', '45s' or '2d' (got {text!r})",
            field=field,
        )
    return total


def _rank(unit: str) -> int:
    return "dhms".index(unit)


def format_duration(seconds: int | None) -> str | None:
    """The canonical text of a duration (``5400`` → ``"1h30m"``); ``None`` for ``None``."""
    if seconds is None:
        return None
    parts: list[str] = []
    rest = int(seconds)
    for unit, size in _UNITS.items():
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Fires at ``anchor + k × seconds`` for every whole ``k`` (before the anchor too: the
    bounds of a job are applied by the planner, not here)."""

    anchor: datetime
    seconds: int

    def next_after(self, moment: datetime) -> datetime:
        """The first fire strictly after ``moment`` (aware), as aware UTC."""
        step = timedelta(seconds=self.seconds)
        k = (moment - self.anchor) // step + 1
        return self.anchor + k * step


def interval_fires(
    seconds: int, after: datetime, count: int, start_at: datetime | None = None
) -> list[datetime]:
    """The next ``count`` fires after ``after`` of an interval aligned to ``start_at`` (none
    before it), else to ``after`` to the whole second: a schedule preview."""
    grid = IntervalSchedule(interval_anchor(start_at, after), seconds)
    current = after if start_at is None or start_at <= after else start_at - _TICK
    fires: list[datetime] = []
    for _ in range(count):
        current = grid.next_after(current)
        fires.append(current)
    return fires


_TICK = timedelta(microseconds=1)


def interval_anchor(start_at: datetime | None, created_at: datetime) -> datetime:
    """What an interval job's fires are aligned to: its ``start_at``, else its creation time
    to the whole second."""
    if start_at is not None:
        return start_at
    return created_at.replace(microsecond=0)
