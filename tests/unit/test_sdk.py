"""The worker SDK: @rota.job, JobData, JobContext, and discovery of job definitions."""

from __future__ import annotations

import asyncio
import inspect
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

import rota
from rota.core.errors import ConfigurationError, CronError, JobCancelledError, ValidationError
from rota.core.models import LogRecord, Priority
from rota.sdk.job import JobOptions
from rota.sdk.registry import JobRegistry, load_jobs


class Report(rota.JobData):
    kind: str
    fmt: str = "pdf"


@rota.job("GenerateReportJob", max_retries=5, retry_delay=10, timeout=600, priority=3)
async def generate_report(ctx: rota.JobContext, data: Report) -> str:
    ctx.log.info("building %s report", data.kind)
    await ctx.check_cancelled()
    return f"{data.kind}.{data.fmt}"


@rota.job("cleanup")
def cleanup(ctx: rota.JobContext) -> None:
    ctx.log.info("cleaning")


@rota.job("raw")
def raw_data(ctx: rota.JobContext, data: dict[str, Any]) -> int:
    return len(data)


@rota.job("untyped")
def untyped(ctx, data):  # type: ignore[no-untyped-def]
    return data


@rota.job("optional")
def optional_model(ctx: rota.JobContext, data: Report | None) -> str | None:
    return None if data is None else data.kind


@rota.job("later")
def later(ctx: rota.JobContext, data: LaterData) -> int:
    return data.n


class LaterData(rota.JobData):
    n: int


def make_ctx(**kwargs: Any) -> rota.JobContext:
    return rota.JobContext(job_type="T", **kwargs)


# --- the public surface -----------------------------------------------------------------------


def test_rota_exports_the_sdk() -> None:
    assert set(rota.__all__) == {
        "job",
        "JobContext",
        "JobData",
        "JobDefinition",
        "PermanentError",
        "RotaError",
        "Client",
        "SyncClient",
        "ApiError",
        "RunFailedError",
        "secret",
        "Rota",
        "Settings",
    }
    assert issubclass(rota.PermanentError, rota.RotaError)
    assert issubclass(rota.ApiError, rota.RotaError)
    assert rota.Rota.__module__ == "rota.app.embed"  # loaded on first use (see below)
    assert rota.Settings.__module__ == "rota.app.settings"


