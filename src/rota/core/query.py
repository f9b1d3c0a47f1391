"""The query filter of the lists (``?q=`` in the API, ``--query`` in the CLI, the query field
of the dashboard): ``type:report status:failed data.customer:42 after:2026-11-28
worker:reports attempt:>1 job:"nightly sales"``.

Pure: text in, a :class:`QueryFilter` out (or a :class:`~rota.core.errors.ValidationError`
naming the qualifier, with ``field="q"``). The stores take the filter's values through the
query records (:class:`~rota.core.records.OccurrenceQuery`, ``FailedQuery``, ``JobQuery``);
:func:`narrow_occurrences`, :func:`narrow_failed` and :func:`narrow_jobs` add a filter to a
query built from the other parameters.

Syntax: terms separated by spaces, each ``qualifier:value``; a value with spaces is quoted
(``job:"nightly sales"``, ``\\"`` for a quote inside). Terms of different qualifiers must all
hold (AND). A qualifier repeated with plain values matches any of them (OR: ``status:failed
status:timedout``; a comma does the same: ``status:failed,timedout``); comparisons narrow
(AND: ``attempt:>1 attempt:<4``, ``after:… before:…``). Words without a qualifier are the
jobs' text search (Jobs only).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal

from rota.core.errors import ValidationError
from rota.core.models import FailureType, OccurrenceStatus
from rota.core.records import FailedQuery, JobQuery, OccurrenceQuery

ListName = Literal["occurrences", "failed", "jobs"]

FIELD = "q"
"""The API field every error names."""

MAX_TERMS = 50
MAX_VALUES = 100
"""Values of one qualifier (OR-ed) at most."""
MAX_DATA_DEPTH = 5

_COMMON = ("type", "job", "tag", "worker", "data.")
QUALIFIERS: dict[str, tuple[str, ...]] = {
    "occurrences": (*_COMMON, "status", "attempt", "after", "before", "time"),
    "failed": (*_COMMON, "status", "failure", "attempt", "after", "before", "time"),
    "jobs": (*_COMMON, "status", "after", "before", "time"),
}
"""The qualifiers each list takes (``data.`` stands for any ``data.<field>``)."""

HELP: dict[str, str] = {
    "type": "job type: type:report",
    "job": 'job name or id: job:"nightly sales"',
    "tag": "job tag: tag:billing",
    "worker": "worker group: worker:reports",
    "status": "status: status:failed",
    "failure": "failure type: failure:timed_out",
    "attempt": "attempt number: attempt:>1, attempt:2..4",
    "after": "from this time: after:2026-11-28, after:-2h",
    "before": "until this time: before:2026-11-29T06:00",
    "time": "time range: time:2026-11-28, time:>=-7d",
    "data.": "job data field: data.customer:42",
}
"""One line per qualifier: the suggestions the dashboard and the docs show."""

JOB_STATUSES = ("active", "inactive", "paused", "auto-disabled")
FAILED_STATUSES = ("resolved", "unresolved")

_STATUS_NAMES: dict[str, OccurrenceStatus] = {s.name.lower(): s for s in OccurrenceStatus}
_STATUS_NAMES |= {s.name.lower().replace("_", ""): s for s in OccurrenceStatus}
_STATUS_NAMES |= {s.name.lower().replace("_", "-"): s for s in OccurrenceStatus}

_DATA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")
_RELATIVE = re.compile(r"-(\d{1,6})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_COMPARISON = re.compile(r"(>=|<=|>|<|=)?(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Term:
    """One ``key:value`` of the text, as written (the value unquoted)."""

    key: str
    value: str
    quoted: bool = False
    """The value was written in quotes: taken whole (a comma in it separates nothing)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryFilter:
    """What a query asks for; empty fields ask nothing. Values of one field are OR-ed;
    fields are AND-ed."""

    job_types: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    """Job display names (exact) or job ids, as written."""
    tags: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    statuses: tuple[OccurrenceStatus, ...] = ()
    failure_types: tuple[FailureType, ...] = ()
    resolved: bool | None = None
    job_states: tuple[str, ...] = ()
    """Jobs: any of :data:`JOB_STATUSES`."""
    attempt_min: int | None = None
    attempt_max: int | None = None
    after: datetime | None = None
    """``after <= time``."""
    before: datetime | None = None
    """``time < before``."""
    data: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    """``(path, values)``: the job data field at ``path`` equals one of ``values`` (compared
    as text: ``42`` matches the number 42 and the string ``"42"``)."""
    text: str | None = None
    """Jobs: words without a qualifier (the text search)."""

    @property
    def is_empty(self) -> bool:
        return self == QueryFilter()


