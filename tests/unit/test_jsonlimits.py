"""JSON nesting measured without recursion: the raw-text scan and the value walk."""

from __future__ import annotations

import enum
import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.core.jsonlimits import LOCATE_CHARS, max_depth_exceeded, too_deep_at, value_too_deep


def depth(value: Any) -> int:
    """The reference: nesting by recursion (fine for the small values drawn here)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\,:ab é'),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\ab'), children, max_size=3)
    ),
    max_leaves=30,
)


@given(value=json_values, limit=st.integers(0, 12), indent=st.sampled_from([None, 1]))
def test_the_scan_and_the_walk_agree_with_recursion(value: Any, limit: int, indent: Any) -> None:
    """Brackets inside strings (escaped quotes too) never count; text and value agree."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    expected = depth(value) > limit
    assert max_depth_exceeded(text, limit) is expected
    assert max_depth_exceeded(text.encode(), limit) is expected
    assert value_too_deep(value, limit) is expected
    assert (too_deep_at(text, limit) is not None) is expected


@pytest.mark.parametrize(
    ("text", "limit", "where"),
    [
        ('{"a": 1}', 1, None),
        ('{"a": [1]}', 1, ("a",)),
        ('{"x": "[[[[", "jobData": [[[1]]]}', 2, ("jobData", 0)),
        ('{"jobs": [{"a": 1}, {"jobData": {"b": [[]]}}]}', 4, ("jobs", 1, "jobData", "b")),
        ('{"k\\u00e9y": [[[]]]}', 2, ("kéy", 0)),
        ('{"a": {"b": 1}, "c": [[{"d": []}]]}', 3, ("c", 0, 0)),
        ("[" * 5000, 64, (0,) * 64),  # not even JSON: still measured, and cheaply
        ('["\\"[[[[", 1]', 1, None),  # an escaped quote does not end a string
        ('["\\\\", [[1]]]', 2, (1, 0)),  # an escaped backslash does not escape the quote
        ('"[[[[', 1, None),  # an unterminated string runs to the end
        ("]]]][[[", 2, ()),  # a stray closer does not hide what follows
    ],
)
def test_the_location_names_the_way_to_where_it_goes_too_deep(
    text: str, limit: int, where: tuple[str | int, ...] | None
) -> None:
    assert too_deep_at(text, limit) == where


def test_values_far_deeper_than_the_interpreter_can_recurse_are_measured() -> None:
    value: Any = 1
    for _ in range(100_000):
        value = {"a": [value]}
    assert value_too_deep(value, 64)
    assert not value_too_deep(value, 200_000)
    text = '{"a":[' * 100_000 + "1" + "]}" * 100_000
    assert max_depth_exceeded(text, 64)
    assert not max_depth_exceeded(text, 200_000)


def test_where_is_looked_for_only_so_far() -> None:
    """The location is searched token by token: past LOCATE_CHARS the text as a whole is
    named (the fast check still refuses it)."""
    late = '{"a": "' + "x" * LOCATE_CHARS + '", "jobData": ' + "[" * 10 + "]" * 10 + "}"
    assert max_depth_exceeded(late, 5)
    assert too_deep_at(late, 5) == ()
    assert too_deep_at(late.replace("x" * LOCATE_CHARS, "x"), 5) == ("jobData", 0, 0, 0, 0)


class Colour(enum.StrEnum):
    RED = "red"


def test_any_mapping_and_sequence_count_and_a_scalar_subclass_does_not() -> None:
    """The scalars of JSON are skipped by their exact type; anything else takes the full
    test (a read-only mapping, a tuple, a str enum)."""
    value = MappingProxyType({"a": (1, [Colour.RED]), "b": "x"})
    assert value_too_deep(value, 2)
    assert not value_too_deep(value, 3)
    assert not value_too_deep(Colour.RED, 0)
