"""Cron schedules with time zones, over ``cronsim`` (placeholder: the real module replaces this).

Public API (kept stable):

- ``CronSchedule.parse(expression, time_zone="UTC") -> CronSchedule`` — raises ``CronError``.
- ``schedule.next_after(moment) -> datetime`` — the first fire strictly after ``moment``
  (aware datetime in any zone), returned as aware UTC.
- ``schedule.fires(after, count) -> list[datetime]``.
- ``parse_cached(expression, time_zone)`` — memoised ``parse``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class CronSchedule:
    expression: str
    time_zone: str

    @classmethod
    def parse(cls, expression: str, time_zone: str = "UTC") -> CronSchedule:
        raise NotImplementedError

    def next_after(self, moment: datetime) -> datetime:
        raise NotImplementedError

    def fires(self, after: datetime, count: int) -> list[datetime]:
        out: list[datetime] = []
        current = after
        for _ in range(count):
            current = self.next_after(current)
            out.append(current)
        return out


@functools.lru_cache(maxsize=4096)
def parse_cached(expression: str, time_zone: str = "UTC") -> CronSchedule:
    return CronSchedule.parse(expression, time_zone)