@dataclass(slots=True)
class _Builder:
    values: dict[str, list[str]] = field(default_factory=dict)
    plain: dict[str, list[str]] = field(default_factory=dict)
    """The values of each qualifier, split at commas unless quoted."""
    data: dict[tuple[str, ...], list[str]] = field(default_factory=dict)
    words: list[str] = field(default_factory=list)


def tokenize(text: str) -> list[Term]:
    """The terms of ``text``: ``key:value`` with the value optionally double-quoted (``\\"``
    and ``\\\\`` inside quotes), or a bare word (key ``""``)."""
    terms: list[Term] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        start = i
        key = ""
        while i < n and not text[i].isspace() and text[i] not in ':"':
            i += 1
        if i < n and text[i] == ":":
            key = text[start:i]
            i += 1
            if not key:
                raise ValidationError(
                    f"a term has no qualifier before ':' (at {start})", field=FIELD
                )
        else:
            i = start
        value, i, quoted = _value(text, i)
        if key and not value:
            raise ValidationError(f"qualifier {key!r} has no value", field=FIELD)
        terms.append(Term(key.lower(), value, quoted))
    if len(terms) > MAX_TERMS:
        raise ValidationError(f"at most {MAX_TERMS} terms in a query", field=FIELD)
    return terms


def _value(text: str, i: int) -> tuple[str, int, bool]:
    """The value starting at ``i``, where it ends, and whether it held quotes. A comparison
    sign may precede quotes (``after:>"2026-11-28 06:00"``)."""
    n = len(text)
    out: list[str] = []
    quoted = False
    while i < n and not text[i].isspace():
        if text[i] != '"':
            out.append(text[i])
            i += 1
            continue
        i += 1
        quoted = True
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                i += 1
            out.append(text[i])
            i += 1
        if i >= n:
            raise ValidationError("a quoted value is not closed (missing '\"')", field=FIELD)
        i += 1
    return "".join(out), i, quoted


def parse_query(text: str | None, target: ListName, *, now: datetime) -> QueryFilter:
    """The filter ``text`` asks of the ``target`` list; ``now`` (aware) anchors relative
    times (``after:-2h``). Empty text: an empty filter."""
    if not text or not text.strip():
        return QueryFilter()
    built = _Builder()
    allowed = QUALIFIERS[target]
    for term in tokenize(text):
        if not term.key:
            if target != "jobs":
                raise ValidationError(
                    f"{term.value!r} has no qualifier (write qualifier:value; "
                    f"qualifiers: {_names(allowed)})",
                    field=FIELD,
                )
            built.words.append(term.value)
            continue
        if term.key.startswith("data."):
            if "data." not in allowed:
                raise _unknown(term.key, allowed)
            path = _data_path(term.key)
            built.data.setdefault(path, []).extend(_parts(term))
            continue
        if term.key not in allowed:
            raise _unknown(term.key, allowed)
        built.values.setdefault(term.key, []).append(term.value)
        built.plain.setdefault(term.key, []).extend(_parts(term))
    return _compile(built, target, now)


def _names(allowed: Iterable[str]) -> str:
    return ", ".join("data.<field>" if q == "data." else q for q in allowed)


def _unknown(key: str, allowed: Sequence[str]) -> ValidationError:
    names = [q for q in allowed if q != "data."]
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else f" (qualifiers: {_names(allowed)})"
    return ValidationError(f"unknown qualifier {key!r}{hint}".replace("'", '"'), field=FIELD)


def _data_path(key: str) -> tuple[str, ...]:
    path = tuple(key.split(".")[1:])
    if not path or len(path) > MAX_DATA_DEPTH or not all(_DATA_NAME.fullmatch(p) for p in path):
        raise ValidationError(
            f"qualifier {key!r}: a data field is data.<name> (letters, digits, _ and -; "
            f"up to {MAX_DATA_DEPTH} levels: data.customer.id)",
            field=FIELD,
        )
    return path


