"""Property tests: random valid expressions against brute-force checkers and ``croniter``.

Expressions are generated from field pieces together with the set of values each piece means,
so the brute-force checkers below never parse cron text: they test each field by itself.
"""

from __future__ import annotations

import calendar
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota.core.cron import CronSchedule
from rota.core.errors import CronError

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
COUNT = 6
HORIZON_DAYS = 4 * 366

RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day": (1, 31),
    "month": (1, 12),
    "weekday": (0, 7),
}
NAMES = {
    "month": ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
    "weekday": ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
}
NAME_BASE = {"month": 1, "weekday": 0}


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Piece:
    """A generated field (or one list item of it): its text and what it matches."""

    text: str
    values: frozenset[int] = frozenset()
    last_day: bool = False  # day: L
    last_weekdays: frozenset[int] = frozenset()  # weekday: nL
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()  # weekday: n#k

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' printer
        printer.text(f"Piece({self.text!r})")


def join(pieces: list[Piece]) -> Piece:
    return Piece(
        ",".join(p.text for p in pieces),
        frozenset().union(*(p.values for p in pieces)),
        any(p.last_day for p in pieces),
        frozenset().union(*(p.last_weekdays for p in pieces)),
        frozenset().union(*(p.nth_weekdays for p in pieces)),
    )


