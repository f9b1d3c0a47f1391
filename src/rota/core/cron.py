"""Cron schedules with IANA time zones, over ``cronsim``.

Public API (kept stable):

- ``CronSchedule.parse(expression, time_zone="UTC") -> CronSchedule`` — raises ``CronError``.
- ``schedule.next_after(moment) -> datetime`` — the first fire strictly after ``moment``
  (aware datetime in any zone), returned as aware UTC.
- ``schedule.fires(after, count) -> list[datetime]``.
- ``parse_cached(expression, time_zone)`` — memoised ``parse``.

Syntax: 5 fields (minute hour day month weekday) or 6 with seconds first; names (``JAN``,
``MON``, any case); lists, ranges, steps; ``L`` (last day of the month), ``nL`` (last weekday
``n`` of the month), ``n#k`` (``k``-th weekday ``n``); ``?`` as ``*``; the macros ``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``. Day and
weekday combine with AND when either starts with ``*`` and with OR otherwise (Debian cron).

Time zones (DESIGN.md §3), the same for 5 and 6 fields: ``cronsim`` only computes wall-clock
fires (naive local time); this module maps them to instants. When the minute and hour fields
are fixed (do not start with ``*``), a wall time skipped by a spring-forward fires once at the
end of the gap and a wall time repeated by a fall-back fires once, the first time (cron(8)).
Otherwise fires follow absolute time: every instant whose local wall time matches, in either
fold, and nothing for wall times that do not exist.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from rota.core.errors import CronError

__all__ = ["CronSchedule", "parse_cached"]

_SECOND = timedelta(seconds=1)
_TEMPLATE_START = datetime(2000, 1, 1)
_UTC_KEYS = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Zulu"})
_DIGITS = re.compile(r"[0-9]+")

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True, slots=True)
class _Spec:
    """One cron field: its name, its range and the names it accepts."""

    part: str
    low: int
    high: int
    names: dict[str, int] = field(default_factory=dict)


_SECOND_SPEC = _Spec("second", 0, 59)
_MINUTE_SPEC = _Spec("minute", 0, 59)
_HOUR_SPEC = _Spec("hour", 0, 23)
_DAY_SPEC = _Spec("day", 1, 31)
_MONTH_SPEC = _Spec("month", 1, 12, {name: i + 1 for i, name in enumerate(_MONTHS)})
_WEEKDAY_SPEC = _Spec("weekday", 0, 7, {name: i for i, name in enumerate(_WEEKDAYS)})
_SPECS = (_SECOND_SPEC, _MINUTE_SPEC, _HOUR_SPEC, _DAY_SPEC, _MONTH_SPEC, _WEEKDAY_SPEC)


class _FieldError(Exception):
    """A reason a field was refused; the caller adds the field name."""


# --------------------------------------------------------------------------- parsing


def _value(spec: _Spec, text: str) -> int:
    """A single number or name of ``spec``."""
    named = spec.names.get(text.upper())
    if named is not None:
        return named
    if text == "":
        raise _FieldError("a value is missing")
    if not _DIGITS.fullmatch(text):
        kind = "a number or a name" if spec.names else "a number"
        raise _FieldError(f"{text!r} is not {kind}")
    number = int(text)
    if not spec.low <= number <= spec.high:
        raise _FieldError(f"{number} is out of range {spec.low}-{spec.high}")
    return number


def _range(spec: _Spec, text: str) -> tuple[int, int]:
    start_text, _, end_text = text.partition("-")
    start, end = _value(spec, start_text), _value(spec, end_text)
    if start > end:
        raise _FieldError(f"range {text} is reversed (start {start} > end {end})")
    return start, end


def _step(spec: _Spec, base: str, step_text: str) -> str:
    """``base/step`` with ``base`` being ``*``, a value or a range."""
    span = spec.high - spec.low
    if not _DIGITS.fullmatch(step_text) or not 1 <= int(step_text) <= span:
        raise _FieldError(f"step {step_text!r} is out of range 1-{span}")
    step = int(step_text)
    if base == "*":
        return f"*/{step}"
    if "-" in base:
        start, end = _range(spec, base)
        if start == end:
            raise _FieldError(f"range {base} with a step is degenerate; write {start}")
        return f"{start}-{end}/{step}"
    start = _value(spec, base)
    # ``n/step`` runs to the end of the field; for weekdays that is Saturday (6), not the
    # Sunday alias 7. Written as a range, as cronsim reads a one-value range as ``n/step``.
    end = 6 if spec is _WEEKDAY_SPEC else spec.high
    return f"{start}-{end}/{step}" if start < end else str(start)


def _weekday_special(term: str) -> str:
    """``nL`` (last weekday n of the month) or ``n#k`` (k-th weekday n of the month)."""
    if "#" in term:
        day_text, _, nth_text = term.partition("#")
        day = _value(_WEEKDAY_SPEC, day_text)
        if not _DIGITS.fullmatch(nth_text) or not 1 <= int(nth_text) <= 5:
            raise _FieldError(f"#{nth_text} is out of range 1-5")
        return f"{day}#{int(nth_text)}"
    if term.upper() == "L":
        raise _FieldError("L needs a weekday before it (e.g. 5L for the last Friday)")
    if not term.upper().endswith("L"):
        raise _FieldError(f"{term!r}: L must follow a weekday (e.g. 5L for the last Friday)")
    return f"{_value(_WEEKDAY_SPEC, term[:-1])}L"