def _parts(term: Term) -> list[str]:
    return [term.value] if term.quoted else _split(term.value)


def _split(value: str) -> list[str]:
    parts = [v.strip() for v in value.split(",")]
    return [v for v in parts if v] or [value]


def _plain(built: _Builder, key: str) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for part in built.plain.get(key, ()):
        found[part] = None
    if len(found) > MAX_VALUES:
        raise ValidationError(f"qualifier {key!r}: at most {MAX_VALUES} values", field=FIELD)
    return tuple(found)


def _compile(built: _Builder, target: ListName, now: datetime) -> QueryFilter:
    result = QueryFilter(
        job_types=_plain(built, "type"),
        jobs=_plain(built, "job"),
        tags=_plain(built, "tag"),
        workers=_plain(built, "worker"),
        data=tuple((path, tuple(dict.fromkeys(v))) for path, v in built.data.items()),
        text=" ".join(built.words) or None,
    )
    statuses = _plain(built, "status")
    if target == "occurrences":
        result = replace(result, statuses=tuple(_status(s) for s in statuses))
    elif target == "failed":
        result = replace(result, resolved=_resolved(statuses))
        failures = tuple(_failure(v) for v in _plain(built, "failure"))
        result = replace(result, failure_types=failures)
    else:
        result = replace(result, job_states=tuple(_job_state(s) for s in statuses))
    low, high = _attempts(built.values.get("attempt", ()))
    after, before = _times(built, now)
    return replace(result, attempt_min=low, attempt_max=high, after=after, before=before)


def _choice(key: str, value: str, choices: Iterable[str]) -> ValidationError:
    return ValidationError(
        f"qualifier {key!r}: unknown value {value!r} (one of {', '.join(choices)})", field=FIELD
    )


def _status(value: str) -> OccurrenceStatus:
    if value.isdigit() and int(value) in set(OccurrenceStatus):
        return OccurrenceStatus(int(value))
    try:
        return _STATUS_NAMES[value.lower()]
    except KeyError:
        raise _choice("status", value, (s.name.lower() for s in OccurrenceStatus)) from None


def _resolved(values: Sequence[str]) -> bool | None:
    wanted = set()
    for value in values:
        if value.lower() not in FAILED_STATUSES:
            raise _choice("status", value, FAILED_STATUSES)
        wanted.add(value.lower() == "resolved")
    return wanted.pop() if len(wanted) == 1 else None


def _failure(value: str) -> FailureType:
    try:
        return FailureType(value.lower().replace("-", "_"))
    except ValueError:
        raise _choice("failure", value, (t.value for t in FailureType)) from None


def _job_state(value: str) -> str:
    state = value.lower().replace("_", "-").replace("autodisabled", "auto-disabled")
    if state not in JOB_STATUSES:
        raise _choice("status", value, JOB_STATUSES)
    return state


def _split_comparison(key: str, value: str) -> tuple[str, str, str | None]:
    """``(op, low, high)``: ``>=2`` -> ``(">=", "2", None)``; ``2..4`` -> ``("..", "2", "4")``."""
    match = _COMPARISON.fullmatch(value)
    op, rest = (match.group(1) or "=", match.group(2)) if match else ("=", value)
    if op == "=" and ".." in rest:
        low, _, high = rest.partition("..")
        if not low or not high:
            raise ValidationError(f"qualifier {key!r}: a range is low..high", field=FIELD)
        return "..", low, high
    if not rest:
        raise ValidationError(f"qualifier {key!r} has no value after {op!r}", field=FIELD)
    return op, rest, None


def _attempts(values: Sequence[str]) -> tuple[int | None, int | None]:
    """The attempt range ``[low, high]`` all ``values`` allow (AND)."""
    low: int | None = None
    high: int | None = None
    for value in values:
        op, a, b = _split_comparison("attempt", value)
        first, second = _count(a), _count(b) if b is not None else None
        bounds = {
            "=": (first, first),
            ">": (first + 1, None),
            ">=": (first, None),
            "<": (None, first - 1),
            "<=": (None, first),
            "..": (first, second),
        }[op]
        if bounds[0] is not None:
            low = bounds[0] if low is None else max(low, bounds[0])
        if bounds[1] is not None:
            high = bounds[1] if high is None else min(high, bounds[1])
    return low, high


