"""Schemathesis over the API's own OpenAPI document: every operation, valid and invalid input.

The embedded runtime (SQLite in a temporary directory, a worker running the test jobs) serves
the app in process; each request goes through ``tests/api_client.py`` signed in as an Admin,
and again with an Admin's API key (``Authorization: Bearer rota_…``).
The operations are read from the OpenAPI document when the tests are collected, so a new
route is tested without a change here. Each operation gets a bounded, derandomized number of
examples (valid data, valid data aimed at seeded records, and invalid data), and every answer
must be no server error, a documented status code and content type, and a body that matches
its documented schema. Invalid input must be refused with a 4xx.

Failures print a curl command that reproduces the request.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import anyio.from_thread
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import SchemathesisConfig

from rota.api.app import create_app
from rota.app.runtime import Runtime
from rota.app.server import prepare
from tests.api_client import api_client, api_key_client, ensure_user
from tests.helpers import eventually, settings_for

MAX_EXAMPLES: Final = int(os.environ.get("ROTA_SCHEMATHESIS_EXAMPLES", "25"))
"""Examples per operation (valid and invalid together); raise it for a deeper run by hand."""
DERANDOMIZE: Final = os.environ.get("ROTA_SCHEMATHESIS_SEED") is None
"""Derandomized (the same examples every run) unless a seed is given for a new search."""
WITHIN: Final = 20.0
"""Upper bound for the seeding to happen (never reached when it works)."""
BASE: Final = "http://rota"

STREAM: Final = "an endless stream (server-sent events): a request never ends"
EXCLUDED: Final[dict[str, str]] = {
    # GET /api/v1/events streams until the client goes away, so it cannot be checked like
    # the others; the events route's own tests cover it (roles, replay, event kinds).
    "GET /api/v1/events": STREAM,
}
"""Operations left out, each with the reason (none silently). Any other operation that
documents a ``text/event-stream`` answer is left out for the same reason."""

CHECKS: Final = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
NEGATIVE_CHECKS: Final = [*CHECKS, negative_data_rejection]
REJECTIONS: Final = [
    *("400", "401", "403", "404", "405", "406", "409", "415", "422", "428", "429", "5xx"),
    *("413", "414", "431"),
]
"""The answers that count as refusing invalid input: schemathesis's own, and the input limits
(a body, a query string, headers over their size: docs/api.md#input-limits). Invalid values
repeated in a query string can pass its 8 KiB before any single one is read."""
CONFIG: Final = SchemathesisConfig.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}}}
)


def _operations() -> dict[str, str | None]:
    """``"METHOD /path"`` of every operation in the OpenAPI document -> why it is left out
    (``None``: tested). An app on no runtime describes itself all the same."""
    spec = create_app(cast(Any, None)).openapi()
    found: dict[str, str | None] = {}
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method not in {"get", "put", "post", "patch", "delete"}:
                continue
            name = f"{method.upper()} {path}"
            kinds = {k for r in operation["responses"].values() for k in r.get("content", {})}
            found[name] = EXCLUDED.get(name, STREAM if "text/event-stream" in kinds else None)
    return found


ALL_OPERATIONS: Final = _operations()
OPERATIONS: Final = [op for op, reason in ALL_OPERATIONS.items() if reason is None]


@dataclass
class Api:
    """The served app as the synchronous tests see it: calls run on the portal's loop."""

    portal: anyio.from_thread.BlockingPortal
    http: httpx.AsyncClient
    key_http: httpx.AsyncClient
    """The same app through an Admin's API key."""
    schema: Any
    seeds: dict[str, str]
    """Path parameter -> the id of a record that exists (a job, an occurrence, …)."""

    def send(self, case: Any, credential: str = "token") -> httpx.Response:
        http = self.key_http if credential == "key" else self.http
        return self.portal.call(_send, http, case)


async def _send(http: httpx.AsyncClient, case: Any) -> httpx.Response:
    """The case as schemathesis would send it, through the signed-in client (whose
    ``Authorization`` wins over a generated one)."""
    kwargs = case.as_transport_kwargs(base_url=BASE)
    headers = {
        k: v
        for k, v in kwargs.get("headers", {}).items()
        if k.lower() not in ("authorization", "x-api-key")
    }
    cookies = kwargs.get("cookies") or {}
    if cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    content: bytes | str | None = None
    if "json" in kwargs:
        content = json.dumps(kwargs["json"])
    elif "data" in kwargs:
        content = kwargs["data"]
    return await http.request(
        kwargs["method"],
        kwargs["url"],
        params=kwargs.get("params"),
        headers=headers,
        content=content,
    )


async def _seed(runtime: Runtime, http: httpx.AsyncClient) -> dict[str, str]:
    """A job with an occurrence, a failed occurrence and a Viewer, for the path parameters
    to name (random ids only ever reach the 404 path)."""
    job = await http.post(
        "/api/v1/jobs", json={"jobType": "it.fast", "cronExpression": "0 0 1 1 *"}
    )
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    occurrence = await http.post(f"/api/v1/jobs/{job_id}/trigger", json={"reason": "seed"})
    assert occurrence.status_code == 202, occurrence.text
    flaky = await http.post(
        "/api/v1/jobs", json={"jobType": "it.flaky", "executeAt": runtime.jobs.now().isoformat()}
    )
    assert flaky.status_code == 201, flaky.text
    failed: list[dict[str, Any]] = []

    async def recorded() -> bool:
        page = await http.get("/api/v1/failed-occurrences", params={"jobId": flaky.json()["id"]})
        failed[:] = page.json()["items"]
        return bool(failed)

    await eventually(recorded, WITHIN, "the failed-occurrence record")
    viewer = await ensure_user(runtime.auth, "viewer")
    return {
        "job_id": job_id,
        "occurrence_id": occurrence.json()["id"],
        "failed_id": failed[0]["id"],
        "user_id": str(viewer.id),
    }


@asynccontextmanager
async def _serve(
    data_dir: Path,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, dict[str, Any], Any]]:
    settings_ = settings_for(data_dir)
    runtime = await prepare(
        settings_, ["tests.integration.runtime_jobs", "tests.integration.failed_jobs"]
    )
    await runtime.start()
    try:
        app = create_app(runtime)
        async with api_client(app, "admin") as http, api_key_client(app, "admin") as key_http:
            seeds = await _seed(runtime, http)
            yield http, key_http, seeds, app.openapi()
    finally:
        await runtime.stop(grace=2)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    data_dir = tmp_path_factory.mktemp("schemathesis")
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(_serve(data_dir)) as (http, key_http, seeds, spec),
    ):
        schema = schemathesis.openapi.from_dict(spec, config=CONFIG)
        yield Api(portal, http, key_http, schema, seeds)