def test_importing_rota_stays_light() -> None:
    code = (
        "import sys, rota; "
        "heavy = ('fastapi', 'sqlalchemy', 'uvicorn', 'pydantic_settings', 'rota.app.settings'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# --- definitions --------------------------------------------------------------------------------


def test_definition_carries_name_options_and_kind() -> None:
    assert isinstance(generate_report, rota.JobDefinition)
    assert generate_report.name == "GenerateReportJob"
    assert generate_report.options == JobOptions(
        max_retries=5, retry_delay=10.0, timeout=600.0, priority=Priority.HIGH
    )
    assert generate_report.is_async
    assert generate_report.takes_data
    assert generate_report.data_model is Report
    assert not cleanup.is_async
    assert not cleanup.takes_data
    assert cleanup.data_model is None
    assert getattr(generate_report, "__name__", None) == "generate_report"
    assert generate_report.__doc__ is None


async def test_definition_is_still_callable_like_the_function() -> None:
    ctx = make_ctx()
    assert await generate_report(ctx, Report(kind="sales")) == "sales.pdf"
    assert cleanup(ctx) is None
    assert raw_data(ctx, {"a": 1, "b": 2}) == 2


def test_parse_data_validates_into_the_model() -> None:
    parsed = generate_report.parse_data({"kind": "sales", "fmt": "csv"})
    assert parsed == Report(kind="sales", fmt="csv")
    with pytest.raises(ValidationError) as info:
        generate_report.parse_data({"fmt": "csv"})
    assert info.value.field == "jobData"
    assert "kind" in info.value.message


def test_parse_data_of_untyped_and_dict_handlers() -> None:
    assert untyped.parse_data(None) == {}
    assert untyped.parse_data([1, 2]) == [1, 2]
    assert raw_data.parse_data({"x": 1}) == {"x": 1}
    with pytest.raises(ValidationError):
        raw_data.parse_data([1, 2])


def test_parse_data_of_optional_model() -> None:
    assert optional_model.parse_data(None) is None
    assert optional_model.parse_data({"kind": "k"}) == Report(kind="k")
    assert optional_model.data_model is None
    assert optional_model.data_schema() is not None


def test_missing_data_validates_an_empty_object() -> None:
    @rota.job("defaults")
    def defaults(ctx: rota.JobContext, data: Report) -> None: ...

    with pytest.raises(ValidationError):
        defaults.parse_data(None)

    class AllDefaults(rota.JobData):
        n: int = 3

    @rota.job("all-defaults")
    def all_defaults(ctx: rota.JobContext, data: AllDefaults) -> None: ...

    assert all_defaults.parse_data(None) == AllDefaults(n=3)


def test_forward_reference_is_resolved_on_use() -> None:
    assert later.data_model is LaterData
    assert later.parse_data({"n": 4}) == LaterData(n=4)


def test_data_schema_is_published() -> None:
    schema = generate_report.data_schema()
    assert schema is not None
    assert schema["required"] == ["kind"]
    assert set(schema["properties"]) == {"kind", "fmt"}
    assert cleanup.data_schema() is None
    assert untyped.data_schema() is None


def test_describe() -> None:
    described = generate_report.describe()
    assert described["schema"] == generate_report.data_schema()
    assert described["maxRetries"] == 5
    assert described["timeoutSeconds"] == 600.0
    assert described["priority"] == 3
    assert described["isAsync"] is True
    assert described["retryDelaySeconds"] == 10.0
    assert described["retryJitter"] == 0.0
    assert described["maxRetryDelaySeconds"] is None


def test_retry_jitter_and_cap_are_job_type_options() -> None:
    definition = rota.job("jittery", retry_delay=2, retry_jitter=0.25, max_retry_delay=60)(
        cleanup.func
    )
    assert definition.options.retry_jitter == 0.25
    assert definition.options.max_retry_delay == 60.0
    described = definition.describe()
    assert described["retryJitter"] == 0.25
    assert described["maxRetryDelaySeconds"] == 60.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_retries": -1}, "maxRetries"),
        ({"max_retries": True}, "maxRetries"),
        ({"max_retries": 1.5}, "maxRetries"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -3}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"retry_delay": -1}, "retryDelay"),
        ({"retry_jitter": -0.1}, "retryJitter"),
        ({"retry_jitter": 1.5}, "retryJitter"),
        ({"retry_jitter": float("nan")}, "retryJitter"),
        ({"retry_jitter": "0.1"}, "retryJitter"),
        ({"max_retry_delay": 0}, "maxRetryDelay"),
        ({"max_retry_delay": float("inf")}, "maxRetryDelay"),
        ({"priority": 9}, "priority"),
        ({"time_zone": "Mars/Olympus"}, "timeZone"),
        ({"should_retry": 3}, "shouldRetry"),
    ],
)
def test_invalid_options_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        rota.job("ok", **kwargs)
    assert info.value.field == field


def test_valid_edge_options() -> None:
    definition = rota.job("edge", max_retries=0, retry_delay=0, priority=0, retry_jitter=1)(
        cleanup.func
    )
    assert definition.options.max_retries == 0
    assert definition.options.retry_jitter == 1.0
    assert definition.options.retry_delay == 0.0
    assert definition.options.priority is Priority.VERY_LOW


@pytest.mark.parametrize("name", ["", "   ", "has space", "a*b", "#", "x" * 201, 5])
def test_invalid_names_are_refused(name: Any) -> None:
    with pytest.raises(ValidationError) as info:
        rota.job(name)
    assert info.value.field == "name"


def test_bare_decorator_is_refused_with_a_hint() -> None:
    with pytest.raises(ValidationError, match=r"@rota.job\('MyJob'\)"):
        rota.job(cleanup.func)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "func",
    [lambda: None, lambda ctx, data, extra: None],
)
def test_handler_signature_is_checked(func: Any) -> None:
    with pytest.raises(ValidationError, match="takes \\(ctx\\) or \\(ctx, data\\)"):
        rota.job("sig")(func)


