"""Every API call and body shape the reference documents, replayed as written (issue 16).

The calls and shapes are extracted from ``reference_calls.md`` (verbatim excerpts of the
reference's docs, see that file) by :func:`extract`, which reads them the way the reference
writes them: ``curl`` commands (flattened or not: method, URL, ``-d`` body), "Client sends
POST /api/v1/…" steps, fenced ``json`` samples under a ``### Name`` heading, and a bare JSON
body after a line ending in "API):". Each is replayed against the embedded runtime (API,
scheduler and a worker running the reference's sample job type) and must answer 2xx with the
documented shape. Where the reference directory is present, the same extraction over the
reference files themselves must give exactly what the excerpts give.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.app.runtime import Runtime
from rota.app.settings import SchedulerSettings
from tests.api_client import PASSWORD, username_of
from tests.helpers import RuntimeFactory, eventually

EXCERPTS = Path(__file__).with_name("reference_calls.md")
REFERENCE_FILES = (
    "milvaion-architecture.md",
    "milvaion-core-concepts.md",
    "milvaion-reliability-patterns.md",
)
"""The reference documents with a REST API (the others describe systems without one)."""
WITHIN = 15.0


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    """As documented: ``/api/v1/failed-occurrences/{id}``."""
    body: Any = None


@dataclass(frozen=True)
class Shape:
    name: str
    """The heading (``Job``) or the line that introduces it."""
    body: Any


# --- extraction -------------------------------------------------------------------------------

_FLOW = re.compile(r"(?<![\w-])(GET|POST|PUT|PATCH|DELETE) (/api/v1/\S+)")
_FENCED_JSON = re.compile(r"^```json\n(.*?)^```", re.M | re.S)
_HEADING = re.compile(r"^#{2,4} (.+?)\s*$", re.M)


def _json(text: str) -> Any:
    """The reference's JSON; its elision ``[...]`` stands for a list."""
    return json.loads(text.replace("[...]", "[]"))


def _curl(lines: list[str]) -> Call:
    """A ``curl`` command (its lines, joined by backslash-newlines, a quoted body spanning
    lines) as a call."""
    argv = shlex.split("\n".join(lines).replace("\\\n", " "))
    method, url, body = None, "", None
    args = iter(argv[1:])
    for arg in args:
        if arg == "-X":
            method = next(args)
        elif arg == "-H":
            next(args)
        elif arg == "-d":
            body = _json(next(args))
        elif arg.startswith("http"):
            url = arg
    path = "/" + url.split("://", 1)[1].split("/", 1)[1]
    return Call(method or ("POST" if body is not None else "GET"), path, body)


def _curls(text: str) -> list[Call]:
    calls: list[Call] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("curl "):
            continue
        command: list[str] = []
        for part in lines[i:]:
            command.append(part)
            if not part.endswith("\\") and "\n".join(command).count("'") % 2 == 0:
                break
        calls.append(_curl(command))
    return calls


def _bare_bodies(text: str) -> list[Shape]:
    """A JSON object on the lines after one ending in "API):" (a body the reference shows
    for an API call, unfenced)."""
    shapes: list[Shape] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.rstrip().endswith("API):") or lines[i + 1].strip() != "{":
            continue
        depth, body = 0, []
        for part in lines[i + 1 :]:
            body.append(part)
            depth += part.count("{") - part.count("}")
            if depth == 0:
                break
        shapes.append(Shape(line.strip(), _json("\n".join(body))))
    return shapes


def extract(text: str) -> tuple[list[Call], list[Shape]]:
    """The calls and the body shapes ``text`` documents, in order."""
    calls = [Call(m[1], m[2]) for m in _FLOW.finditer(text)] + _curls(text)
    shapes: list[Shape] = []
    for block in _FENCED_JSON.finditer(text):
        headings = [h[1] for h in _HEADING.finditer(text, 0, block.start())]
        shapes.append(Shape(headings[-1], _json(block[1])))
    return calls, shapes + _bare_bodies(text)


