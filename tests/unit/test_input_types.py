"""The request bodies' input checks: their quick paths say what the full checks say."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rota.api.schemas.common import (
    _NOT_PLAIN,
    _plain_json_problem,
    _written_json_problem,
    iso_only,
    storable_json,
)

READ_FROM_JSON: list[Any] = [
    None,
    True,
    0,
    10**40,  # arbitrary size: JSON carries it
    -1.5,
    "",
    "plain",
    "é 漢字 😀",
    {"n": 5},
    {"a": [1, {"b": [None, "x", 2.0]}], "é": {}},
    [[[[]]]],
    "\ud800",
    ["ok", {"deep": ["\udfff"]}],
    {"\ud800": 1},
    {"ok": {"\udc00x": None}},
    math.nan,
    [1, {"a": math.inf}],
    {"b": -math.inf},
]


@pytest.mark.parametrize("value", READ_FROM_JSON, ids=repr)
def test_the_walk_finds_what_writing_the_json_finds(value: Any) -> None:
    assert _plain_json_problem(value) == _written_json_problem(value)


@pytest.mark.parametrize(
    "value", [(1, 2), {1: "a"}, {"a": (1,)}, [b"x"], {"a": {"b": 1.0j}}], ids=repr
)
def test_what_no_json_reader_makes_is_left_to_the_writer(value: Any) -> None:
    assert _plain_json_problem(value) is _NOT_PLAIN


def test_storable_json_refuses_with_the_writers_reasons() -> None:
    assert storable_json({"a": [1, "b"]}) == {"a": [1, "b"]}
    assert storable_json((1, "x")) == (1, "x")  # not plain, and the writer takes it
    with pytest.raises(ValueError, match="lone surrogate"):
        storable_json({"a": ["\ud800"]})
    with pytest.raises(ValueError, match="NaN"):
        storable_json([math.nan])
    with pytest.raises(ValueError, match="lone surrogate"):
        storable_json(("\ud800",))  # through the writer


@pytest.mark.parametrize(
    "text", ["5", " 5 ", "-662", "+1.5", ".5", "1e-5", "  1e-56789012", "1234e-5", "12.3e4 "]
)
def test_a_number_is_no_date_time_even_as_text(text: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601"):
        iso_only(text)
    with pytest.raises(ValueError, match="ISO-8601"):
        iso_only(float(text))


@pytest.mark.parametrize(
    "text", ["2030-01-01T09:00:00Z", "2030-01-01", "2030-01-01T09:00:00.123456+02:00", "now"]
)
def test_date_times_pass_to_the_parser(text: str) -> None:
    assert iso_only(text) == text