@dataclass(frozen=True)
class Expr:
    """A generated expression; ``second`` is None for the 5-field form."""

    second: Piece | None
    minute: Piece
    hour: Piece
    day: Piece
    month: Piece
    weekday: Piece
    seconds: list[int] = field(init=False)

    def __post_init__(self) -> None:
        seconds = sorted(self.second.values) if self.second else [0]
        object.__setattr__(self, "seconds", seconds)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' printer
        printer.text(f"Expr({self.text!r})")

    @property
    def text(self) -> str:
        parts = [self.minute, self.hour, self.day, self.month, self.weekday]
        if self.second is not None:
            parts.insert(0, self.second)
        return " ".join(p.text for p in parts)

    def day_matches(self, d: date) -> bool:
        if d.month not in self.month.values:
            return False
        last = calendar.monthrange(d.year, d.month)[1]
        dom = d.day in self.day.values or (self.day.last_day and d.day == last)
        cron_dow = (d.weekday() + 1) % 7
        dow = (
            cron_dow in {v % 7 for v in self.weekday.values}
            or (cron_dow in {v % 7 for v in self.weekday.last_weekdays} and d.day + 7 > last)
            or (cron_dow, (d.day - 1) // 7 + 1)
            in {(v % 7, k) for v, k in self.weekday.nth_weekdays}
        )
        star = self.day.text[0] in "*?" or self.weekday.text[0] in "*?"
        return (dom and dow) if star else (dom or dow)

    def wall_matches(self, wall: datetime) -> bool:
        """Minute, hour, day, month and weekday (not the second) of a wall time."""
        return (
            wall.minute in self.minute.values
            and wall.hour in self.hour.values
            and self.day_matches(wall.date())
        )


# --------------------------------------------------------------------------- strategies


@st.composite
def number(
    draw: st.DrawFn, name: str, low: int | None = None, high: int | None = None
) -> tuple[int, str]:
    """A value of field ``name`` and its text (a name in any case, where one exists)."""
    lo, hi = RANGES[name]
    value = draw(st.integers(lo if low is None else low, hi if high is None else high))
    names = NAMES.get(name)
    index = value - NAME_BASE.get(name, 0)
    if names and 0 <= index < len(names) and draw(st.booleans()):
        text = names[index]
        return value, draw(st.sampled_from([text, text.lower(), text.title()]))
    return value, str(value)


@st.composite
def nth_weekday(draw: st.DrawFn) -> Piece:
    value, text = draw(number("weekday"))
    nth = draw(st.integers(1, 5))
    return Piece(f"{text}#{nth}", nth_weekdays=frozenset({(value, nth)}))


@st.composite
def term(draw: st.DrawFn, name: str, croniter_safe: bool) -> Piece:
    """One list item: a value, a range, a stepped range or value, or L / nL / n#k."""
    lo, hi = RANGES[name]
    kinds = ["value", "range", "range_step", "value_step"]
    if name == "weekday" and not croniter_safe:
        kinds += ["nth", "last"]
    if name == "weekday" and croniter_safe:
        kinds.remove("value_step")  # croniter reads n/step in weekdays its own way
    if name == "day":
        kinds += ["last"]
    kind = draw(st.sampled_from(kinds))
    if kind == "last" and name == "day":
        return Piece("L", last_day=True)
    if kind == "last":
        value, text = draw(number(name))
        return Piece(f"{text}L", last_weekdays=frozenset({value}))
    if kind == "nth":
        return draw(nth_weekday())
    if kind == "value":
        value, text = draw(number(name))
        return Piece(text, frozenset({value}))
    if kind == "value_step":
        end = 6 if name == "weekday" else hi
        value, text = draw(number(name, high=end))
        step = draw(st.integers(1, hi - lo))
        return Piece(f"{text}/{step}", frozenset(range(value, end + 1, step)))
    # Ranges: croniter reads ``5-5`` as the whole field, and ``5-5/2`` is refused by us.
    single = kind == "range" and not croniter_safe
    start, start_text = draw(number(name, high=hi if single else hi - 1))
    end, end_text = draw(number(name, low=start if single else start + 1))
    if kind == "range":
        return Piece(f"{start_text}-{end_text}", frozenset(range(start, end + 1)))
    step = draw(st.integers(1, hi - lo))
    return Piece(f"{start_text}-{end_text}/{step}", frozenset(range(start, end + 1, step)))


@st.composite
def piece(draw: st.DrawFn, name: str, croniter_safe: bool = False, star_weight: int = 2) -> Piece:
    """A whole field: ``*`` (or ``?``), ``*/step``, or a list of 1-3 terms."""
    lo, hi = RANGES[name]
    kind = draw(st.sampled_from(["star"] * star_weight + ["star_step", "list", "list"]))
    if kind == "star":
        question = name in ("day", "weekday") and draw(st.booleans())
        return Piece("?" if question else "*", frozenset(range(lo, hi + 1)))
    if kind == "star_step":
        step = draw(st.integers(1, hi - lo))
        return Piece(f"*/{step}", frozenset(range(lo, hi + 1, step)))
    terms = draw(st.lists(term(name, croniter_safe), min_size=1, max_size=3))
    if croniter_safe and len(terms) > 1:
        # croniter misreads L inside a list (``2-31,L`` fires on the 1st): L only alone there.
        terms = [t for t in terms if not t.last_day] or terms[:1]
    return join(terms)


@st.composite
def expressions(draw: st.DrawFn, croniter_safe: bool = False) -> Expr:
    six = draw(st.booleans())
    second = draw(piece("second", croniter_safe)) if six else None
    day = draw(piece("day", croniter_safe))
    weekday = draw(piece("weekday", croniter_safe))
    if croniter_safe and draw(st.integers(0, 5)) == 0:
        weekday = draw(nth_weekday())  # croniter takes n#k only alone in its field
    if croniter_safe and day.text != "*" and weekday.text != "*":
        # croniter combines restricted day and weekday with OR even for ``*/n`` (Debian: AND).
        weekday = star("weekday")
    return Expr(
        second,
        draw(piece("minute", croniter_safe)),
        draw(piece("hour", croniter_safe)),
        day,
        draw(piece("month", croniter_safe, star_weight=4)),
        weekday,
    )


moments = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31), timezones=st.just(UTC)
)


# --------------------------------------------------------------------------- brute force (UTC)


def brute_force_utc(expr: Expr, start: datetime, count: int) -> list[datetime]:
    """The first ``count`` fires after ``start`` within ``HORIZON_DAYS``, day by day, then
    hour, minute and second, each field tested by itself."""
    out: list[datetime] = []
    for offset in range(HORIZON_DAYS):
        d = start.date() + timedelta(days=offset)
        if not expr.day_matches(d):
            continue
        for hour in sorted(expr.hour.values):
            for minute in sorted(expr.minute.values):
                for second in expr.seconds:
                    moment = datetime(d.year, d.month, d.day, hour, minute, second, tzinfo=UTC)
                    if moment > start:
                        out.append(moment)
                        if len(out) == count:
                            return out
    return out


