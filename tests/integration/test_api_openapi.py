"""The OpenAPI document is complete: every /api/v1 operation has a summary, names its role,
and lists the problems it can answer with (401/403 unless public, 422 when it takes input,
413 when it takes a body). New routes are checked without a change here."""

from __future__ import annotations

from typing import Any, cast

import pytest
from fastapi import APIRouter, Body, FastAPI, Query

from rota.api.app import API_PREFIX, PUBLIC_PATHS, create_app
from rota.api.problems import PROBLEM_JSON, document_input_errors, problem_json_only
from rota.api.security import ViewerUser, document_roles

ROLES = {"public", "Viewer", "Operator", "Admin"}
METHODS = {"get", "put", "post", "patch", "delete"}


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    """The app's document (it describes itself without a runtime)."""
    return create_app(cast(Any, None)).openapi()


def assert_problem_response(operation: dict[str, Any], status: str, where: object) -> None:
    response = operation["responses"].get(status)
    assert response is not None, (where, f"{status} is not documented")
    assert set(response["content"]) == {PROBLEM_JSON}, (where, status)
    assert response["content"][PROBLEM_JSON]["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_every_operation_has_a_summary_a_role_and_its_problems(spec: dict[str, Any]) -> None:
    found = operations(spec)
    assert len(found) >= 30
    ids = [operation["operationId"] for _, _, operation in found]
    assert len(ids) == len(set(ids))
    for method, path, operation in found:
        where = f"{method.upper()} {path}"
        assert path.startswith(f"{API_PREFIX}/"), where
        assert operation.get("summary", "").strip(), (where, "no summary")
        role = operation.get("x-rota-role")
        assert role in ROLES, (where, role)
        assert operation["description"].startswith(f"**Role:** {role.replace('public', 'none')}")
        assert (role == "public") == (path in PUBLIC_PATHS), where
        if role != "public":
            assert operation["security"], where
            assert_problem_response(operation, "401", where)
            assert_problem_response(operation, "403", where)
        if operation.get("parameters") or "requestBody" in operation:
            assert_problem_response(operation, "422", where)
        if method in {"post", "put", "patch"}:
            assert_problem_response(operation, "413", where)
        assert_problem_response(operation, "414", where)  # the query string limit
        assert_problem_response(operation, "431", where)  # the header limit
        for status in operation["responses"]:
            if status[0] in "45" and not (status == "503" and path.endswith("/health/ready")):
                assert_problem_response(operation, status, where)
        assert any(status.startswith("2") for status in operation["responses"]), where


def test_fastapi_default_validation_schemas_are_gone(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    assert "Problem" in schemas
    assert "HTTPValidationError" not in schemas
    assert "ValidationError" not in schemas


def test_a_route_that_documents_no_errors_gets_them() -> None:
    """The mechanism that keeps the document complete for routes added later."""
    app = FastAPI()
    router = APIRouter()

    @router.post("/things", summary="Make a thing")
    async def make(user: ViewerUser, name: str = Body(embed=True)) -> dict[str, str]:
        return {"name": name}

    @router.get("/things", summary="List things")
    async def things(user: ViewerUser, q: str = Query("")) -> list[str]:
        return [q]

    @router.get("/ping", summary="Ping")
    async def ping() -> str:
        return "pong"

    app.include_router(router, prefix=API_PREFIX)
    spec = app.openapi()
    assert "HTTPValidationError" in spec["components"]["schemas"]  # FastAPI's default 422
    document_roles(app, spec, frozenset({f"{API_PREFIX}/ping"}))
    problem_json_only(document_input_errors(spec))

    make_op = spec["paths"][f"{API_PREFIX}/things"]["post"]
    for status in ("401", "403", "413", "422"):
        assert_problem_response(make_op, status, "POST /things")
    list_op = spec["paths"][f"{API_PREFIX}/things"]["get"]
    assert_problem_response(list_op, "422", "GET /things")
    assert "413" not in list_op["responses"]
    ping_op = spec["paths"][f"{API_PREFIX}/ping"]["get"]
    assert ping_op["x-rota-role"] == "public"
    assert set(ping_op["responses"]) == {"200", "414", "431"}  # every request has limits
    assert "HTTPValidationError" not in spec["components"]["schemas"]
