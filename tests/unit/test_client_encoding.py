"""The client's one JSON encoding step (``rota.client.encoding``): Python's types in, the
API's JSON out, a naive datetime refused by the name of where it was."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import PurePosixPath
from uuid import UUID

import orjson
import pytest

import rota
from rota.client.encoding import ClientValueError, encode_json, seconds
from rota.core.errors import ValidationError

ID = UUID("01234567-89ab-cdef-0123-456789abcdef")
NAIVE = datetime(2031, 1, 1, 9, 0)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Report(rota.JobData):
    kind: str
    due: datetime | None = None
    customer: UUID | None = None


@dataclasses.dataclass
class Box:
    id: UUID
    when: datetime


def decoded(value: object) -> object:
    return orjson.loads(encode_json(value))


def test_pythons_types_become_the_apis_json() -> None:
    berlin = timezone(timedelta(hours=1))
    body = {
        "executeAt": datetime(2031, 1, 1, 9, 0, tzinfo=berlin),
        "timeoutSeconds": timedelta(minutes=5),
        "retryDelaySeconds": timedelta(milliseconds=1500),
        "priority": Level.HIGH,
        "jobData": {
            "customer": ID,
            "ids": (ID, ID),
            "colour": Colour.RED,
            "day": date(2031, 1, 1),
            "report": Report(kind="sales", customer=ID),
            "box": Box(ID, datetime(2031, 1, 1, tzinfo=UTC)),
            "amount": Decimal("12.50"),
            "file": PurePosixPath("/data/a.csv"),
            "tags": {"a"},
        },
    }
    assert decoded(body) == {
        "executeAt": "2031-01-01T09:00:00+01:00",
        "timeoutSeconds": 300,
        "retryDelaySeconds": 1.5,
        "priority": 3,
        "jobData": {
            "customer": str(ID),
            "ids": [str(ID), str(ID)],
            "colour": "red",
            "day": "2031-01-01",
            "report": {"kind": "sales", "due": None, "customer": str(ID)},
            "box": {"id": str(ID), "when": "2031-01-01T00:00:00+00:00"},
            "amount": "12.50",
            "file": "/data/a.csv",
            "tags": ["a"],
        },
    }
    assert isinstance(seconds(timedelta(hours=1)), int)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"executeAt": NAIVE}, "execute_at"),
        ({"jobData": {"steps": [{"at": NAIVE}]}}, "job_data.steps[0].at"),
        ({"jobData": Report(kind="x", due=NAIVE)}, "job_data.due"),
        ({"jobData": Box(ID, NAIVE)}, "job_data.when"),
        ({"jobs": [{"jobType": "a"}, {"executeAt": NAIVE}]}, "jobs[1].executeAt"),
    ],
)
def test_a_naive_datetime_is_refused_where_it_is(body: object, field: str) -> None:
    with pytest.raises(ClientValueError) as refused:
        encode_json(body)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: a naive datetime (2031-01-01T09:00:00)")
    assert isinstance(refused.value, ValueError)
    assert isinstance(refused.value, ValidationError)


def test_what_json_cannot_hold_is_refused_by_name() -> None:
    with pytest.raises(ClientValueError, match=r"^job_data\.handler: cannot send a object"):
        encode_json({"jobData": {"handler": object()}})