def test_handler_with_optional_extra_parameter_is_accepted() -> None:
    def handler(ctx: rota.JobContext, data: Report, flag: bool = False) -> None: ...

    definition = rota.job("extra")(handler)
    assert definition.data_model is Report


# --- context ------------------------------------------------------------------------------------


def test_context_defaults() -> None:
    ctx = make_ctx(attempt=3)
    assert ctx.correlation_id == ctx.occurrence_id
    assert ctx.retry_count == 2
    assert ctx.scheduled_for.tzinfo is not None
    assert "T" in repr(ctx)


def test_log_lines_become_log_records(caplog: pytest.LogCaptureFixture) -> None:
    records: list[LogRecord] = []
    occurrence_id = uuid4()
    ctx = make_ctx(occurrence_id=occurrence_id, log_sink=records.append)
    caplog.set_level(logging.DEBUG)
    assert ctx.log is ctx.log
    ctx.log.debug("step %d of %d", 1, 3)
    ctx.log.warning("odd", extra={"rows": 7, "who": object(), "ids": [1, 2]})
    try:
        raise ValueError("boom")
    except ValueError:
        ctx.log.exception("failed")
    assert [r.level for r in records] == ["DEBUG", "WARNING", "ERROR"]
    assert all(r.occurrence_id == occurrence_id for r in records)
    assert all(r.category == "T" for r in records)
    assert records[0].message == "step 1 of 3"
    assert records[0].data is None
    assert records[1].data is not None
    assert records[1].data["rows"] == 7
    assert records[1].data["ids"] == [1, 2]
    assert isinstance(records[1].data["who"], str)
    assert records[2].message.startswith("failed\nTraceback")
    assert "ValueError: boom" in records[2].message
    assert records[0].timestamp.tzinfo is not None
    assert caplog.records == []  # no propagation to the process's logging