def _term(spec: _Spec, term: str) -> str:
    """One comma-separated item of a field, normalised to numbers for ``cronsim``."""
    upper = term.upper()
    if term == "":
        raise _FieldError("a list item is empty")
    if spec is _DAY_SPEC and "W" in upper:
        raise _FieldError("W (nearest weekday) is not supported")
    if spec is _DAY_SPEC and "L" in upper:
        if upper != "L":
            raise _FieldError(f"{term!r}: L must stand alone in the day field")
        return "L"
    if spec is _WEEKDAY_SPEC and ("#" in upper or "L" in upper):
        if "/" in upper:
            raise _FieldError(f"{term!r}: a step cannot follow L or #")
        return _weekday_special(term)
    base, has_step, step = term.partition("/")
    if has_step:
        return _step(spec, base, step)
    if term == "*":
        return "*"
    if "-" in term:
        start, end = _range(spec, term)
        return f"{start}-{end}"
    return str(_value(spec, term))


def _field(spec: _Spec, text: str) -> str:
    """A whole field, normalised; raises ``CronError`` naming the field."""
    try:
        if text == "?":
            return "*"
        if "?" in text:
            raise _FieldError("? must stand alone")
        return ",".join(_term(spec, term) for term in text.split(","))
    except _FieldError as exc:
        raise CronError(f"{spec.part}: {exc}", part=spec.part) from None


def _split(expression: str) -> list[str]:
    """The fields of ``expression`` (macros expanded), 5 or 6 of them."""
    text = expression.strip()
    if not text:
        raise CronError("the cron expression is empty")
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            known = ", ".join(sorted(_MACROS))
            raise CronError(f"unknown or unsupported macro {text!r} (known: {known})")
        text = macro
    fields = text.split()
    if len(fields) not in (5, 6):
        raise CronError(
            f"expected 5 fields (minute hour day month weekday) or 6 with seconds first, "
            f"got {len(fields)}"
        )
    return fields


def _compile(expression: str) -> tuple[CronSim, bool, bool]:
    """The ``cronsim`` template for ``expression``, whether it has seconds and whether its
    minute and hour are fixed (cron(8) DST rules)."""
    raw = _split(expression)
    has_seconds = len(raw) == 6
    specs = _SPECS if has_seconds else _SPECS[1:]
    fields = [_field(spec, text) for spec, text in zip(specs, raw, strict=True)]
    minute, hour = fields[-5:-3]
    try:
        template = CronSim(" ".join(fields), _TEMPLATE_START)
    except CronSimError as exc:
        # After our own checks, cronsim only refuses a day that no chosen month has.
        raw_day, raw_month = raw[-3], raw[-2]
        raise CronError(f"day: {raw_day} never occurs in month {raw_month}", part="day") from exc
    try:
        next(copy.copy(template))
    except StopIteration:
        raise CronError("the cron expression never fires") from None
    fixed = not minute.startswith("*") and not hour.startswith("*")
    return template, has_seconds, fixed


@functools.cache
def _known_zones() -> frozenset[str]:
    """IANA zone keys; ``localtime`` is dropped as it names whatever this machine uses."""
    return frozenset(available_timezones()) - {"localtime", "posixrules"}


def _zone(time_zone: str) -> ZoneInfo:
    """The IANA zone named ``time_zone``; raises ``CronError`` (field ``timeZone``)."""
    if not isinstance(time_zone, str) or time_zone not in _known_zones():
        raise CronError(f"unknown time zone {time_zone!r}", field="timeZone")
    try:
        return ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise CronError(f"unknown time zone {time_zone!r}", field="timeZone") from exc


# --------------------------------------------------------------------------- time zones


def _offset_at(tz: ZoneInfo, utc: datetime) -> timedelta | None:
    """The UTC offset of ``tz`` at the naive-UTC instant ``utc``."""
    return tz.fromutc(utc.replace(tzinfo=tz)).utcoffset()


