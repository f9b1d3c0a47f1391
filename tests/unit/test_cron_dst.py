"""Daylight-saving transitions, for 5- and 6-field expressions alike (DESIGN.md §3).

Fixed minute and hour: a skipped wall time fires once at the end of the gap, a repeated one
once, the first time. Minute or hour starting with ``*``: fires follow absolute time.

Transitions used (2025):

- Europe/Berlin: 30 Mar 02:00 CET -> 03:00 CEST (01:00Z); 26 Oct 03:00 CEST -> 02:00 CET (01:00Z).
- America/New_York: 9 Mar 02:00 EST -> 03:00 EDT (07:00Z); 2 Nov 02:00 EDT -> 01:00 EST (06:00Z).
- Australia/Lord_Howe (30-minute shift): 6 Apr 02:00 +11 -> 01:30 +10:30 (15:00Z on 5 Apr);
  5 Oct 02:00 +10:30 -> 02:30 +11 (15:30Z on 4 Oct).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from rota.core.cron import CronSchedule

BERLIN, NEW_YORK, LORD_HOWE = "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"

BERLIN_SPRING, BERLIN_FALL = date(2025, 3, 30), date(2025, 10, 26)
NY_SPRING, NY_FALL = date(2025, 3, 9), date(2025, 11, 2)
LH_SPRING, LH_FALL = date(2025, 10, 5), date(2025, 4, 6)

TRANSITIONS = [
    (BERLIN, BERLIN_SPRING, "spring"),
    (BERLIN, BERLIN_FALL, "fall"),
    (NEW_YORK, NY_SPRING, "spring"),
    (NEW_YORK, NY_FALL, "fall"),
    (LORD_HOWE, LH_SPRING, "spring"),
    (LORD_HOWE, LH_FALL, "fall"),
]


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def day_bounds(zone: str, day: date) -> tuple[datetime, datetime]:
    """The UTC instants of the local midnights that start and end ``day``."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day, time(), tzinfo=tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(), tzinfo=tz).astimezone(UTC)
    return start, end


def fires_between(schedule: CronSchedule, start: datetime, end: datetime) -> list[datetime]:
    """All fires in ``[start, end)``."""
    out: list[datetime] = []
    current = schedule.next_after(start - timedelta(microseconds=1))
    while current < end:
        out.append(current)
        current = schedule.next_after(current)
    return out


def fires_on(expression: str, zone: str, day: date) -> list[datetime]:
    return fires_between(CronSchedule.parse(expression, zone), *day_bounds(zone, day))


def brute_force(zone: str, day: date, matches: Callable[[datetime], bool]) -> list[datetime]:
    """Every UTC minute of the local ``day`` whose local wall time ``matches``."""
    tz = ZoneInfo(zone)
    start, end = day_bounds(zone, day)
    out: list[datetime] = []
    current = start
    while current < end:
        if matches(current.astimezone(tz).replace(tzinfo=None)):
            out.append(current)
        current += timedelta(minutes=1)
    return out


def six(expression: str) -> str:
    """The 6-field form of a 5-field expression (second 0)."""
    return f"0 {expression}"


# --------------------------------------------------------------------------- fixed times

FIXED_CASES = [
    # zone, local day, "minute hour", the single fire that day (UTC), local wall time of it
    (BERLIN, BERLIN_SPRING, "30 2", utc(2025, 3, 30, 1, 0), "03:00"),  # skipped: end of gap
    (BERLIN, BERLIN_FALL, "30 2", utc(2025, 10, 26, 0, 30), "02:30"),  # repeated: first (CEST)
    (BERLIN, BERLIN_SPRING, "0 2", utc(2025, 3, 30, 1, 0), "03:00"),
    (BERLIN, BERLIN_FALL, "59 2", utc(2025, 10, 26, 0, 59), "02:59"),
    (BERLIN, BERLIN_FALL, "0 3", utc(2025, 10, 26, 2, 0), "03:00"),
    (NEW_YORK, NY_SPRING, "30 2", utc(2025, 3, 9, 7, 0), "03:00"),
    (NEW_YORK, NY_FALL, "30 1", utc(2025, 11, 2, 5, 30), "01:30"),  # first: EDT
    (NEW_YORK, NY_FALL, "30 2", utc(2025, 11, 2, 7, 30), "02:30"),  # after the fold
    (LORD_HOWE, LH_SPRING, "15 2", utc(2025, 10, 4, 15, 30), "02:30"),  # gap is 02:00-02:30
    (LORD_HOWE, LH_SPRING, "30 2", utc(2025, 10, 4, 15, 30), "02:30"),  # just after the gap
    (LORD_HOWE, LH_SPRING, "0 2", utc(2025, 10, 4, 15, 30), "02:30"),
    (LORD_HOWE, LH_FALL, "45 1", utc(2025, 4, 5, 14, 45), "01:45"),  # first: +11:00
    (LORD_HOWE, LH_FALL, "30 1", utc(2025, 4, 5, 14, 30), "01:30"),
    (LORD_HOWE, LH_FALL, "30 2", utc(2025, 4, 5, 16, 0), "02:30"),
]