CALLS, SHAPES = extract(EXCERPTS.read_text(encoding="utf-8"))


def reference_dir() -> Path | None:
    """``ROTA_REFERENCE_DIR``, else a ``shared/reference`` directory above this checkout."""
    if env := os.environ.get("ROTA_REFERENCE_DIR"):
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "reference").is_dir():
            return parent / "shared" / "reference"
    return None


def test_the_excerpts_hold_every_call_and_shape_of_the_reference() -> None:
    found = reference_dir()
    if found is None:
        pytest.skip("the reference documents are not in reach (set ROTA_REFERENCE_DIR)")
    text = "\n".join((found / name).read_text(encoding="utf-8") for name in REFERENCE_FILES)
    assert extract(text) == (CALLS, SHAPES)
    for other in sorted(set(p.name for p in found.glob("*.md")) - set(REFERENCE_FILES)):
        body = (found / other).read_text(encoding="utf-8")
        assert "/api/" not in body, other
        assert "curl " not in body, other


def test_the_extraction_finds_what_the_reference_documents() -> None:
    assert [(c.method, c.path) for c in CALLS] == [
        ("POST", "/api/v1/jobs/job"),
        ("POST", "/api/v1/auth/login"),
        ("GET", "/api/v1/failed-occurrences"),
        ("PUT", "/api/v1/failed-occurrences/{id}"),
        ("POST", "/api/v1/jobs/job/trigger"),
        ("PUT", "/api/v1/jobs/job"),
    ]
    assert [s.name for s in SHAPES] == [
        "Job",
        "Occurrence",
        "Global (API):",
        "Per-Job (via Dashboard or API):",
    ]


# --- the runtime ------------------------------------------------------------------------------


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.sweeper_interval_seconds": 0.5}
    modules = ["tests.integration.reference_jobs", "tests.integration.failed_jobs"]
    return await runtime_factory(overrides, modules)


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def shape(name: str) -> Any:
    return next(s.body for s in SHAPES if s.name == name)


def substituted(value: Any, **names: str) -> Any:
    """The documented body with its placeholders (``YOUR_JOB_ID``) filled in."""
    text = json.dumps(value)
    for name, replacement in names.items():
        text = text.replace(name, replacement)
    return json.loads(text)


READ_ONLY = frozenset(
    {"id", "auditInfo", "avarageDuration", "successRate", "totalExecutions", "version"}
    | {"jobVersions"}
)
"""The sample job's fields that a job shows but a create does not take (Rota refuses them)."""
NOT_SHOWN = {"Job": {"jobVersions"}, "Occurrence": set[str]()}
"""Documented fields Rota shows elsewhere (docs/api.md, "The reference's forms"): a job's
versions are ``GET /jobs/{id}/versions``."""


def assert_shape(actual: dict[str, Any], documented: dict[str, Any], name: str) -> None:
    missing = set(documented) - set(actual) - NOT_SHOWN[name]
    assert not missing, f"{name} lacks the documented {sorted(missing)}"


async def a_job(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"jobType": "GenerateReportJob", "cronExpression": "0 0 3 * * *"} | fields
    job: dict[str, Any] = ok(await client.post("/api/v1/jobs", json=body), 201)
    return job


def five_minute_fire(text: str) -> bool:
    moment = datetime.fromisoformat(text)
    return moment.minute % 5 == 0 and moment.second == 0 and moment.microsecond == 0


# --- the calls --------------------------------------------------------------------------------