def horizon_end(start: datetime) -> datetime:
    d = start.date() + timedelta(days=HORIZON_DAYS)
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def parse_or_refusal(expression: str) -> CronSchedule | CronError:
    try:
        return CronSchedule.parse(expression)
    except CronError as exc:
        return exc


def assert_same_fires(
    schedule: CronSchedule, expected: list[datetime], start: datetime, end: datetime
) -> None:
    """``expected`` are all fires after ``start`` up to ``end`` (at most ``COUNT``)."""
    found = schedule.fires(start, len(expected))
    assert found == expected, schedule.expression
    if len(expected) < COUNT:
        assert schedule.next_after(expected[-1] if expected else start) >= end


@SETTINGS
@given(expr=expressions(), start=moments)
def test_matches_brute_force_in_utc(expr: Expr, start: datetime) -> None:
    expected = brute_force_utc(expr, start, COUNT)
    schedule = parse_or_refusal(expr.text)
    if isinstance(schedule, CronError):
        # Refused only when it can never fire (a day no chosen month has, or never both).
        assert schedule.part in (None, "day"), schedule.message
        assert expected == [], (expr.text, schedule.message)
        return
    assert schedule.has_seconds == (expr.second is not None)
    assert_same_fires(schedule, expected, start, horizon_end(start))


@SETTINGS
@given(expr=expressions(croniter_safe=True), start=moments)
def test_matches_croniter_in_utc(expr: Expr, start: datetime) -> None:
    schedule = parse_or_refusal(expr.text)
    if isinstance(schedule, CronError):
        assert brute_force_utc(expr, start, 1) == []
        return
    six = expr.second is not None
    iterator = croniter(expr.text, start, second_at_beginning=six)
    expected = [iterator.get_next(datetime) for _ in range(COUNT)]
    assert schedule.fires(start, COUNT) == expected, expr.text


@settings(max_examples=60, deadline=None, database=None)
@given(expr=expressions(), start=moments)
def test_utc_fast_path_equals_the_zone_path(expr: Expr, start: datetime) -> None:
    fast = parse_or_refusal(expr.text)
    if isinstance(fast, CronError):
        return
    general = CronSchedule.parse(expr.text, "Etc/GMT")  # UTC too, through the DST-aware code
    assert general.fires(start, COUNT) == fast.fires(start, COUNT)


# --------------------------------------------------------------------------- DST zones

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute shifts
    "America/Santiago",  # midnight skipped in spring
    "America/St_Johns",  # -03:30 / -02:30
    "Pacific/Chatham",  # +12:45 / +13:45
    "Africa/Casablanca",  # Ramadan shifts, backwards in spring
]
SCAN = timedelta(days=2)
LOOK_BACK = timedelta(hours=3)  # longer than any fold


@functools.cache
def transitions(zone: str) -> list[datetime]:
    """The UTC instants (to the minute) where ``zone`` changes offset in 2025."""
    tz = ZoneInfo(zone)
    out: list[datetime] = []
    t = datetime(2025, 1, 1, tzinfo=UTC)
    while t.year == 2025:
        nxt = t + timedelta(hours=1)
        if t.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            m = t
            while m.astimezone(tz).utcoffset() == t.astimezone(tz).utcoffset():
                m += timedelta(minutes=1)
            out.append(m)
        t = nxt
    return out


@st.composite
def near_transition(draw: st.DrawFn) -> tuple[str, datetime]:
    zone = draw(st.sampled_from(ZONES))
    when = draw(st.sampled_from(transitions(zone)))
    offset = draw(st.integers(-6 * 3600, 3 * 3600))
    micro = draw(st.sampled_from([0, 0, 500_000]))
    return zone, when + timedelta(seconds=offset, microseconds=micro)


def star(name: str) -> Piece:
    lo, hi = RANGES[name]
    return Piece("*", frozenset(range(lo, hi + 1)))


