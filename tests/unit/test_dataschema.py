"""Job data against its job type's data schema (``services/dataschema.py``): the field each
misfit names, what is not checked, and the cost bounds."""

from __future__ import annotations

from typing import Any

import pytest

import rota
from rota.core.errors import ValidationError
from rota.sdk.registry import JobRegistry
from rota.services.dataschema import DataSchemas, field_of


class Item(rota.JobData):
    name: str


class Order(rota.JobData):
    kind: str
    items: tuple[Item, ...] = ()
    copies: int = 1


async def _handler(ctx: rota.JobContext, data: Order) -> None:
    return None


DESCRIPTION = dict(JobRegistry([rota.job("order")(_handler)]).describe())["order"]


def misfits(
    data: Any, description: Any = DESCRIPTION, schemas: DataSchemas | None = None
) -> list[str]:
    try:
        (schemas or DataSchemas()).check("order", description, data)
    except ValidationError as exc:
        first = exc.field
        fields = [e.field or "" for e in exc.errors]
    else:
        return []
    assert first == fields[0]
    return fields


def test_each_misfit_names_its_place_in_the_data() -> None:
    assert misfits({"kind": "a", "items": [{"name": "x"}, {"name": 2}, {}]}) == [
        "jobData.items[1].name",
        "jobData.items[2].name",  # required: the missing property is named
    ]
    assert misfits({"copies": "two"}) == ["jobData.kind", "jobData.copies"]
    assert misfits([1]) == ["jobData"]
    closed = {"schema": {"type": "object", "properties": {"a": {}}, "additionalProperties": False}}
    assert misfits({"a": 1, "url": "x"}, closed) == ["jobData.url"]  # not allowed: named
    assert misfits({"kind": "a"}) == []
    assert field_of("jobs[3].jobData", ["a", 0, "b"]) == "jobs[3].jobData.a[0].b"


def test_no_data_is_checked_as_an_empty_object_only_when_fields_are_required() -> None:
    assert misfits(None) == ["jobData.kind"]
    optional = {"schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}
    assert misfits(None, optional) == []


@pytest.mark.parametrize(
    "description",
    [
        None,  # no live worker declares the type
        {"schema": None},  # an untyped handler
        {"schema": {"$ref": "https://example.com/schema.json"}},  # nothing is fetched
        {"schema": {"type": "string", "pattern": "(?=a)b"}},  # lookaround: not linear-time
        {"schema": {"type": "object", "required": ["k"], "description": "x" * 70_000}},  # too big
    ],
)
def test_what_cannot_be_checked_is_accepted(description: Any) -> None:
    assert misfits({"any": "thing"}, description) == []


def test_validators_are_compiled_once_per_schema_content() -> None:
    schemas = DataSchemas()
    for _ in range(3):
        copy = {"schema": dict(DESCRIPTION["schema"])}  # a new object, same content
        assert misfits({}, copy, schemas) == ["jobData.kind"]
    assert schemas.compiled == 1
