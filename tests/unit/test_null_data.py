"""One rule for job data on both sides: no data (``null``) means the handler's default. The
SDK hands the handler what ``null`` means for its data type, and the server accepts ``null``
at create exactly when the worker would run it (checked against the schema the SDK
publishes), so a job the server takes never fails ``invalid_data`` for having no data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

import rota
from rota.core.errors import ValidationError
from rota.services.dataschema import DataSchemas


class Defaults(rota.JobData):
    kind: str = "sales"
    copies: int = 1


class Required(rota.JobData):
    kind: str


class Shape(TypedDict):
    name: str


@dataclass
class Options:
    verbose: bool = False


REFUSED = object()
"""The worker fails it ``invalid_data``; the server refuses it at create."""

# annotation -> what a handler annotated so gets for null data
CASES: list[tuple[str, Any, Any]] = [
    ("dict", dict, {}),
    ("dict[str, Any]", dict[str, Any], {}),
    ("dict | None", dict[str, Any] | None, None),
    ("JobData with defaults", Defaults, Defaults()),
    ("JobData | None", Required | None, None),
    ("dataclass with defaults", Options, Options()),
    ("JobData with a required field", Required, REFUSED),
    ("TypedDict with a required key", Shape, REFUSED),
    ("list", list[int], REFUSED),
    ("str", str, REFUSED),
]


def _definition(annotation: Any) -> rota.JobDefinition[Any, Any]:
    def handler(ctx: rota.JobContext, data: Any) -> None: ...

    handler.__annotations__["data"] = annotation
    return rota.job("null.case")(handler)


@pytest.mark.parametrize(
    ("annotation", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_null_data_is_the_handlers_default_on_both_sides(annotation: Any, expected: Any) -> None:
    definition = _definition(annotation)
    description = {"schema": definition.data_schema()}
    schemas = DataSchemas()
    if expected is not REFUSED:
        assert definition.parse_data(None) == expected
        schemas.check("null.case", description, None)  # the server takes it too
    else:
        with pytest.raises(ValidationError) as worker:
            definition.parse_data(None)
        assert worker.value.field == "jobData"
        assert "no data was given" in worker.value.message
        with pytest.raises(ValidationError) as server:
            schemas.check("null.case", description, None)
        assert (server.value.field or "").startswith("jobData")


def test_a_model_with_a_required_field_names_it_when_data_is_null() -> None:
    description = {"schema": _definition(Required).data_schema()}
    with pytest.raises(ValidationError) as info:
        DataSchemas().check("null.case", description, None)
    assert info.value.field == "jobData.kind"