async def create_the_sample_job(client: httpx.AsyncClient, call: Call, rt: Runtime) -> None:
    """The reference's create (architecture, "Request Flow") with its sample job (core concepts,
    "Job"): executeAt and a cron, tags as a comma string, jobData as a JSON string,
    timeoutMinutes, a workerId."""
    sample = shape("Job")
    body = {k: v for k, v in sample.items() if k not in READ_ONLY}
    job = ok(await client.request(call.method, call.path, json=body), 201)
    assert_shape(job, sample, "Job")
    for same in (
        "displayName",
        "description",
        "workerId",
        "jobType",
        "executeAt",
        "cronExpression",
        "isActive",
        "concurrentExecutionPolicy",
        "timeoutMinutes",
    ):
        assert job[same] == sample[same], same
    assert job["tags"] == sample["tags"].split(",")
    assert job["jobData"] == json.loads(sample["jobData"])
    # executeAt (2025) is past: the cron's next fire after now
    assert five_minute_fire(job["nextRunAt"])
    assert datetime.fromisoformat(job["nextRunAt"]) > rt.jobs.now()
    assert job["auditInfo"]["creatorUserName"] == username_of("admin")
    assert job["auditInfo"]["lastModificationDate"] is None


async def login(client: httpx.AsyncClient, call: Call, rt: Runtime) -> None:
    """Architecture, "Authentication Flow": the credentials are Rota's login body."""
    credentials = {"username": username_of("admin"), "password": PASSWORD}
    tokens = ok(await client.request(call.method, call.path, json=credentials))
    assert tokens["accessToken"]
    assert tokens["refreshToken"]


async def failed_record(client: httpx.AsyncClient, rt: Runtime) -> dict[str, Any]:
    job = await a_job(client, jobType="it.flaky", cronExpression=None, executeAt=_now(rt))

    async def recorded() -> list[dict[str, Any]]:
        page = ok(await client.get("/api/v1/failed-occurrences", params={"jobId": job["id"]}))
        items: list[dict[str, Any]] = page["items"]
        return items

    await eventually(recorded, WITHIN, "the failed-occurrence record")
    [record] = await recorded()
    return record


async def list_failed(client: httpx.AsyncClient, call: Call, rt: Runtime) -> None:
    """Reliability patterns, "Viewing Failed Jobs"."""
    record = await failed_record(client, rt)
    page = ok(await client.request(call.method, call.path))
    assert record["id"] in [item["id"] for item in page["items"]]


async def resolve_failed(client: httpx.AsyncClient, call: Call, rt: Runtime) -> None:
    """Reliability patterns, "Resolving Failed Jobs": the {value, isUpdated} form."""
    record = await failed_record(client, rt)
    path = call.path.replace("{id}", record["id"])
    resolved = ok(await client.request(call.method, path, json=call.body))
    assert resolved["resolved"] is True
    assert resolved["resolutionNote"] == "Fixed data and requeued manually"
    assert resolved["resolutionAction"] == "Manually resolved"


async def trigger(client: httpx.AsyncClient, call: Call, rt: Runtime) -> None:
    """Reliability patterns, "Manual Retry": the job id in the body, not the path."""
    job = await a_job(client)
    body = substituted(call.body, YOUR_JOB_ID=job["id"])
    occurrence = ok(await client.request(call.method, call.path, json=body), 202)
    assert occurrence["jobId"] == job["id"]
    assert occurrence["triggerReason"] == "Manual retry after fix"


async def re_enable(client: httpx.AsyncClient, call: Call, rt: Runtime) -> None:
    """Reliability patterns, "Re-enabling a Job"."""
    job = await a_job(client, isActive=False)
    body = substituted(call.body, YOUR_JOB_ID=job["id"])
    changed = ok(await client.request(call.method, call.path, json=body))
    assert changed["isActive"] is True
    assert changed["nextRunAt"] is not None


REPLAYS: dict[tuple[str, str], Callable[[httpx.AsyncClient, Call, Runtime], Awaitable[None]]] = {
    ("POST", "/api/v1/jobs/job"): create_the_sample_job,
    ("POST", "/api/v1/auth/login"): login,
    ("GET", "/api/v1/failed-occurrences"): list_failed,
    ("PUT", "/api/v1/failed-occurrences/{id}"): resolve_failed,
    ("POST", "/api/v1/jobs/job/trigger"): trigger,
    ("PUT", "/api/v1/jobs/job"): re_enable,
}