def _transition(tz: ZoneInfo, wall: datetime, before: timedelta, after: timedelta) -> datetime:
    """The naive-UTC instant of the transition that makes ``wall`` skipped or repeated.

    ``before`` and ``after`` are the offsets on each side; the transition lies between the two
    readings of ``wall`` and is found by bisection to the second."""
    lo, hi = sorted((wall - before, wall - after))
    while hi - lo > _SECOND:
        mid = lo + timedelta(seconds=(hi - lo) // _SECOND // 2)
        if _offset_at(tz, mid) == after:
            hi = mid
        else:
            lo = mid
    return hi


def _offsets(tz: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """The offsets of the two readings (fold 0, fold 1) of the naive wall time ``wall``.

    Equal: ``wall`` is ordinary. Fold 0 smaller: ``wall`` is skipped (a gap). Fold 0 larger:
    ``wall`` is repeated (a fold); fold 0 is its first occurrence."""
    first = tz.utcoffset(wall)
    second = tz.utcoffset(wall.replace(fold=1))
    assert first is not None
    assert second is not None
    return first, second


# --------------------------------------------------------------------------- schedule


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed cron expression in an IANA time zone; computes fire instants in UTC.

    Build one with :meth:`parse` (or :func:`parse_cached`). Immutable and thread-safe."""

    expression: str
    time_zone: str = "UTC"
    has_seconds: bool = field(init=False, compare=False)
    _template: CronSim = field(init=False, repr=False, compare=False)
    _tz: ZoneInfo = field(init=False, repr=False, compare=False)
    _fixed: bool = field(init=False, repr=False, compare=False)
    _utc: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise CronError("the cron expression must be a string")
        template, has_seconds, fixed = _compile(self.expression)
        tz = _zone(self.time_zone)
        object.__setattr__(self, "has_seconds", has_seconds)
        object.__setattr__(self, "_template", template)
        object.__setattr__(self, "_tz", tz)
        object.__setattr__(self, "_fixed", fixed)
        object.__setattr__(self, "_utc", self.time_zone in _UTC_KEYS)

    @classmethod
    def parse(cls, expression: str, time_zone: str = "UTC") -> CronSchedule:
        """Parse ``expression`` in ``time_zone``; raises ``CronError`` when either is bad."""
        return cls(expression, time_zone)

    def next_after(self, moment: datetime) -> datetime:
        """The first fire strictly after ``moment`` (aware, any zone), as aware UTC.

        Raises ``CronError`` if the schedule has no fire left (past the year 9999)."""
        if moment.tzinfo is None:
            raise ValueError("moment must be a timezone-aware datetime")
        if self._utc:
            wall = self._next_wall(moment.astimezone(UTC).replace(tzinfo=None))
            return wall.replace(tzinfo=UTC)
        if self._fixed:
            return self._next_fixed(moment).replace(tzinfo=UTC)
        return self._next_absolute(moment).replace(tzinfo=UTC)

    def fires(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` fires strictly after ``after``, in order, as aware UTC."""
        out: list[datetime] = []
        current = after
        for _ in range(count):
            current = self.next_after(current)
            out.append(current)
        return out

    def _next_wall(self, start: datetime) -> datetime:
        """The first wall time (naive) strictly after the naive ``start`` that matches."""
        sim = copy.copy(self._template)
        sim.dt = start.replace(microsecond=0)
        try:
            return next(sim)
        except (StopIteration, OverflowError):
            raise CronError(f"{self.expression!r} has no fire after {start}") from None

    def _local(self, moment: datetime) -> tuple[datetime, datetime, bool]:
        """``moment`` as naive UTC, as naive wall time, and whether it is the second
        occurrence of a repeated wall time."""
        local = moment.astimezone(self._tz)
        utc = moment.astimezone(UTC).replace(tzinfo=None)
        wall = local.replace(tzinfo=None, fold=0, microsecond=0)
        return utc, wall, bool(local.fold)

    def _next_fixed(self, moment: datetime) -> datetime:
        """cron(8) rules: skipped wall times fire at the end of the gap, repeated ones once."""
        utc, start, second_pass = self._local(moment)
        if second_pass:
            # Every wall time up to the end of the fold already fired in its first pass.
            before, after = _offsets(self._tz, start)
            start = _transition(self._tz, start, before, after) + before - _SECOND
        while True:
            wall = self._next_wall(start)
            before, after = _offsets(self._tz, wall)
            if before < after:
                instant = _transition(self._tz, wall, before, after)
            else:
                instant = wall - before
            if instant > utc:
                return instant
            start = wall

    def _next_absolute(self, moment: datetime) -> datetime:
        """Absolute time: every instant whose wall time matches, none in gaps."""
        utc, start, second_pass = self._local(moment)
        before, after = _offsets(self._tz, start)
        if before > after and not second_pass:
            # In the first pass of a fold: its rest, then its second pass, then beyond.
            end_utc = _transition(self._tz, start, before, after)
            wall = self._next_wall(start)
            if wall < end_utc + before:
                return wall - before
            wall = self._next_wall(end_utc + after - _SECOND)
            if wall < end_utc + before:
                return wall - after
        else:
            wall = self._next_wall(start)
        return self._first_instant(wall, utc)

    def _first_instant(self, wall: datetime, utc: datetime) -> datetime:
        """The first instant after ``utc`` of ``wall`` or a later matching wall time."""
        while True:
            before, after = _offsets(self._tz, wall)
            if before == after:
                return wall - before
            if before < after:  # a gap: resume at its end
                end_wall = _transition(self._tz, wall, before, after) + after
                wall = self._next_wall(end_wall - _SECOND)
                continue
            for instant in (wall - before, wall - after):
                if instant > utc:
                    return instant
            wall = self._next_wall(wall)


@functools.lru_cache(maxsize=4096)
def parse_cached(expression: str, time_zone: str = "UTC") -> CronSchedule:
    """Memoised :meth:`CronSchedule.parse` (schedules are immutable and shareable)."""
    return CronSchedule.parse(expression, time_zone)
