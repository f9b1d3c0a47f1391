"""The lists' query filter parser (:mod:`rota.core.query`): tokens, qualifiers, comparisons,
OR of repeated plain values, AND of comparisons, and errors that name the qualifier."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rota.core.errors import ValidationError
from rota.core.models import FailureType, OccurrenceStatus
from rota.core.query import (
    QueryFilter,
    Term,
    narrow_failed,
    narrow_jobs,
    narrow_occurrences,
    parse_query,
    tokenize,
)
from rota.core.records import FailedQuery, JobQuery, OccurrenceQuery

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def occ(text: str) -> QueryFilter:
    return parse_query(text, "occurrences", now=NOW)


def refused(text: str, target: str = "occurrences") -> str:
    with pytest.raises(ValidationError) as caught:
        parse_query(text, target, now=NOW)  # type: ignore[arg-type]
    assert caught.value.field == "q"
    return caught.value.message


def test_tokens_with_quotes_and_escapes() -> None:
    assert tokenize('type:report job:"nightly sales" data.note:"say \\"hi\\""  word') == [
        Term("type", "report"),
        Term("job", "nightly sales", quoted=True),
        Term("data.note", 'say "hi"', quoted=True),
        Term("", "word"),
    ]
    assert tokenize('job:"a, b"')[0].quoted
    assert not tokenize("job:a,b")[0].quoted
    assert tokenize('after:>"2026-11-28 06:00"') == [Term("after", ">2026-11-28 06:00", True)]
    assert tokenize("STATUS:Failed") == [Term("status", "Failed")]


def test_the_example_of_the_docs() -> None:
    found = occ(
        "type:report status:failed data.customer:42 after:2026-11-28 worker:reports "
        'attempt:>1 job:"nightly sales"'
    )
    assert found.job_types == ("report",)
    assert found.statuses == (OccurrenceStatus.FAILED,)
    assert found.data == ((("customer",), ("42",)),)
    assert found.after == datetime(2026, 11, 28, tzinfo=UTC)
    assert found.before is None
    assert found.workers == ("reports",)
    assert (found.attempt_min, found.attempt_max) == (2, None)
    assert found.jobs == ("nightly sales",)
    # a quoted value is taken whole; an unquoted one separates its values at commas
    assert occ('job:"Sales, EU" job:a,b').jobs == ("Sales, EU", "a", "b")


def test_repeated_plain_values_are_ored_and_comparisons_anded() -> None:
    found = occ("status:failed status:timedout,2 type:a type:a attempt:>=2 attempt:<4")
    assert found.statuses == (
        OccurrenceStatus.FAILED,
        OccurrenceStatus.TIMED_OUT,
        OccurrenceStatus.COMPLETED,
    )
    assert found.job_types == ("a",)
    assert (found.attempt_min, found.attempt_max) == (2, 3)
    assert (occ("attempt:2").attempt_min, occ("attempt:2").attempt_max) == (2, 2)
    assert (occ("attempt:2..5").attempt_min, occ("attempt:2..5").attempt_max) == (2, 5)
    both = occ("data.a:1 data.a:2,3 data.b.c:x")
    assert both.data == ((("a",), ("1", "2", "3")), (("b", "c"), ("x",)))


def test_times_dates_instants_relative_and_ranges() -> None:
    day = datetime(2026, 11, 28, tzinfo=UTC)
    assert (occ("time:2026-11-28").after, occ("time:2026-11-28").before) == (
        day,
        day + timedelta(days=1),
    )
    assert occ("time:>2026-11-28").after == day + timedelta(days=1)
    assert occ("time:<=2026-11-28").before == day + timedelta(days=1)
    assert occ("before:2026-11-28").before == day
    assert occ("after:-2h").after == NOW - timedelta(hours=2)
    assert occ("after:-7d before:-1d").before == NOW - timedelta(days=1)
    assert occ("after:2026-11-28T06:00+01:00").after == datetime(2026, 11, 28, 5, tzinfo=UTC)
    ranged = occ("time:2026-11-01..2026-11-28")
    assert (ranged.after, ranged.before) == (datetime(2026, 11, 1, tzinfo=UTC), day + timedelta(1))
    narrowed = occ("after:2026-11-01 after:2026-11-20")
    assert narrowed.after == datetime(2026, 11, 20, tzinfo=UTC)


def test_errors_name_the_qualifier() -> None:
    assert refused("stauts:failed") == 'unknown qualifier "stauts" (did you mean status?)'
    assert "unknown qualifier" in refused("color:red")
    assert "attempt" in refused("attempt:>x")
    assert "'after'" in refused("after:yesterday")
    assert "'status'" in refused("status:exploded")
    assert "'failure'" in refused("failure:meteor", "failed")
    assert "quoted value is not closed" in refused('job:"open')
    assert "has no value" in refused("type:")
    assert "has no qualifier" in refused("report")
    assert "data field" in refused("data.a;drop:1")
    assert "data field" in refused("data.:1")
    assert "did you mean" not in refused("failure:x")  # failure is a Failed qualifier only


def test_each_list_takes_its_own_status_words() -> None:
    failed = parse_query("status:resolved failure:timed-out", "failed", now=NOW)
    assert failed.resolved is True
    assert failed.failure_types == (FailureType.TIMED_OUT,)
    assert parse_query("status:resolved,unresolved", "failed", now=NOW).resolved is None
    jobs = parse_query("status:paused,auto_disabled nightly sales", "jobs", now=NOW)
    assert jobs.job_states == ("paused", "auto-disabled")
    assert jobs.text == "nightly sales"
    assert "'status'" in refused("status:paused", "failed")


def test_empty_text_is_an_empty_filter() -> None:
    assert parse_query(None, "jobs", now=NOW).is_empty
    assert parse_query("   ", "failed", now=NOW).is_empty


def test_narrowing_ands_with_the_other_parameters() -> None:
    base = OccurrenceQuery(
        statuses=(OccurrenceStatus.FAILED, OccurrenceStatus.QUEUED),
        scheduled_after=datetime(2026, 11, 1, tzinfo=UTC),
    )
    narrowed = narrow_occurrences(base, occ("status:failed,running after:2026-10-01 type:x"))
    assert narrowed.statuses == (OccurrenceStatus.FAILED,)
    assert narrowed.scheduled_after == datetime(2026, 11, 1, tzinfo=UTC)
    assert narrowed.job_types == ("x",)
    assert narrow_occurrences(base, occ("status:running")).nothing
    failed = narrow_failed(
        FailedQuery(resolved=False), parse_query("status:resolved", "failed", now=NOW)
    )
    assert failed.nothing
    jobs = narrow_jobs(JobQuery(search="sales"), parse_query("nightly", "jobs", now=NOW))
    assert jobs.search == "sales nightly"