@pytest.mark.parametrize("six_fields", [False, True], ids=["5-field", "6-field"])
@pytest.mark.parametrize(("zone", "day", "minute_hour", "expected", "wall"), FIXED_CASES)
def test_fixed_time_fires_once_on_the_transition_day(
    zone: str, day: date, minute_hour: str, expected: datetime, wall: str, six_fields: bool
) -> None:
    expression = f"{minute_hour} * * *"
    if six_fields:
        expression = six(expression)
    assert fires_on(expression, zone, day) == [expected]
    assert expected.astimezone(ZoneInfo(zone)).strftime("%H:%M") == wall


@pytest.mark.parametrize("six_fields", [False, True], ids=["5-field", "6-field"])
@pytest.mark.parametrize(("zone", "day", "minute_hour", "expected", "wall"), FIXED_CASES)
def test_fixed_time_fires_once_a_day_around_the_transition(
    zone: str, day: date, minute_hour: str, expected: datetime, wall: str, six_fields: bool
) -> None:
    expression = f"{minute_hour} * * *"
    if six_fields:
        expression = six(expression)
    schedule = CronSchedule.parse(expression, zone)
    start, _ = day_bounds(zone, day - timedelta(days=2))
    _, end = day_bounds(zone, day + timedelta(days=2))
    found = fires_between(schedule, start, end)
    tz = ZoneInfo(zone)
    assert [f.astimezone(tz).date() for f in found] == [
        day + timedelta(days=n) for n in range(-2, 3)
    ]
    assert expected in found


@pytest.mark.parametrize("six_fields", [False, True], ids=["5-field", "6-field"])
def test_cronsim_gap_and_fold_quirk_is_fixed_for_six_fields(six_fields: bool) -> None:
    # FACTS.md: plain cronsim skips 30 Mar and fires twice on 26 Oct for ``0 30 2 * * *``.
    expression = six("30 2 * * *") if six_fields else "30 2 * * *"
    schedule = CronSchedule.parse(expression, BERLIN)
    spring = schedule.fires(utc(2025, 3, 29, 12), 2)
    assert spring == [utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 30)]
    fall = schedule.fires(utc(2025, 10, 25, 12), 2)
    assert fall == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]


def test_seconds_in_a_gap_fire_at_the_first_instant_after_it() -> None:
    schedule = CronSchedule.parse("15 30 2 * * *", BERLIN)
    assert fires_on("15 30 2 * * *", BERLIN, BERLIN_SPRING) == [utc(2025, 3, 30, 1, 0, 0)]
    assert schedule.next_after(utc(2025, 3, 30, 1)) == utc(2025, 3, 31, 0, 30, 15)


def test_many_wall_times_in_one_gap_fire_once() -> None:
    assert fires_on("0,15,30,45 2 * * *", BERLIN, BERLIN_SPRING) == [utc(2025, 3, 30, 1)]
    assert fires_on("* 30 2 * * *", BERLIN, BERLIN_SPRING) == [utc(2025, 3, 30, 1)]
    # Lord Howe: 02:00 and 02:15 are skipped, 02:30 exists; all three are the same instant.
    assert fires_on("0,15,30,45 2 * * *", LORD_HOWE, LH_SPRING) == [
        utc(2025, 10, 4, 15, 30),
        utc(2025, 10, 4, 15, 45),
    ]


def test_fixed_hour_range_across_a_gap() -> None:
    assert fires_on("0 1-3 * * *", BERLIN, BERLIN_SPRING) == [
        utc(2025, 3, 30, 0),
        utc(2025, 3, 30, 1),
    ]
    assert fires_on("0 0 1-3 * * *", BERLIN, BERLIN_SPRING) == [
        utc(2025, 3, 30, 0),
        utc(2025, 3, 30, 1),
    ]