def _path_names(path: str) -> list[str]:
    return re.findall(r"{([^}]+)}", path)


def _cases(api: Api, method: str, path: str) -> st.SearchStrategy[tuple[Any, bool]]:
    """Valid cases, valid cases on the seeded records, and invalid cases (flagged)."""
    operation = api.schema[path][method]
    valid = operation.as_strategy(generation_mode=GenerationMode.POSITIVE)
    invalid = operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)
    strategies = [valid.map(lambda c: (c, False)), invalid.map(lambda c: (c, True))]
    names = _path_names(path)
    if names and all(name in api.seeds for name in names):
        seeded = operation.as_strategy(
            generation_mode=GenerationMode.POSITIVE,
            path_parameters={name: api.seeds[name] for name in names},
        )
        strategies.append(seeded.map(lambda c: (c, False)))
    return st.one_of(strategies)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("credential", ["token", "key"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_operation_conforms(api: Api, operation: str, credential: str) -> None:
    method, path = operation.split(" ", 1)

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=DERANDOMIZE,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(_cases(api, method, path))
    def conforms(drawn: tuple[Any, bool]) -> None:
        case, negative = drawn
        response = api.send(case, credential)
        checks = NEGATIVE_CHECKS if negative else CHECKS
        case.validate_response(response, checks=checks, headers=dict(response.request.headers))

    if not DERANDOMIZE:
        conforms = seed(int(os.environ["ROTA_SCHEMATHESIS_SEED"]))(conforms)
    conforms()


def test_every_operation_is_tested_or_excluded_for_a_stream() -> None:
    """The module sees the operations (a collection that found none would pass vacuously),
    and what it leaves out is only ever an event stream."""
    assert len(OPERATIONS) >= 30
    assert all(op.split(" ", 1)[1].startswith("/api/v1/") for op in ALL_OPERATIONS)
    left_out = {op: reason for op, reason in ALL_OPERATIONS.items() if reason is not None}
    assert set(left_out.values()) <= {STREAM}, left_out
    assert all(op.startswith("GET ") for op in left_out), left_out