def _count(text: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise ValidationError(
            f"qualifier 'attempt': {text!r} is not a whole number (attempt:2, attempt:>1, "
            "attempt:2..4)",
            field=FIELD,
        )
    return int(text)


def _times(built: _Builder, now: datetime) -> tuple[datetime | None, datetime | None]:
    """``[after, before)`` every time term allows (AND)."""
    after: datetime | None = None
    before: datetime | None = None

    def narrow(low: datetime | None, high: datetime | None) -> None:
        nonlocal after, before
        if low is not None:
            after = low if after is None else max(after, low)
        if high is not None:
            before = high if before is None else min(before, high)

    for value in built.values.get("after", ()):
        narrow(_instant("after", value, now)[0], None)
    for value in built.values.get("before", ()):
        narrow(None, _instant("before", value, now)[0])
    for value in built.values.get("time", ()):
        op, a, b = _split_comparison("time", value)
        start, end = _instant("time", a, now)
        if op == "..":
            narrow(start, _instant("time", b or "", now)[1])
        else:
            narrow(
                *{
                    "=": (start, end),
                    ">": (end, None),
                    ">=": (start, None),
                    "<": (None, start),
                    "<=": (None, end),
                }[op]
            )
    return after, before


def _instant(key: str, text: str, now: datetime) -> tuple[datetime, datetime]:
    """The span ``text`` names: a date is its whole day (UTC), a time its microsecond, a
    relative time (``-2h``, ``-7d``) that instant before ``now``."""
    relative = _RELATIVE.fullmatch(text)
    if relative:
        at = now - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
        return at, at + timedelta(microseconds=1)
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            start = datetime.combine(day, time(), tzinfo=UTC)
            return start, start + timedelta(days=1)
        at = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        raise ValidationError(
            f"qualifier {key!r}: {text!r} is not a time (2026-11-28, 2026-11-28T06:00, "
            "2026-11-28T06:00+01:00, or -30m, -2h, -7d, -1w)",
            field=FIELD,
        ) from None
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at, at + timedelta(microseconds=1)


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return a if b is None else b if a is None else max(a, b)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    return a if b is None else b if a is None else min(a, b)


def narrow_occurrences(query: OccurrenceQuery, found: QueryFilter) -> OccurrenceQuery:
    """``query`` (from the list's other parameters) AND ``found``."""
    statuses = query.statuses
    if found.statuses:
        statuses = tuple(s for s in statuses if s in found.statuses) if statuses else found.statuses
        if not statuses:
            return replace(query, nothing=True)
    return replace(
        query,
        statuses=statuses,
        scheduled_after=_later(query.scheduled_after, found.after),
        scheduled_before=_earlier(query.scheduled_before, found.before),
        job_types=found.job_types,
        job_refs=found.jobs,
        tags=found.tags,
        worker_ids=found.workers,
        attempt_min=found.attempt_min,
        attempt_max=found.attempt_max,
        data=found.data,
    )


def narrow_failed(query: FailedQuery, found: QueryFilter) -> FailedQuery:
    """``query`` (from the list's other parameters) AND ``found``."""
    types = query.failure_types
    if found.failure_types:
        types = (
            tuple(t for t in types if t in found.failure_types) if types else found.failure_types
        )
        if not types:
            return replace(query, nothing=True)
    resolved = query.resolved
    if found.resolved is not None:
        if resolved is not None and resolved != found.resolved:
            return replace(query, nothing=True)
        resolved = found.resolved
    return replace(
        query,
        failure_types=types,
        resolved=resolved,
        failed_after=_later(query.failed_after, found.after),
        failed_before=_earlier(query.failed_before, found.before),
        job_types=found.job_types,
        job_refs=found.jobs,
        tags=found.tags,
        worker_ids=found.workers,
        attempt_min=found.attempt_min,
        attempt_max=found.attempt_max,
        data=found.data,
    )


def narrow_jobs(query: JobQuery, found: QueryFilter) -> JobQuery:
    """``query`` (from the list's other parameters) AND ``found``."""
    search = " ".join(t for t in (query.search, found.text) if t) or None
    return replace(
        query,
        search=search,
        job_types=found.job_types,
        job_refs=found.jobs,
        tags=found.tags,
        worker_ids=found.workers,
        states=found.job_states,
        created_after=found.after,
        created_before=found.before,
        data=found.data,
    )
