"""Nested and huge inputs on every route: never a server error, always a problem.

The routes are read from the app itself (its API routes and the dashboard's), so a new route is
fuzzed without a change here. Each gets, as an Admin and with the dashboard's CSRF header (so
that neither authorization nor the CSRF check hides anything):

- a query string and headers over their limits (414, 431);
- each of its query parameters with a huge value (422 naming the parameter);
- if it takes a body: bodies nested 1,000+ levels deep as arrays and as objects, each body
  field nested that deep, each field holding a string of JSON nested that deep, each field
  holding a huge string (422 naming the field), and a body over the size limit, declared or
  streamed (413).

Where a field is involved the 422 must name it; the other fields of the body are valid (a base
body per operation), so that the field under test is what gets refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant

from rota.api.app import create_app
from rota.api.limits import ENVELOPE_LEVELS
from rota.api.security import CSRF_HEADER, api_routes
from rota.core.ids import new_id
from tests.api_client import api_client
from tests.api_runtime import MiniRuntime, sqlite_runtime

PROBLEM: Final = "application/problem+json"
DEEP: Final = 1_200
"""Levels of the nested inputs: past Python's recursion limit (1,000)."""
DEEP_TEXT: Final = 3_000
"""Levels of the JSON held in a string: a field that reads it as JSON refuses its depth, a text
field (a description) its length (6,000 characters: over every text field's limit)."""
MAX_BODY: Final = 64 * 1024
"""The body limit of the app under test (ROTA_API__MAX_BODY_BYTES), small to keep it fast."""
HUGE: Final = 40 * 1024
"""A huge string inside a body that fits the body limit (over any field's length)."""
HUGE_QUERY_VALUE: Final = 5_000
"""A query value under the query string limit (8 KiB) and over any parameter's length."""
MAX_JOB_DATA: Final = 16 * 1024
"""The app's jobData limit, under HUGE."""

BASE_BODIES: Final[dict[str, dict[str, Any]]] = {
    "POST /api/v1/auth/login": {"username": "test-admin", "password": "x"},
    "POST /api/v1/auth/refresh": {},
    "POST /api/v1/auth/logout": {},
    "PUT /api/v1/auth/password": {"currentPassword": "x", "newPassword": "y" * 12},
    "POST /api/v1/jobs": {"jobType": "t", "cronExpression": "@daily"},
    "POST /api/v1/jobs/job": {"jobType": "t", "cronExpression": "@daily"},
    "PUT /api/v1/jobs/job": {"id": "{job_id}"},
    "POST /api/v1/jobs/bulk": {"jobs": [{"jobType": "t", "cronExpression": "@daily"}]},
    "PATCH /api/v1/jobs/{job_id}": {},
    "POST /api/v1/jobs/{job_id}/trigger": {},
    "PUT /api/v1/jobs/{job_id}/dependencies": {"dependsOn": []},
    "POST /api/v1/jobs/{job_id}/backfill": {
        "from": "2026-01-01T00:00:00Z",
        "to": "2026-01-01T01:00:00Z",
    },
    "POST /api/v1/jobs/{job_id}/pause": {"note": "n"},
    "POST /api/v1/jobs/{job_id}/skip": {"count": 1},
    "PUT /api/v1/limits": {"limits": [{"type": "sync", "max": 2}]},
    "PUT /api/v1/limits/{job_type}": {"max": 2},
    "POST /api/v1/jobs/job/trigger": {"jobId": "{job_id}"},
    "POST /api/v1/occurrences/{occurrence_id}/cancel": {},
    "POST /api/v1/occurrences/bulk": {"action": "cancel", "filter": {}, "dryRun": True},
    "POST /api/v1/failed-occurrences/bulk": {"action": "resolve", "filter": {}, "dryRun": True},
    "PUT /api/v1/failed-occurrences/{failed_id}": {},
    "POST /api/v1/admin/dispatcher/stop": {},
    "POST /api/v1/admin/dispatcher/resume": {},
    "POST /api/v1/users": {"username": "someone", "password": "p" * 12, "role": "Viewer"},
    "PATCH /api/v1/users/{user_id}": {},
    "POST /api/v1/api-keys": {"name": "svc", "role": "Viewer"},
    "POST /api/v1/notifications/subscriptions": {
        "name": "ops",
        "events": ["occurrence.failed"],
        "channel": "email",
        "recipients": ["ops@example.com"],
    },
    "PATCH /api/v1/notifications/subscriptions/{subscription_id}": {},
}
"""A valid body per body-taking API operation (``{name}``: a seeded id). A new operation must
get one here (a test says so): the field cases need the rest of the body to be valid."""


