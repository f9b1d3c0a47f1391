"""The client's one JSON encoding step: Python's types in, the API's JSON out.

Every request body the client sends goes through :func:`encode_json`: aware datetimes (ISO
8601 with their offset), dates, times, timedeltas (seconds: whole seconds as an integer),
UUIDs, enums (their value), pydantic models (``rota.JobData`` included: by alias, in JSON
mode), dataclasses, sets and tuples, Decimals and paths (as text), at any depth (a UUID inside
``job_data``). A naive datetime is refused with :class:`ClientValueError` naming where it was:
the server would read it as UTC, which is rarely what a naive ``datetime.now()`` meant.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any, Final
from uuid import UUID

import orjson
from pydantic import BaseModel

from rota.core.errors import ValidationError

_OPTIONS: Final = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


class ClientValueError(ValidationError, ValueError):
    """A value given to the client cannot be sent (a naive datetime, a type JSON cannot
    hold); ``field`` names the parameter, with the path inside it (``job_data.when``)."""


class _Refused(Exception):
    """Raised out of orjson's ``default``: the value at fault, found again with its path."""


def seconds(value: timedelta) -> int | float:
    """A timedelta in seconds: an integer when whole (``every`` takes whole seconds only)."""
    total = value.total_seconds()
    return int(total) if total.is_integer() else total


def _default(value: Any) -> Any:
    """What orjson cannot write by itself, as something it can (called again on the result)."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise _Refused(value)
        return value.isoformat()
    if isinstance(value, date | time):  # orjson hands these over too (passthrough)
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python", by_alias=True)
    if isinstance(value, timedelta):
        return seconds(value)
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, Decimal | PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise _Refused(value)


def encode_json(value: Any, *, name: str = "body") -> bytes:
    """``value`` as JSON bytes (see the module's doc); :class:`ClientValueError` names the
    parameter (``name``, or the body's key: ``execute_at``, ``job_data.when``) at fault."""
    try:
        return orjson.dumps(value, default=_default, option=_OPTIONS)
    except TypeError as exc:  # orjson wraps what the default raised
        path = _find(value, name) or name
        cause = exc.__cause__ if isinstance(exc.__cause__, _Refused) else None
        raise _error(path, cause.args[0] if cause is not None else None, exc) from None


def aware(moment: datetime, name: str) -> datetime:
    """``moment`` if it has a time zone; else :class:`ClientValueError` naming ``name``."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise _error(name, moment, None)
    return moment


def _error(path: str, bad: Any, exc: Exception | None) -> ClientValueError:
    if isinstance(bad, datetime):
        message = (
            f"{path}: a naive datetime ({bad.isoformat()}) has no time zone; give an aware one, "
            "e.g. datetime.now(UTC) or dt.replace(tzinfo=ZoneInfo('Europe/Berlin'))"
        )
    elif bad is not None:
        message = f"{path}: cannot send a {type(bad).__name__} as JSON"
    else:
        message = f"{path}: cannot send as JSON: {exc}"
    return ClientValueError(message, field=path)


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _children(value: Any) -> Any:
    """The items inside a container (``None``: nothing to look into; ``False``: a value no
    JSON can hold)."""
    if isinstance(value, datetime):
        return False if value.tzinfo is None or value.utcoffset() is None else None
    if value is None or isinstance(
        value, str | int | float | bool | date | time | UUID | enum.Enum | timedelta | Decimal
    ):
        return None
    if isinstance(value, PurePath):
        return None
    if isinstance(value, Mapping):
        return value.items()
    if isinstance(value, list | tuple | set | frozenset):
        return enumerate(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python", by_alias=True).items()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def _find(value: Any, path: str, depth: int = 0) -> str | None:
    """The path of the first value :func:`_default` refuses inside ``value`` (top-level body
    keys in the snake_case the caller wrote them in)."""
    items = _children(value)
    if items is False:
        return path
    if items is None or depth > 64:
        return None
    for key, item in items:
        if isinstance(key, int):
            inner = f"{path}[{key}]"
        elif depth == 0 and path == "body":
            inner = _snake(str(key))
        else:
            inner = f"{path}.{key}"
        found = _find(item, inner, depth + 1)
        if found is not None:
            return found
    return None