def test_log_from_threads_reaches_the_sink() -> None:
    records: list[LogRecord] = []
    ctx = make_ctx(log_sink=records.append)
    threads = [threading.Thread(target=ctx.log.info, args=("t%d", i)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.message for r in records) == [f"t{i}" for i in range(5)]
    assert [r.line for r in records] == [1, 2, 3, 4, 5]  # numbered in the order they reach it


def test_log_lines_are_numbered_within_their_attempt() -> None:
    records: list[LogRecord] = []
    ctx = make_ctx(attempt=3, log_sink=records.append)
    for n in range(3):
        ctx.log.info("line %d", n)
    ctx.log.debug("filtered out")  # DEBUG is accepted: the logger's level is DEBUG
    assert [(r.attempt, r.line) for r in records] == [(3, 1), (3, 2), (3, 3), (3, 4)]
    again: list[LogRecord] = []
    make_ctx(attempt=4, log_sink=again.append).log.info("next attempt starts at 1")
    assert [(r.attempt, r.line) for r in again] == [(4, 1)]


def test_context_without_sink_logs_normally(caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx()
    with caplog.at_level(logging.INFO, logger="rota.jobs.T"):
        ctx.log.info("hello")
    assert [r.getMessage() for r in caplog.records] == ["hello"]
    assert ctx.log.name == "rota.jobs.T"


async def test_cancellation() -> None:
    ctx = make_ctx()
    event_before = ctx.cancelled
    assert not ctx.is_cancelled
    assert not event_before.is_set()
    await ctx.check_cancelled()
    ctx.raise_if_cancelled()
    ctx.request_cancel()
    assert ctx.is_cancelled
    assert event_before.is_set()
    with pytest.raises(JobCancelledError):
        await ctx.check_cancelled()
    with pytest.raises(JobCancelledError):
        ctx.raise_if_cancelled()


def test_event_created_after_cancel_is_set() -> None:
    ctx = make_ctx()
    ctx.request_cancel()
    assert ctx.cancelled.is_set()


async def test_sync_code_can_wait_on_the_event() -> None:
    ctx = make_ctx()
    waiting = asyncio.create_task(asyncio.to_thread(ctx.cancelled.wait, 5))
    await asyncio.sleep(0)
    ctx.request_cancel()
    assert await asyncio.wait_for(waiting, 5) is True


# --- discovery ----------------------------------------------------------------------------------

JOBS_MODULE = """
import rota

class Data(rota.JobData):
    n: int

@rota.job("{name}")
def handler(ctx: rota.JobContext, data: Data) -> int:
    return data.n

alias = handler
not_a_job = 3
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def pkg_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_load_jobs_by_dotted_name(pkg_dir: Path) -> None:
    prefix = f"jobs_{uuid4().hex[:8]}"
    write(pkg_dir / f"{prefix}.py", JOBS_MODULE.format(name="Alpha"))
    registry = load_jobs([prefix])
    assert list(registry) == ["Alpha"]
    assert registry["Alpha"].takes_data
    assert len(registry) == 1
    assert "Alpha" in repr(registry)


def test_load_jobs_of_a_package_includes_submodules(pkg_dir: Path) -> None:
    pkg = f"pkg_{uuid4().hex[:8]}"
    write(pkg_dir / pkg / "__init__.py", "")
    write(pkg_dir / pkg / "a.py", JOBS_MODULE.format(name="A"))
    write(pkg_dir / pkg / "sub" / "__init__.py", "")
    write(pkg_dir / pkg / "sub" / "b.py", JOBS_MODULE.format(name="B"))
    assert sorted(load_jobs([pkg])) == ["A", "B"]


def test_load_jobs_by_file_path(pkg_dir: Path) -> None:
    path = write(pkg_dir / "files" / f"file_{uuid4().hex[:8]}.py", JOBS_MODULE.format(name="F"))
    registry = load_jobs([str(path)])
    assert list(registry) == ["F"]
    assert load_jobs([str(path)])["F"] is registry["F"]  # the same module, not re-executed


def test_duplicate_job_type_is_refused(pkg_dir: Path) -> None:
    one, two = f"one_{uuid4().hex[:8]}", f"two_{uuid4().hex[:8]}"
    write(pkg_dir / f"{one}.py", JOBS_MODULE.format(name="Same"))
    write(pkg_dir / f"{two}.py", JOBS_MODULE.format(name="Same"))
    with pytest.raises(ConfigurationError, match="'Same' is defined twice") as info:
        load_jobs([one, two])
    assert one in info.value.message
    assert two in info.value.message


def test_the_same_definition_imported_twice_is_fine(pkg_dir: Path) -> None:
    src, reexport = f"src_{uuid4().hex[:8]}", f"re_{uuid4().hex[:8]}"
    write(pkg_dir / f"{src}.py", JOBS_MODULE.format(name="Once"))
    write(pkg_dir / f"{reexport}.py", f"from {src} import handler as again\n")
    assert list(load_jobs([src, reexport])) == ["Once"]


def test_import_errors_are_configuration_errors(pkg_dir: Path) -> None:
    broken = f"broken_{uuid4().hex[:8]}"
    write(pkg_dir / f"{broken}.py", "raise RuntimeError('nope')\n")
    with pytest.raises(ConfigurationError, match="RuntimeError: nope"):
        load_jobs([broken])
    with pytest.raises(ConfigurationError, match="cannot import"):
        load_jobs(["no_such_module_for_rota_tests"])
    with pytest.raises(ConfigurationError, match="no such file"):
        load_jobs([str(pkg_dir / "missing.py")])


def test_registry_refuses_unresolvable_annotations() -> None:
    def handler(ctx: rota.JobContext, data: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    definition = rota.job("unresolvable")(handler)
    with pytest.raises(ConfigurationError, match="cannot resolve"):
        JobRegistry([definition])


def test_registry_describe() -> None:
    registry = JobRegistry([generate_report, cleanup])
    described = registry.describe()
    assert set(described) == {"GenerateReportJob", "cleanup"}
    assert described["cleanup"]["schema"] is None
    assert inspect.isfunction(registry["cleanup"].func)


def test_cron_option_is_validated() -> None:
    definition = rota.job("nightly", cron="0 3 * * *", time_zone="Europe/Berlin")(cleanup.func)
    assert definition.options.cron == "0 3 * * *"
    assert definition.describe()["timeZone"] == "Europe/Berlin"
    with pytest.raises(CronError) as info:
        rota.job("broken", cron="not a cron")
    assert info.value.field == "cronExpression"