def test_fixed_hour_range_across_a_fold() -> None:
    expected = [utc(2025, 10, 25, 23), utc(2025, 10, 26, 0), utc(2025, 10, 26, 2)]
    assert fires_on("0 1-3 * * *", BERLIN, BERLIN_FALL) == expected
    assert fires_on("0 0 1-3 * * *", BERLIN, BERLIN_FALL) == expected


def test_every_second_of_a_repeated_minute_fires_in_the_first_pass_only() -> None:
    found = fires_on("* 30 2 * * *", BERLIN, BERLIN_FALL)
    assert found == [utc(2025, 10, 26, 0, 30, s) for s in range(60)]


def test_fixed_mode_from_inside_the_second_pass_of_a_fold() -> None:
    schedule = CronSchedule.parse("0-59/5 2,3 * * *", BERLIN)
    second_pass = datetime(2025, 10, 26, 2, 10, tzinfo=ZoneInfo(BERLIN), fold=1)
    assert second_pass.astimezone(UTC) == utc(2025, 10, 26, 1, 10)
    # Every 02:xx already fired in the first pass; next is 03:00 CET.
    assert schedule.next_after(second_pass) == utc(2025, 10, 26, 2, 0)
    assert schedule.next_after(utc(2025, 10, 26, 0, 50)) == utc(2025, 10, 26, 0, 55)
    assert schedule.next_after(utc(2025, 10, 26, 0, 55)) == utc(2025, 10, 26, 2, 0)


@pytest.mark.parametrize(("zone", "day", "kind"), TRANSITIONS)
@pytest.mark.parametrize(
    "expression", ["*/20 1-3 * * *", "0 0-59/20 1-3 * * *", "10 0,20,40 1,2 * * *"]
)
def test_next_after_from_any_moment_agrees_with_iteration(
    zone: str, day: date, kind: str, expression: str
) -> None:
    # ``*/20 1-3`` starts with * in the minute: absolute; the others are fixed.
    schedule = CronSchedule.parse(expression, zone)
    start, end = day_bounds(zone, day)
    sequence = fires_between(schedule, start, end + timedelta(days=1))
    moment = start
    while moment < end:
        assert schedule.next_after(moment) == next(f for f in sequence if f > moment), moment
        moment += timedelta(minutes=5)


# --------------------------------------------------------------------------- absolute time

# (zone, day) -> number of fires of */30 in the local day: 23 h -> 46, 25 h -> 50,
# Lord Howe 23.5 h -> 47, 24.5 h -> 49.
HALF_HOURS = {
    (BERLIN, BERLIN_SPRING): 46,
    (BERLIN, BERLIN_FALL): 50,
    (NEW_YORK, NY_SPRING): 46,
    (NEW_YORK, NY_FALL): 50,
    (LORD_HOWE, LH_SPRING): 47,
    (LORD_HOWE, LH_FALL): 49,
}


@pytest.mark.parametrize("expression", ["*/30 * * * *", "0 */30 * * * *"])
@pytest.mark.parametrize(("zone", "day", "kind"), TRANSITIONS)
def test_every_half_hour_follows_absolute_time(
    zone: str, day: date, kind: str, expression: str
) -> None:
    found = fires_on(expression, zone, day)
    assert len(found) == HALF_HOURS[zone, day]
    start, _ = day_bounds(zone, day)
    assert found[0] == start
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(found))
    assert found == brute_force(zone, day, lambda w: w.minute % 30 == 0)


@pytest.mark.parametrize(
    ("zone", "day", "hourly", "at_half_past"),
    [
        (BERLIN, BERLIN_SPRING, 23, 23),
        (BERLIN, BERLIN_FALL, 25, 25),
        (NEW_YORK, NY_SPRING, 23, 23),
        (NEW_YORK, NY_FALL, 25, 25),
        (LORD_HOWE, LH_SPRING, 23, 24),  # 02:00 is skipped, 02:30 exists
        (LORD_HOWE, LH_FALL, 24, 25),  # only 01:30-02:00 repeats
    ],
)
@pytest.mark.parametrize("six_fields", [False, True], ids=["5-field", "6-field"])
def test_wildcard_hour_matches_every_instant_of_the_local_wall_clock(
    zone: str, day: date, hourly: int, at_half_past: int, six_fields: bool
) -> None:
    top, half = "0 * * * *", "30 * * * *"
    if six_fields:
        top, half = six(top), six(half)
    found_top = fires_on(top, zone, day)
    found_half = fires_on(half, zone, day)
    assert len(found_top) == hourly
    assert len(found_half) == at_half_past
    assert found_top == brute_force(zone, day, lambda w: w.minute == 0)
    assert found_half == brute_force(zone, day, lambda w: w.minute == 30)


