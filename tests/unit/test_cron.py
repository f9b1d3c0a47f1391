"""Cron syntax, refusals and the public API of ``rota.core.cron`` (UTC unless a test says)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from rota.core.cron import CronSchedule, parse_cached
from rota.core.errors import CronError, ValidationError

START = datetime(2025, 1, 1, tzinfo=UTC)  # a Wednesday


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(expression: str, count: int = 4, after: datetime = START) -> list[datetime]:
    return CronSchedule.parse(expression).fires(after, count)


# --------------------------------------------------------------------------- syntax


def test_every_minute_five_fields() -> None:
    assert fires("* * * * *", 3) == [
        utc(2025, 1, 1, 0, 1),
        utc(2025, 1, 1, 0, 2),
        utc(2025, 1, 1, 0, 3),
    ]


def test_six_fields_read_seconds_first() -> None:
    schedule = CronSchedule.parse("30 15 10 * * *")
    assert schedule.has_seconds
    assert schedule.fires(START, 2) == [utc(2025, 1, 1, 10, 15, 30), utc(2025, 1, 2, 10, 15, 30)]


def test_five_fields_fire_at_second_zero() -> None:
    schedule = CronSchedule.parse("15 10 * * *")
    assert not schedule.has_seconds
    assert schedule.next_after(START) == utc(2025, 1, 1, 10, 15, 0)


def test_every_second() -> None:
    assert fires("* * * * * *", 3) == [START + timedelta(seconds=n) for n in (1, 2, 3)]


def test_second_steps() -> None:
    assert fires("*/20 * * * * *", 4) == [
        utc(2025, 1, 1, 0, 0, 20),
        utc(2025, 1, 1, 0, 0, 40),
        utc(2025, 1, 1, 0, 1, 0),
        utc(2025, 1, 1, 0, 1, 20),
    ]


def test_lists() -> None:
    assert fires("0 5,17,9 * * *", 4) == [
        utc(2025, 1, 1, 5),
        utc(2025, 1, 1, 9),
        utc(2025, 1, 1, 17),
        utc(2025, 1, 2, 5),
    ]


def test_ranges() -> None:
    assert fires("0 22-23 * * *", 3) == [
        utc(2025, 1, 1, 22),
        utc(2025, 1, 1, 23),
        utc(2025, 1, 2, 22),
    ]


def test_one_value_range_without_step_is_that_value() -> None:
    assert fires("5-5 0 * * *", 2) == [utc(2025, 1, 1, 0, 5), utc(2025, 1, 2, 0, 5)]


def test_range_with_step() -> None:
    assert fires("0 0 1-10/4 * *", 4) == [
        utc(2025, 1, 5),
        utc(2025, 1, 9),
        utc(2025, 2, 1),
        utc(2025, 2, 5),
    ]


def test_value_with_step_runs_to_the_end_of_the_field() -> None:
    assert fires("5/20 0 * * *", 4) == [
        utc(2025, 1, 1, 0, 5),
        utc(2025, 1, 1, 0, 25),
        utc(2025, 1, 1, 0, 45),
        utc(2025, 1, 2, 0, 5),
    ]


def test_last_value_with_step_is_that_value() -> None:
    assert fires("59/5 0 * * *", 2) == [utc(2025, 1, 1, 0, 59), utc(2025, 1, 2, 0, 59)]


def test_weekday_value_with_step_stops_at_saturday() -> None:
    # 5/1 = Friday and Saturday; the Sunday alias 7 is not part of it.
    found = fires("0 0 * * 5/1", 4)
    assert [d.strftime("%a") for d in found] == ["Fri", "Sat", "Fri", "Sat"]


def test_month_and_weekday_names_any_case() -> None:
    expected = fires("0 9 * 1,7 1-5", 6)
    assert fires("0 9 * JAN,jul Mon-FRI", 6) == expected
    assert [d.weekday() for d in expected] == [2, 3, 4, 0, 1, 2]  # Wed 1 Jan …


def test_names_in_ranges_with_steps() -> None:
    assert fires("0 0 1 jan-dec/3 *", 4) == [
        utc(2025, 4, 1),
        utc(2025, 7, 1),
        utc(2025, 10, 1),
        utc(2026, 1, 1),
    ]


@pytest.mark.parametrize("sunday", ["0", "7", "SUN", "sun"])
def test_sunday_is_0_or_7(sunday: str) -> None:
    assert fires(f"0 0 * * {sunday}", 2) == [utc(2025, 1, 5), utc(2025, 1, 12)]


def test_last_day_of_month() -> None:
    assert fires("0 0 L * *", 3, after=utc(2024, 1, 15)) == [
        utc(2024, 1, 31),
        utc(2024, 2, 29),
        utc(2024, 3, 31),
    ]
    assert fires("0 0 L 2 *", 1) == [utc(2025, 2, 28)]


def test_last_day_in_a_list() -> None:
    assert fires("0 0 15,L * *", 3) == [utc(2025, 1, 15), utc(2025, 1, 31), utc(2025, 2, 15)]


def test_last_weekday_of_month() -> None:
    # 5L = the last Friday of the month.
    assert fires("0 0 * * 5L", 3) == [utc(2025, 1, 31), utc(2025, 2, 28), utc(2025, 3, 28)]
    assert fires("0 0 * * FRIL", 1) == [utc(2025, 1, 31)]


def test_nth_weekday_of_month() -> None:
    # 1#2 = the second Monday of the month.
    assert fires("0 0 * * 1#2", 3) == [utc(2025, 1, 13), utc(2025, 2, 10), utc(2025, 3, 10)]
    assert fires("0 0 * * mon#2", 3) == fires("0 0 * * 1#2", 3)


def test_fifth_weekday_only_in_months_that_have_one() -> None:
    assert fires("0 0 * * 6#5", 2) == [utc(2025, 3, 29), utc(2025, 5, 31)]


def test_day_and_weekday_restricted_combine_with_or() -> None:
    # The 13th OR any Friday.
    assert fires("0 0 13 * 5", 4) == [
        utc(2025, 1, 3),
        utc(2025, 1, 10),
        utc(2025, 1, 13),
        utc(2025, 1, 17),
    ]


def test_day_or_weekday_starting_with_star_combine_with_and() -> None:
    # Odd days that are Mondays (Debian cron: a field starting with * makes it AND).
    found = fires("0 0 */2 * 1", 4)
    assert all(d.day % 2 == 1 and d.weekday() == 0 for d in found)
    assert found[0] == utc(2025, 1, 13)


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
        ("  @Hourly ", "0 * * * *"),
    ],
)
def test_macros(macro: str, equivalent: str) -> None:
    schedule = CronSchedule.parse(macro)
    assert schedule.expression == macro
    assert not schedule.has_seconds
    assert schedule.fires(START, 3) == fires(equivalent, 3)


def test_macro_fire_times() -> None:
    assert fires("@yearly", 2) == [utc(2026, 1, 1), utc(2027, 1, 1)]
    assert fires("@weekly", 1) == [utc(2025, 1, 5)]


def test_question_mark_is_a_star() -> None:
    assert fires("0 12 ? * MON", 3) == fires("0 12 * * MON", 3)
    assert fires("0 12 1 * ?", 3) == fires("0 12 1 * *", 3)
    # As a star, ``?`` makes day and weekday combine with AND.
    assert fires("0 12 ? * 1", 2) == [utc(2025, 1, 6, 12), utc(2025, 1, 13, 12)]


def test_whitespace_between_fields_is_free() -> None:
    assert fires("  0\t12  * * *  ", 2) == fires("0 12 * * *", 2)


# --------------------------------------------------------------------------- API


def test_next_after_is_strictly_after() -> None:
    schedule = CronSchedule.parse("0 * * * *")
    first = schedule.next_after(START)
    assert first == utc(2025, 1, 1, 1)
    assert schedule.next_after(first) == utc(2025, 1, 1, 2)
    assert schedule.next_after(first - timedelta(microseconds=1)) == first


def test_next_after_with_microseconds() -> None:
    schedule = CronSchedule.parse("* * * * * *")
    assert schedule.next_after(utc(2025, 1, 1, 0, 0, 0) + timedelta(microseconds=999_999)) == utc(
        2025, 1, 1, 0, 0, 1
    )


def test_next_after_accepts_any_zone_and_returns_utc() -> None:
    schedule = CronSchedule.parse("0 12 * * *")
    moment = datetime(2025, 6, 1, 13, 30, tzinfo=timezone(timedelta(hours=2)))  # 11:30 UTC
    result = schedule.next_after(moment)
    assert result == utc(2025, 6, 1, 12)
    assert result.tzinfo is UTC


def test_time_zone_shifts_fires() -> None:
    schedule = CronSchedule.parse("0 9 * * *", "Asia/Tokyo")
    assert schedule.time_zone == "Asia/Tokyo"
    # 09:00 in Tokyo is 00:00 UTC; START itself is not "after" START.
    assert schedule.fires(START - timedelta(seconds=1), 2) == [utc(2025, 1, 1), utc(2025, 1, 2)]
    assert schedule.next_after(START).astimezone(ZoneInfo("Asia/Tokyo")).hour == 9


def test_naive_moment_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CronSchedule.parse("* * * * *").next_after(datetime(2025, 1, 1))


def test_fires_counts() -> None:
    schedule = CronSchedule.parse("*/10 * * * *")
    assert schedule.fires(START, 0) == []
    assert len(schedule.fires(START, 5)) == 5


def test_attributes_and_equality() -> None:
    a = CronSchedule.parse("0 0 * * *", "Europe/Berlin")
    b = CronSchedule.parse("0 0 * * *", "Europe/Berlin")
    assert (a.expression, a.time_zone, a.has_seconds) == ("0 0 * * *", "Europe/Berlin", False)
    assert a == b
    assert hash(a) == hash(b)
    assert a != CronSchedule.parse("0 0 * * *", "UTC")
    assert CronSchedule.parse("0 0 * * *").time_zone == "UTC"


def test_parse_cached_memoises() -> None:
    first = parse_cached("17 3 * * *", "Europe/Paris")
    assert parse_cached("17 3 * * *", "Europe/Paris") is first
    assert first.next_after(START) == utc(2025, 1, 1, 2, 17)


def test_parse_cached_does_not_cache_refusals() -> None:
    for _ in range(2):
        with pytest.raises(CronError):
            parse_cached("61 * * * *", "UTC")


def test_schedule_is_immutable() -> None:
    schedule = CronSchedule.parse("* * * * *")
    with pytest.raises(AttributeError):
        schedule.expression = "0 0 * * *"  # type: ignore[misc]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("expression", "part", "message"),
    [
        ("61 * * * *", "minute", "minute: 61 is out of range 0-59"),
        ("0 24 * * *", "hour", "hour: 24 is out of range 0-23"),
        ("0 0 0 * *", "day", "day: 0 is out of range 1-31"),
        ("0 0 32 * *", "day", "day: 32 is out of range 1-31"),
        ("0 0 * 13 *", "month", "month: 13 is out of range 1-12"),
        ("0 0 * 0 *", "month", "month: 0 is out of range 1-12"),
        ("0 0 * * 8", "weekday", "weekday: 8 is out of range 0-7"),
        ("60 * * * * *", "second", "second: 60 is out of range 0-59"),
        ("x * * * * *", "second", "second: 'x' is not a number"),
        ("0 0 * FOO *", "month", "month: 'FOO' is not a number or a name"),
        ("0 0 * * MONDAY", "weekday", "weekday: 'MONDAY' is not a number or a name"),
        ("0 JAN * * *", "hour", "hour: 'JAN' is not a number"),
        ("-1 * * * *", "minute", "minute: a value is missing"),
        ("1,,2 * * * *", "minute", "minute: a list item is empty"),
        ("1, * * * *", "minute", "minute: a list item is empty"),
        ("10-5 * * * *", "minute", "minute: range 10-5 is reversed (start 10 > end 5)"),
        ("0 0 * * FRI-MON", "weekday", "weekday: range FRI-MON is reversed"),
        ("1-2-3 * * * *", "minute", "minute: '2-3' is not a number"),
        ("*/0 * * * *", "minute", "minute: step '0' is out of range 1-59"),
        ("*/60 * * * *", "minute", "minute: step '60' is out of range 1-59"),
        ("0 */24 * * *", "hour", "hour: step '24' is out of range 1-23"),
        ("*/x * * * *", "minute", "minute: step 'x' is out of range 1-59"),
        ("*/ * * * *", "minute", "minute: step '' is out of range 1-59"),
        ("5-5/10 * * * *", "minute", "minute: range 5-5 with a step is degenerate; write 5"),
        ("0 0 3-3/2 * *", "day", "day: range 3-3 with a step is degenerate; write 3"),
        ("0 0 15W * *", "day", "day: W (nearest weekday) is not supported"),
        ("0 0 LW * *", "day", "day: W (nearest weekday) is not supported"),
        ("0 0 W * *", "day", "day: W (nearest weekday) is not supported"),
        ("0 0 L-2 * *", "day", "day: 'L-2': L must stand alone in the day field"),
        ("0 0 5L * *", "day", "day: '5L': L must stand alone in the day field"),
        (
            "0 0 * * L",
            "weekday",
            "weekday: L needs a weekday before it (e.g. 5L for the last Friday)",
        ),
        ("0 0 * * 9L", "weekday", "weekday: 9 is out of range 0-7"),
        ("0 0 * * 5L/2", "weekday", "weekday: '5L/2': a step cannot follow L or #"),
        ("0 0 * * L5", "weekday", "weekday: 'L5': L must follow a weekday"),
        ("0 0 * * 1-5L", "weekday", "weekday: '1-5' is not a number or a name"),
        ("0 0 * * 1#6", "weekday", "weekday: #6 is out of range 1-5"),
        ("0 0 * * 1#0", "weekday", "weekday: #0 is out of range 1-5"),
        ("0 0 * * 1#", "weekday", "weekday: # is out of range 1-5"),
        ("0 0 * * #2", "weekday", "weekday: a value is missing"),
        ("0 0 * * 8#2", "weekday", "weekday: 8 is out of range 0-7"),
        ("0 0 1#2 * *", "day", "day: '1#2' is not a number"),
        ("0 L * * *", "hour", "hour: 'L' is not a number"),
        ("0 0 1,? * *", "day", "day: ? must stand alone"),
        ("0 0 31 2 *", "day", "day: 31 never occurs in month 2"),
        ("0 0 30 FEB *", "day", "day: 30 never occurs in month FEB"),
        ("0 0 31 4,6,9,11 *", "day", "day: 31 never occurs in month 4,6,9,11"),
    ],
)
def test_refused_field(expression: str, part: str, message: str) -> None:
    with pytest.raises(CronError) as info:
        CronSchedule.parse(expression)
    assert info.value.field == "cronExpression"
    assert info.value.part == part
    assert info.value.message.startswith(message)
    assert isinstance(info.value, ValidationError)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "the cron expression is empty"),
        ("   ", "the cron expression is empty"),
        (
            "* * * *",
            "expected 5 fields (minute hour day month weekday) or 6 with seconds first, got 4",
        ),
        ("* * * * * * *", "expected 5 fields"),
        ("@reboot", "unknown or unsupported macro '@reboot' (known: @annually, @daily,"),
        ("@daily 0", "unknown or unsupported macro '@daily 0'"),
        ("@every 5m", "unknown or unsupported macro"),
        # Day 31 of February that is also a fifth Monday: valid fields that can never fire.
        ("0 0 */15 2 1#5", "the cron expression never fires"),
    ],
)
def test_refused_whole_expression(expression: str, message: str) -> None:
    with pytest.raises(CronError) as info:
        CronSchedule.parse(expression)
    assert info.value.field == "cronExpression"
    assert info.value.part is None
    assert info.value.message.startswith(message)


def test_day_31_is_fine_when_weekday_is_restricted_too() -> None:
    # 31 OR Monday: the Mondays of February still fire.
    assert fires("0 0 31 2 MON", 1) == [utc(2025, 2, 3)]


def test_non_string_expression_is_refused() -> None:
    with pytest.raises(CronError) as info:
        CronSchedule.parse(5)  # type: ignore[arg-type]
    assert info.value.field == "cronExpression"


@pytest.mark.parametrize(
    "zone",
    [
        "Mars/Olympus",
        "",
        "europe/berlin",
        "Europe",
        "Europe/Berlin ",
        "../etc/passwd",
        "/etc/localtime",
        "localtime",
        "x" * 300,
    ],
)
def test_unknown_time_zone_is_refused(zone: str) -> None:
    with pytest.raises(CronError) as info:
        CronSchedule.parse("* * * * *", zone)
    assert info.value.field == "timeZone"
    assert info.value.part is None
    assert info.value.message == f"unknown time zone {zone!r}"


@pytest.mark.parametrize(
    "zone", ["UTC", "Etc/UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "US/Eastern"]
)
def test_known_time_zones(zone: str) -> None:
    schedule = CronSchedule.parse("0 0 * * *", zone)
    local = schedule.next_after(START).astimezone(ZoneInfo(zone))
    assert (local.hour, local.minute) == (0, 0)


def test_bad_expression_is_reported_before_bad_zone() -> None:
    with pytest.raises(CronError) as info:
        CronSchedule.parse("61 * * * *", "Mars/Olympus")
    assert info.value.field == "cronExpression"