@st.composite
def dst_expressions(draw: st.DrawFn, fixed: bool) -> Expr:
    """Expressions that fire often around a transition, in the fixed or the absolute DST mode
    (minute and hour not starting with ``*``, or one of them starting with ``*``)."""
    six = draw(st.booleans())
    second = draw(piece("second")) if six else None
    if fixed:
        minute = join(draw(st.lists(term("minute", False), min_size=1, max_size=3)))
        hour = join(draw(st.lists(term("hour", False), min_size=1, max_size=3)))
    else:
        minute = draw(piece("minute", star_weight=3))
        hour = draw(piece("hour", star_weight=3))
        if minute.text[0] != "*" and hour.text[0] != "*":
            hour = star("hour")
    day = draw(st.one_of(st.just(star("day")), piece("day")))
    return Expr(second, minute, hour, day, star("month"), star("weekday"))


def walls(zone: str, first: datetime) -> Iterator[tuple[datetime, datetime]]:
    """(UTC minute, its naive local wall time) for every minute from ``first`` for ``SCAN``."""
    tz = ZoneInfo(zone)
    for n in range(int(SCAN / timedelta(minutes=1))):
        t = first + timedelta(minutes=n)
        yield t, t.astimezone(tz).replace(tzinfo=None)


def brute_force_absolute(expr: Expr, zone: str, start: datetime) -> list[datetime]:
    """Absolute time: every UTC instant whose local wall time matches."""
    out: list[datetime] = []
    for t, wall in walls(zone, start.replace(second=0, microsecond=0)):
        if expr.wall_matches(wall):
            out.extend(f for f in (t + timedelta(seconds=s) for s in expr.seconds) if f > start)
        if len(out) >= COUNT:
            break
    return out[:COUNT]


def brute_force_fixed(expr: Expr, zone: str, start: datetime) -> list[datetime]:
    """cron(8): a wall time fires at the first instant the local clock reaches it or passes
    it (so once, at the end of a gap or in the first pass of a fold). The scan starts a few
    hours early: a wall time reached before ``start`` does not fire again in a second pass."""
    fires: set[datetime] = set()
    first = start.replace(second=0, microsecond=0) - LOOK_BACK
    reached = first.astimezone(ZoneInfo(zone)).replace(tzinfo=None) - timedelta(minutes=1)
    for t, wall in walls(zone, first):
        minute = reached + timedelta(minutes=1)
        while minute <= wall:  # wall minutes reached for the first time at t
            if expr.wall_matches(minute):
                seconds = [timedelta(seconds=s) for s in expr.seconds]
                fires.update(t + s if minute == wall else t for s in seconds)
            minute += timedelta(minutes=1)
        reached = max(reached, wall)
        if len([f for f in fires if f > start]) >= COUNT:
            break
    return sorted(f for f in fires if f > start)[:COUNT]


@settings(max_examples=100, deadline=None, database=None)
@given(expr=dst_expressions(fixed=False), where=near_transition())
def test_absolute_mode_matches_brute_force_across_transitions(
    expr: Expr, where: tuple[str, datetime]
) -> None:
    zone, start = where
    schedule = CronSchedule.parse(expr.text, zone)
    expected = brute_force_absolute(expr, zone, start)
    assert_same_fires(schedule, expected, start, start.replace(second=0, microsecond=0) + SCAN)


@settings(max_examples=100, deadline=None, database=None)
@given(expr=dst_expressions(fixed=True), where=near_transition())
def test_fixed_mode_matches_brute_force_across_transitions(
    expr: Expr, where: tuple[str, datetime]
) -> None:
    zone, start = where
    schedule = CronSchedule.parse(expr.text, zone)
    expected = brute_force_fixed(expr, zone, start)
    scan_end = start.replace(second=0, microsecond=0) - LOOK_BACK + SCAN
    assert_same_fires(schedule, expected, start, scan_end)


@settings(max_examples=60, deadline=None, database=None)
@given(expr=dst_expressions(fixed=True), where=near_transition())
def test_six_fields_with_second_zero_equal_five_fields(
    expr: Expr, where: tuple[str, datetime]
) -> None:
    zone, start = where
    five = Expr(None, expr.minute, expr.hour, expr.day, expr.month, expr.weekday)
    six = Expr(
        Piece("0", frozenset({0})), expr.minute, expr.hour, expr.day, expr.month, expr.weekday
    )
    assert CronSchedule.parse(six.text, zone).fires(start, COUNT) == CronSchedule.parse(
        five.text, zone
    ).fires(start, COUNT)
