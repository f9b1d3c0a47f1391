"""What every body shares: the base models, the input types (job data, UTC date-times,
short text, tags, seconds) and the reference API's partial-update form."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)
from pydantic.alias_generators import to_camel

from rota.core.errors import ValidationError
from rota.core.jobspec import MAX_SECONDS, as_utc
from rota.core.jsonlimits import MAX_JSON_DEPTH, max_depth_exceeded
from rota.core.models import OccurrenceStatus

MAX_LIMIT = 1000
"""The largest page any list endpoint returns."""
MAX_BULK = 10_000


def parse_json_string(value: Any) -> Any:
    """Job data may come as JSON or, as in the reference API, as a string holding JSON.

    A string that looks like a JSON object or array must parse; any other string is kept as is.
    Its nesting is measured before it is parsed (no recursion): deeper than any setting
    allows (:data:`~rota.core.jsonlimits.MAX_JSON_DEPTH`) is refused here, and the job
    service holds what parses to the configured limit (``ROTA_API__MAX_JSON_DEPTH``).
    """
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        if max_depth_exceeded(value, MAX_JSON_DEPTH):
            raise ValueError(f"holds JSON nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from exc
    return value


def storable_json(value: Any) -> Any:
    """Job data is stored and sent as standard JSON in UTF-8, so what Python's JSON reader
    lets through but cannot be written back is refused here, not in the store: a lone
    surrogate (``"\\ud800"``), ``NaN``, or a number too large for a float (``1e999``)."""
    problem = _plain_json_problem(value)
    if problem is _NOT_PLAIN:  # not only the types a JSON reader makes: ask the writer
        problem = _written_json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


_SURROGATE = "holds text that is not valid Unicode (a lone surrogate)"
_NOT_FINITE = "holds NaN or an infinite number, which JSON cannot carry"
_NOT_PLAIN = "not plain JSON"


def _written_json_problem(value: Any) -> str | None:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
    except UnicodeEncodeError:
        return _SURROGATE
    except ValueError:
        return _NOT_FINITE
    return None


def _plain_json_problem(value: Any) -> str | None:
    """What :func:`_written_json_problem` says of ``value`` when it holds only the types a
    JSON reader makes (dicts with text keys, lists, text, numbers, booleans, ``None``),
    found by one walk without writing it (the job data of a 10,000-job bulk create, issue 19);
    :data:`_NOT_PLAIN` for anything else. No recursion: the depth is bounded elsewhere."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and not _utf8(item):
                return _SURROGATE
        elif kind is dict:
            for key in item:
                if type(key) is not str:
                    return _NOT_PLAIN
                if not key.isascii() and not _utf8(key):
                    return _SURROGATE
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return _NOT_FINITE
        elif not (item is None or kind is int or kind is bool):
            return _NOT_PLAIN
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


JobData = Annotated[Any, BeforeValidator(parse_json_string), AfterValidator(storable_json)]
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def iso_only(value: Any) -> Any:
    """A date-time is ISO-8601 text, as documented: a number (which pydantic would take as
    seconds since 1970, so a stray 5 becomes 1970-01-01T00:00:05Z) is refused."""
    if isinstance(value, int | float):
        raise ValueError(_NOT_ISO)
    # four digits and a dash start a date, never a number: the pattern is not needed
    dated = isinstance(value, str) and value[4:5] == "-" and value[:4].isdigit()
    if isinstance(value, str) and not dated and _NUMBER.fullmatch(value):
        raise ValueError(_NOT_ISO)
    return value


_NOT_ISO = "must be an ISO-8601 date-time such as 2030-01-01T09:00:00Z"


UtcDatetime = Annotated[datetime, BeforeValidator(iso_only), AfterValidator(as_utc)]
"""A date-time in input, ISO-8601 text, as UTC (naive: taken as UTC)."""
NO_NUL = r"^[^\x00]*$"
"""Text may hold any character but NUL (PostgreSQL cannot store it)."""
ShortText = Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL)]
Tag = Annotated[str, StringConstraints(max_length=100, pattern=NO_NUL)]
FilterToken = Annotated[str, StringConstraints(max_length=500)]
"""One value of a repeatable query filter (``?status=0,1&status=failed``)."""
MAX_FILTER_VALUES = 100
"""How many times a query filter may be repeated."""
Seconds = Annotated[float, Field(allow_inf_nan=False, le=MAX_SECONDS)]
"""A duration in seconds: finite, at most 10 years (a date must still follow from it)."""


def split_tags(value: Any) -> Any:
    """Tags come as a list or, as in the reference API, as one string ``"a,b"``."""
    return value.split(",") if isinstance(value, str) else value


Tags = Annotated[
    list[Tag],
    BeforeValidator(split_tags),
    Field(max_length=100, description='A list, or one comma-separated string "a,b".'),
]


def status_name(status: OccurrenceStatus) -> str:
    """``TIMED_OUT`` -> ``TimedOut``: the API's name of a status."""
    return status.name.title().replace("_", "")


class ApiModel(BaseModel):
    """Base of every body: camelCase aliases, field names accepted on input too."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


REDACTED_JOB_DATA = (
    "true: the job data is hidden from the caller (a Viewer, unless ROTA_API__VIEWER_JOB_DATA "
    "is on) and jobData is null; false: jobData is the data as stored (secret references "
    'such as {"$secret": "NAME"} as they were written, never their values).'
)
"""The description of every ``jobDataRedacted`` field."""


class InputModel(ApiModel):
    """Request bodies refuse unknown fields: a typo must not be a silent no-op."""

    model_config = ConfigDict(extra="forbid")


# --- partial updates (jobs and failed occurrences) -------------------------------------------

UPDATE_WRAPPER_KEYS = frozenset({"value", "isUpdated", "is_updated"})


def unwrap_partial_updates(data: Any, keys: frozenset[str] | None = None) -> Any:
    """The reference API's partial-update form, ``{"field": {"value": v, "isUpdated": true}}``,
    as plain ``{"field": v}``. Used by ``PUT /jobs/job`` and ``PUT /failed-occurrences/{id}``
    alike. Only the given ``keys`` (API and field names; ``None``: every key) are looked at.

    A field's value is a wrapper only when it is an object of no other keys than ``value``
    and ``isUpdated`` (or ``is_updated``) with a boolean ``isUpdated``:

    - ``isUpdated`` true with a ``value``: the field changes to that value;
    - ``isUpdated`` false (with or without a ``value``): the field is left out (not changed);
    - ``isUpdated`` true without a ``value``: refused (``ValidationError`` naming the field);
    - a ``value`` with an ``isUpdated`` that is not a boolean: refused the same way.

    Anything else is a plain value, kept as it is (``{"value": 5}`` with no ``isUpdated`` is
    an object, e.g. a job's ``jobData``), for the field's own validation."""
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if (
            (keys is None or key in keys)
            and isinstance(value, dict)
            and value
            and set(value) <= UPDATE_WRAPPER_KEYS
        ):
            flag_key = "isUpdated" if "isUpdated" in value else "is_updated"
            flag = value.get(flag_key)
            if isinstance(flag, bool):
                if not flag:
                    continue
                if "value" not in value:
                    raise ValidationError(
                        f"{key}: isUpdated is true but no value was given", field=key
                    )
                out[key] = value["value"]
                continue
            if flag_key in value and "value" in value:
                raise ValidationError(f"{key}: isUpdated must be true or false", field=key)
        out[key] = value
    return out