@dataclass
class Operation:
    method: str
    path: str
    route: Any
    spec: dict[str, Any] | None
    """The OpenAPI operation; ``None`` for the dashboard's routes (not in the document)."""
    query: list[str] = field(default_factory=list)
    body_fields: list[str] = field(default_factory=list)
    form: bool = False

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A schema with its ``$ref`` followed (and an optional body's non-null member)."""
    while True:
        if "$ref" in schema:
            schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
        else:
            return schema


def _params(dependant: Dependant) -> tuple[list[str], list[str]]:
    """The query and body parameter names of a route's dependant and its dependencies."""
    query: list[str] = []
    body: list[str] = []
    pending = [dependant]
    while pending:
        current = pending.pop()
        query += [param.alias for param in current.query_params if param.alias not in query]
        body += [param.alias for param in current.body_params if param.alias not in body]
        pending.extend(current.dependencies)
    return query, body


def operations(app: FastAPI) -> list[Operation]:
    """Every operation the app serves, API and dashboard, read from its routes."""
    spec = app.openapi()
    found = []
    for route in api_routes(app):
        query, body = _params(route.dependant)
        path = route.path_format
        for method in sorted(set(route.methods or ()) - {"HEAD"}):
            operation = spec["paths"].get(path, {}).get(method.lower())
            op = Operation(method, path, route, operation)
            op.query = query
            if operation is not None and "requestBody" in operation:
                content = operation["requestBody"]["content"]
                media = next(iter(content))
                schema = _resolve(spec, content[media]["schema"])
                op.body_fields = list(schema.get("properties", {})) or ["anything"]
                op.form = media != "application/json"
            elif body:
                op.body_fields = body
                op.form = True
            found.append(op)
    return found


@dataclass
class Fuzz:
    http: httpx.AsyncClient
    seeds: dict[str, str]
    failures: list[str] = field(default_factory=list)

    def url(self, op: Operation) -> str:
        path = op.path
        for name, value in self.seeds.items():
            path = path.replace("{" + name + "}", value)
        return path.replace("{", "").replace("}", "")  # an unknown parameter: a bad value

    def base(self, op: Operation) -> dict[str, Any]:
        base = json.loads(json.dumps(BASE_BODIES.get(op.name, {})))
        for key, value in base.items():
            if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
                base[key] = self.seeds[value[1:-1]]
        return base

    async def send(
        self, op: Operation, *, content: bytes | str | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = {CSRF_HEADER: "1"} | kwargs.pop("headers", {})  # as the dashboard's script
        if content is not None and "content-type" not in headers:
            headers["content-type"] = (
                "application/x-www-form-urlencoded" if op.form else "application/json"
            )
        return await self.http.request(
            op.method, self.url(op), content=content, headers=headers, **kwargs
        )

    def check(
        self,
        op: Operation,
        case: str,
        response: httpx.Response,
        status: int | None = None,
        named: str | None = None,
    ) -> None:
        """A problem JSON with a 4xx status (``status`` if given), naming ``named`` if
        given; anything else is recorded as a failure."""
        where = f"{op.name} [{case}]"
        kind = response.headers.get("content-type", "")
        if response.status_code >= 500 or not 400 <= response.status_code < 500:
            self.failures.append(f"{where}: {response.status_code} {response.text[:200]}")
            return
        if not kind.startswith(PROBLEM):
            self.failures.append(f"{where}: {response.status_code} as {kind!r}")
            return
        body = response.json()
        if status is not None and response.status_code != status:
            self.failures.append(f"{where}: {response.status_code}, not {status}: {body}")
            return
        if named is not None:
            fields = [error.get("field") for error in body.get("errors", [])]
            if not any(f == named or str(f).startswith((f"{named}.", f"{named}[")) for f in fields):
                self.failures.append(f"{where}: 422 names {fields}, not {named!r}: {body}")

    def assert_none_failed(self) -> None:
        assert not self.failures, "\n".join(self.failures)


def nested_array(levels: int) -> str:
    return "[" * levels + "]" * levels


def nested_object(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[MiniRuntime]:
    async with sqlite_runtime(tmp_path) as made:
        made.settings.api.max_body_bytes = MAX_BODY
        made.settings.api.max_job_data_bytes = MAX_JOB_DATA
        made.jobs.max_job_data_bytes = MAX_JOB_DATA
        yield made


@pytest.fixture
async def fuzz(runtime: MiniRuntime) -> AsyncIterator[tuple[Fuzz, list[Operation]]]:
    app = create_app(runtime)
    async with api_client(app, "admin") as http:
        job = await http.post("/api/v1/jobs", json={"jobType": "t", "cronExpression": "@daily"})
        assert job.status_code == 201, job.text
        occurrence = await http.post(f"/api/v1/jobs/{job.json()['id']}/trigger", json={})
        assert occurrence.status_code == 202, occurrence.text
        me = await http.get("/api/v1/auth/me")
        subscription = await http.post(
            "/api/v1/notifications/subscriptions",
            json=BASE_BODIES["POST /api/v1/notifications/subscriptions"],
        )
        assert subscription.status_code == 201, subscription.text
        seeds = {
            "subscription_id": subscription.json()["id"],
            "job_id": job.json()["id"],
            "occurrence_id": occurrence.json()["id"],
            "failed_id": str(new_id()),
            "user_id": me.json()["id"],
        }
        yield Fuzz(http, seeds), operations(app)


def body_operations(ops: list[Operation]) -> Iterator[Operation]:
    return (op for op in ops if op.body_fields)


def test_the_routes_are_found_and_every_api_body_has_a_base() -> None:
    """The fuzzing sees the routes (none found would pass vacuously), the dashboard's too."""
    ops = operations(create_app(None))  # type: ignore[arg-type]
    names = {op.name for op in ops}
    assert len(ops) >= 50
    assert {"POST /api/v1/jobs", "POST /login", "GET /jobs"} <= names
    api_bodies = {op.name for op in body_operations(ops) if op.spec is not None}
    assert api_bodies == set(BASE_BODIES), "give each body-taking operation a valid base body"
    assert any(op.form for op in body_operations(ops))


async def test_query_strings_and_headers_over_their_limits(
    fuzz: tuple[Fuzz, list[Operation]], runtime: MiniRuntime
) -> None:
    f, ops = fuzz
    query_limit = runtime.settings.api.max_query_bytes
    header_limit = runtime.settings.api.max_header_bytes
    for op in ops:
        long_query = await f.send(op, params={"q": "x" * query_limit})
        f.check(op, "query string over the limit", long_query, 414)
        big_header = await f.send(op, headers={"x-fuzz": "x" * header_limit})
        f.check(op, "headers over the limit", big_header, 431)
    f.assert_none_failed()


async def test_huge_query_values_are_a_422_naming_the_parameter(
    fuzz: tuple[Fuzz, list[Operation]],
) -> None:
    f, ops = fuzz
    cases = 0
    for op in ops:
        for name in op.query:
            response = await f.send(op, params={name: "9" * HUGE_QUERY_VALUE})
            f.check(op, f"huge ?{name}=", response, 422, named=name)
            cases += 1
    assert cases >= 30
    f.assert_none_failed()


async def test_bodies_nested_deeply_are_a_422_naming_the_field(
    fuzz: tuple[Fuzz, list[Operation]],
) -> None:
    f, ops = fuzz
    for op in body_operations(ops):
        if op.form:
            continue  # not JSON: the form cases below
        for make in (nested_array, nested_object):
            response = await f.send(op, content=make(DEEP))
            f.check(op, f"body {make.__name__}", response, 422)
        for name in op.body_fields:
            for make in (nested_array, nested_object):
                base = json.dumps(f.base(op) | {name: "__deep__"})
                body = base.replace('"__deep__"', make(DEEP))
                response = await f.send(op, content=body)
                f.check(op, f"{name}: {make.__name__}", response, 422, named=name)
    f.assert_none_failed()


async def test_strings_holding_json_nested_deeply_are_a_422_naming_the_field(
    fuzz: tuple[Fuzz, list[Operation]],
) -> None:
    f, ops = fuzz
    for op in body_operations(ops):
        for name in op.body_fields:
            for make in (nested_array, nested_object):
                text = make(DEEP_TEXT)
                if op.form:
                    response = await f.send(op, data={name: text})
                else:
                    response = await f.send(op, json=f.base(op) | {name: text})
                f.check(op, f"{name}: string of {make.__name__}", response, 422, named=name)
    f.assert_none_failed()


async def test_huge_strings_are_a_422_naming_the_field(
    fuzz: tuple[Fuzz, list[Operation]],
) -> None:
    f, ops = fuzz
    for op in body_operations(ops):
        for name in op.body_fields:
            if op.form:
                response = await f.send(op, data={name: "x" * HUGE})
            else:
                response = await f.send(op, json=f.base(op) | {name: "x" * HUGE})
            f.check(op, f"{name}: huge string", response, 422, named=name)
    f.assert_none_failed()


async def test_bodies_over_the_size_limit_are_a_413(fuzz: tuple[Fuzz, list[Operation]]) -> None:
    f, ops = fuzz
    over = b'{"a": "' + b"x" * MAX_BODY + b'"}'

    async def streamed() -> AsyncIterator[bytes]:
        for start in range(0, len(over), 8192):
            yield over[start : start + 8192]

    for op in body_operations(ops):
        f.check(op, "declared body over the limit", await f.send(op, content=over), 413)
        chunked = await f.http.request(
            op.method, f.url(op), content=streamed(), headers={"content-type": "application/json"}
        )
        f.check(op, "streamed body over the limit", chunked, 413)
    f.assert_none_failed()


async def test_the_body_may_nest_its_envelope_deeper_than_the_data(
    fuzz: tuple[Fuzz, list[Operation]], runtime: MiniRuntime
) -> None:
    """At the limit exactly, jobData is taken in a bulk create (three levels down) and as a
    string; one level more is a 422 on it, by the job service (it knows the field)."""
    f, _ops = fuzz
    limit = runtime.settings.api.max_json_depth
    assert ENVELOPE_LEVELS >= 3
    job = {"jobType": "t", "cronExpression": "@daily"}
    for levels, status in ((limit, 201), (limit + 1, 422)):
        data = json.loads(nested_array(levels))
        bulk = await f.http.post("/api/v1/jobs/bulk", json={"jobs": [job | {"jobData": data}]})
        as_string = await f.http.post("/api/v1/jobs", json=job | {"jobData": nested_array(levels)})
        for response, named in ((bulk, "jobs[0].jobData"), (as_string, "jobData")):
            assert response.status_code == status, response.text
            if status == 422:
                assert [e["field"] for e in response.json()["errors"]] == [named]
                assert f"more than {limit} levels" in response.json()["detail"]


BOUNDED_FORMATS: Final = frozenset({"uuid", "date-time"})
"""String formats whose parser takes a bounded, short input (no maxLength needed)."""


def _unbounded(
    spec: dict[str, Any], schema: dict[str, Any], where: str, seen: frozenset[str]
) -> Iterator[str]:
    """Where ``schema`` takes a string with no length limit or a list with no item limit."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name not in seen:
            yield from _unbounded(spec, spec["components"]["schemas"][name], where, seen | {name})
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for member in schema.get(key, []):
            yield from _unbounded(spec, member, where, seen)
    kind = schema.get("type")
    if kind == "string" and not (
        "maxLength" in schema or "enum" in schema or schema.get("format") in BOUNDED_FORMATS
    ):
        yield where
    if kind == "array":
        if "maxItems" not in schema:
            yield f"{where} (items)"
        yield from _unbounded(spec, schema.get("items", {}), f"{where}[]", seen)
    for name, member in schema.get("properties", {}).items():
        yield from _unbounded(spec, member, f"{where}.{name}", seen)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _unbounded(spec, schema["additionalProperties"], f"{where}.*", seen)


def test_every_text_input_has_a_length_limit() -> None:
    """Every string a client can send (parameter or body field, at any depth) has a maxLength
    and every list a maxItems, as the OpenAPI document describes them: a new field without one
    fails here. Free-form JSON (jobData) has no schema: its limits are the service's."""
    spec = create_app(None).openapi()  # type: ignore[arg-type]
    unbounded = []
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            name = f"{method.upper()} {path}"
            for param in operation.get("parameters", []):
                where = f"{name} {param['in']} {param['name']}"
                unbounded += _unbounded(spec, param["schema"], where, frozenset())
            for content in operation.get("requestBody", {}).get("content", {}).values():
                unbounded += _unbounded(spec, content["schema"], f"{name} body", frozenset())
    assert unbounded == []