@pytest.mark.parametrize("call", CALLS, ids=[f"{c.method} {c.path}" for c in CALLS])
async def test_each_documented_call_works_as_written(
    client: httpx.AsyncClient, runtime: Runtime, call: Call
) -> None:
    await REPLAYS[(call.method, call.path)](client, call, runtime)


# --- the shapes -------------------------------------------------------------------------------


def _now(rt: Runtime) -> str:
    return rt.jobs.now().isoformat()


async def the_job(client: httpx.AsyncClient, documented: Any, rt: Runtime) -> None:
    """Core concepts, "Job", read back: every documented field; with executeAt ahead, the
    first fire is the cron's first at or after it."""
    at = (rt.jobs.now() + timedelta(days=1)).replace(minute=7, second=13, microsecond=0)
    body = {k: v for k, v in documented.items() if k not in READ_ONLY}
    body |= {"executeAt": at.isoformat(), "timeoutMinutes": 2}
    created = ok(await client.post("/api/v1/jobs/job", json=body), 201)
    job = ok(await client.get(f"/api/v1/jobs/{created['id']}"))
    assert_shape(job, documented, "Job")
    assert datetime.fromisoformat(job["executeAt"]) == at
    assert datetime.fromisoformat(job["nextRunAt"]) == at.replace(minute=10, second=0)
    assert (job["timeoutMinutes"], job["timeoutSeconds"]) == (2, 120)
    assert job["avarageDuration"] == job["averageDuration"]


async def the_occurrence(client: httpx.AsyncClient, documented: Any, rt: Runtime) -> None:
    """Core concepts, "Occurrence": a run of the sample job type, read back with every
    documented field, and its status changes Queued -> Running -> Completed each at its own
    time (the worker may have folded Running into its final report)."""
    job = await a_job(client)
    trigger_call = Call("POST", "/api/v1/jobs/job/trigger", {"jobId": job["id"]})
    started = ok(await client.post(trigger_call.path, json=trigger_call.body), 202)
    url = f"/api/v1/occurrences/{started['id']}"

    async def completed() -> Any:
        occurrence = ok(await client.get(url))
        return occurrence if occurrence["status"] == 2 and occurrence["logs"] else None

    await eventually(completed, WITHIN, "the occurrence completed with its log")
    occurrence = ok(await client.get(url))
    assert_shape(occurrence, documented, "Occurrence")
    assert occurrence["jobName"] == "GenerateReportJob"
    assert occurrence["result"] == documented["result"]
    assert [line["message"] for line in occurrence["logs"]] == ["Generating the report"]
    changes = occurrence["statusChangeLogs"]
    documented_steps = [(c["from"], c["to"]) for c in documented["statusChangeLogs"]]
    assert [(c["from"], c["to"]) for c in changes] == [(None, 0), *documented_steps]
    times = [datetime.fromisoformat(c["timestamp"]) for c in changes]
    assert times == sorted(times)
    assert times[1] == datetime.fromisoformat(occurrence["startTime"])
    assert times[2] == datetime.fromisoformat(occurrence["endTime"])


async def per_job_auto_disable(client: httpx.AsyncClient, documented: Any, rt: Runtime) -> None:
    """Reliability patterns, "Auto-Disable", per job via the API: on create and on update."""
    created = await a_job(client, **documented)
    assert (created["autoDisableThreshold"], created["autoDisable"]["threshold"]) == (10, 10)
    other = await a_job(client)
    body = {"id": other["id"], **documented}
    changed = ok(await client.put("/api/v1/jobs/job", json=body))
    assert changed["autoDisableThreshold"] == 10
    off = {"autoDisableSettings": {"enabled": False}}
    changed = ok(await client.put("/api/v1/jobs/job", json={"id": other["id"], **off}))
    assert changed["autoDisableThreshold"] == 0