def test_wildcard_hour_repeated_wall_time_fires_in_both_folds() -> None:
    found = fires_on("30 * * * *", BERLIN, BERLIN_FALL)
    assert utc(2025, 10, 26, 0, 30) in found  # 02:30 CEST
    assert utc(2025, 10, 26, 1, 30) in found  # 02:30 CET


def test_wildcard_hour_skipped_wall_time_does_not_fire() -> None:
    found = fires_on("30 * * * *", BERLIN, BERLIN_SPRING)
    assert utc(2025, 3, 30, 0, 30) in found  # 01:30 CET
    assert utc(2025, 3, 30, 1, 30) in found  # 03:30 CEST
    assert utc(2025, 3, 30, 1, 0) not in found  # nothing invented at the end of the gap


def test_wildcard_minute_in_a_fixed_hour_follows_absolute_time() -> None:
    found = fires_on("*/15 2 * * *", BERLIN, BERLIN_FALL)
    assert found == [utc(2025, 10, 26, h, m) for h in (0, 1) for m in (0, 15, 30, 45)]
    assert fires_on("*/15 2 * * *", BERLIN, BERLIN_SPRING) == []


def test_every_second_across_a_fold() -> None:
    schedule = CronSchedule.parse("* * * * * *", BERLIN)
    start = utc(2025, 10, 26, 0, 59, 58)
    assert schedule.fires(start, 4) == [start + timedelta(seconds=n) for n in (1, 2, 3, 4)]


def test_every_second_across_a_gap() -> None:
    schedule = CronSchedule.parse("* * * * * *", LORD_HOWE)
    start = utc(2025, 10, 4, 15, 29, 58)
    assert schedule.fires(start, 4) == [start + timedelta(seconds=n) for n in (1, 2, 3, 4)]


@pytest.mark.parametrize(("zone", "day", "kind"), TRANSITIONS)
def test_every_five_minutes_from_any_moment(zone: str, day: date, kind: str) -> None:
    schedule = CronSchedule.parse("*/5 * * * *", zone)
    start, end = day_bounds(zone, day)
    moment = start + timedelta(seconds=30)
    while moment < end:
        assert schedule.next_after(moment) == moment + timedelta(seconds=270), moment
        moment += timedelta(minutes=5)


@pytest.mark.parametrize("six_fields", [False, True], ids=["5-field", "6-field"])
def test_moment_in_other_zone_inside_a_fold(six_fields: bool) -> None:
    expression = six("*/10 * * * *") if six_fields else "*/10 * * * *"
    schedule = CronSchedule.parse(expression, NEW_YORK)
    first_pass = datetime(2025, 11, 2, 1, 55, tzinfo=ZoneInfo(NEW_YORK))  # EDT, 05:55Z
    assert schedule.next_after(first_pass) == utc(2025, 11, 2, 6, 0)  # 01:00 EST
    second_pass = first_pass.replace(fold=1)  # EST, 06:55Z
    assert schedule.next_after(second_pass) == utc(2025, 11, 2, 7, 0)  # 02:00 EST


@pytest.mark.parametrize("micro", [0, 1, 500_000, 999_999])
def test_moment_with_microseconds_at_the_end_of_a_first_pass(micro: int) -> None:
    # 01:59:59.x EDT, the last second before New York falls back to 01:00 EST (06:00Z).
    moment = utc(2025, 11, 2, 5, 59, 59) + timedelta(microseconds=micro)
    assert CronSchedule.parse("* */2 * * *", NEW_YORK).next_after(moment) == utc(2025, 11, 2, 7)
    assert CronSchedule.parse("* * * * *", NEW_YORK).next_after(moment) == utc(2025, 11, 2, 6)
    fixed = CronSchedule.parse("0-59 0-23 * * *", NEW_YORK)
    assert fixed.next_after(moment + timedelta(hours=1)) == utc(2025, 11, 2, 7)  # 02:00 EST