async def global_auto_disable(client: httpx.AsyncClient, documented: Any, rt: Runtime) -> None:
    """Reliability patterns, "Auto-Disable", global: the reference's server configuration (its
    appsettings), not a request. Rota's equivalents are settings
    (``ROTA_SCHEDULER__AUTO_DISABLE_THRESHOLD``, ``…_WINDOW_SECONDS``, ``…_COOLDOWN_SECONDS``,
    docs/configuration.md) whose defaults are the documented values; a job shows them."""
    config = documented["MilvaionConfig"]["JobAutoDisable"]
    assert config["Enabled"]
    assert not config["AutoReEnableAfterCooldown"]
    defaults = SchedulerSettings().auto_disable
    assert defaults.threshold == config["ConsecutiveFailureThreshold"]
    assert defaults.window_seconds == config["FailureWindowMinutes"] * 60
    assert defaults.cooldown_seconds is None  # no re-enable after a cooldown
    job = await a_job(client)
    assert job["autoDisable"]["threshold"] == config["ConsecutiveFailureThreshold"]
    assert job["autoDisable"]["windowSeconds"] == config["FailureWindowMinutes"] * 60


SHAPE_REPLAYS: dict[str, Callable[[httpx.AsyncClient, Any, Runtime], Awaitable[None]]] = {
    "Job": the_job,
    "Occurrence": the_occurrence,
    "Global (API):": global_auto_disable,
    "Per-Job (via Dashboard or API):": per_job_auto_disable,
}


@pytest.mark.parametrize("documented", SHAPES, ids=[s.name for s in SHAPES])
async def test_each_documented_shape_works_as_written(
    client: httpx.AsyncClient, runtime: Runtime, documented: Shape
) -> None:
    await SHAPE_REPLAYS[documented.name](client, documented.body, runtime)


# --- beyond the samples -----------------------------------------------------------------------


async def test_a_cron_job_with_execute_at_fires_from_execute_at_on(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    """The sample job's rule end to end: every second, from executeAt (2 s ahead) on."""
    at = (runtime.jobs.now() + timedelta(seconds=2)).replace(microsecond=0)
    job = await a_job(client, cronExpression="* * * * * *", executeAt=at.isoformat())
    assert datetime.fromisoformat(job["nextRunAt"]) == at

    async def fired() -> list[Any]:
        page = ok(await client.get("/api/v1/occurrences", params={"jobId": job["id"]}))
        items: list[Any] = page["items"]
        return items

    await eventually(fired, WITHIN, "the first fire")
    assert min(datetime.fromisoformat(o["scheduledFor"]) for o in await fired()) == at


async def test_reference_fields_given_twice_are_refused(client: httpx.AsyncClient) -> None:
    body = {"jobType": "t", "cronExpression": "@daily", "timeoutMinutes": 1, "timeoutSeconds": 30}
    problem = await client.post("/api/v1/jobs", json=body)
    assert problem.status_code == 422
    assert "timeoutSeconds is given twice" in problem.text
    same = body | {"timeoutSeconds": 60}
    assert ok(await client.post("/api/v1/jobs", json=same), 201)["timeoutSeconds"] == 60
    unknown = {"jobType": "t", "cronExpression": "@daily", "autoDisableSettings": {"on": True}}
    assert (await client.post("/api/v1/jobs", json=unknown)).status_code == 422


async def test_trigger_by_body_of_an_unknown_job_is_404(client: httpx.AsyncClient) -> None:
    body = {"jobId": "019b66dd-9a70-7c0b-957b-f93d2ab083c9", "reason": "x"}
    assert (await client.post("/api/v1/jobs/job/trigger", json=body)).status_code == 404
    assert (await client.post("/api/v1/jobs/job/trigger", json={"reason": "x"})).status_code == 422
