"""Log output: JSON lines or readable text lines, the log context on both; the console's
access lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from rota.core.models import FailureType, OccurrenceStatus, StatusRecord
from rota.observability.logs import (
    ApiAccessFilter,
    LogFormat,
    bind_context,
    configure,
    current_context,
    log_context,
)
from rota.worker.run import log_finished

log = logging.getLogger("tests.logs")


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    access = logging.getLogger("uvicorn.access")
    server = logging.getLogger("uvicorn.error")
    kept = (list(access.filters), access.level, server.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    access.filters[:] = kept[0]
    access.setLevel(kept[1])
    server.setLevel(kept[2])


def lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


def test_json_lines_by_default_with_context_and_extra() -> None:
    out = io.StringIO()
    configure("info", out)
    occurrence = uuid4()
    with log_context(occurrence_id=occurrence, job_id="j-1", attempt=2, trace_id="abc"):
        log.info("ran %s", "it", extra={"action": "run"})
    log.warning("outside")
    first, second = (json.loads(line) for line in lines(out))
    assert first["message"] == "ran it"
    assert first["level"] == "INFO"
    assert first["logger"] == "tests.logs"
    assert first["occurrence_id"] == str(occurrence)
    assert (first["job_id"], first["attempt"], first["trace_id"]) == ("j-1", 2, "abc")
    assert first["action"] == "run"
    assert first["time"].endswith("+00:00")
    assert "occurrence_id" not in second
    assert second["level"] == "WARNING"


TEXT_LINE = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3} (?P<level>[A-Z]+) +(?P<source>[\w.]+): (?P<rest>.*)$"
)


def test_text_lines_show_time_level_source_message_and_key_fields() -> None:
    out = io.StringIO()
    configure("debug", out, fmt="text")
    log.info("plain", extra={"action": "ignored-in-text"})
    with log_context(occurrence_id="o-1", job_id="j-1", job_type="reports.daily", attempt=2):
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    text = out.getvalue()
    first, second, *traceback = text.splitlines()
    plain = TEXT_LINE.match(first)
    assert plain is not None, first
    assert (plain["level"], plain["source"], plain["rest"]) == ("INFO", "tests.logs", "plain")
    failed = TEXT_LINE.match(second)
    assert failed is not None, second
    # inside a job the source is the job type; the key fields follow the message
    assert (failed["level"], failed["source"]) == ("ERROR", "reports.daily")
    assert failed["rest"] == "failed [occurrence_id=o-1 attempt=2]"
    assert traceback[0] == "Traceback (most recent call last):"
    assert traceback[-1] == "ValueError: boom"


def test_the_rota_prefix_is_left_out_of_the_source() -> None:
    out = io.StringIO()
    configure("info", out, fmt=LogFormat.TEXT)
    logging.getLogger("rota.app.runtime").info("rota started", extra={"instance_id": "i"})
    line = TEXT_LINE.match(lines(out)[0])
    assert line is not None
    assert (line["source"], line["rest"]) == ("app.runtime", "rota started")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="yaml"):
        configure("info", io.StringIO(), fmt="yaml")


def access_record(path: str, status: int = 200, method: str = "GET") -> logging.LogRecord:
    """A record as uvicorn's access logger makes it."""
    args = ("127.0.0.1:50000", method, path, "1.1", status)
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, "h11_impl.py", 1, '%s - "%s %s HTTP/%s" %d', args, None
    )


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/jobs?page=2",
        "/ui/series.json",
        "/executions/abc?fragment=summary",
        "/static/vendor/htmx.min.js",
        "/docs",
        "/docs/assets/swagger-ui-bundle.js",
        "/openapi.json",
        "/metrics",
        "/api/v1/health/live",
        "/api/v1/events?types=occurrence",
    ],
)
def test_the_console_drops_the_dashboard_docs_and_probe_requests(path: str) -> None:
    assert not ApiAccessFilter().filter(access_record(path))


def test_the_console_shows_an_api_call_as_method_path_status() -> None:
    record = access_record("/api/v1/jobs?search=report", 201, "POST")
    assert ApiAccessFilter().filter(record)
    assert record.getMessage() == "POST /api/v1/jobs 201"


def test_access_lines_reach_the_output_only_in_console_mode() -> None:
    access = logging.getLogger("uvicorn.access")
    out = io.StringIO()
    configure("info", out, fmt="text", console=True)
    for record in (access_record("/ui/series.json"), access_record("/api/v1/jobs", 401)):
        access.handle(record)
    logging.getLogger("uvicorn.error").info("Uvicorn running on http://127.0.0.1:8000")
    logging.getLogger("httpx").info('HTTP Request: GET http://rota.internal/api/v1/auth/me "200"')
    assert [line.partition(": ")[2] for line in lines(out)] == ["GET /api/v1/jobs 401"]
    quiet = io.StringIO()
    configure("info", quiet)  # rota server, rota worker: no access lines
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", "/api/v1/jobs", "1.1", 200)
    logging.getLogger("uvicorn.error").info("Uvicorn running on http://127.0.0.1:8000")
    assert [json.loads(line)["message"] for line in lines(quiet)] == [
        "Uvicorn running on http://127.0.0.1:8000"
    ]


def test_an_explicit_extra_wins_over_the_context() -> None:
    out = io.StringIO()
    configure("info", out, fmt="json")
    with log_context(job_id="from-context"):
        log.info("x", extra={"job_id": "explicit"})
    assert json.loads(lines(out)[0])["job_id"] == "explicit"


async def test_each_task_keeps_its_own_context() -> None:
    out = io.StringIO()
    configure("info", out, fmt="json")

    async def work(name: str) -> None:
        bind_context(occurrence_id=name)
        await asyncio.sleep(0)
        log.info("step")
        await asyncio.sleep(0)
        log.info("step")

    await asyncio.gather(work("a"), work("b"))
    records = [json.loads(line) for line in lines(out)]
    assert sorted(r["occurrence_id"] for r in records) == ["a", "a", "b", "b"]
    assert current_context() == {}


def test_none_values_are_left_out() -> None:
    with log_context(occurrence_id="o", trace_id=None):
        assert current_context() == {"occurrence_id": "o"}


def _final(status: OccurrenceStatus, **fields: object) -> StatusRecord:
    return StatusRecord(
        occurrence_id=uuid4(), status=status, timestamp=datetime.now(UTC), attempt=1, **fields
    )


@pytest.mark.parametrize(
    ("record", "level", "message"),
    [
        (
            _final(OccurrenceStatus.COMPLETED, duration_ms=12.3, result="ok"),
            "INFO",
            "Completed in 12 ms",
        ),
        (
            _final(
                OccurrenceStatus.TIMED_OUT,
                duration_ms=1500.0,
                exception="TimeoutError: the job exceeded its timeout of 1.5 s",
                failure_type=FailureType.TIMED_OUT,
            ),
            "WARNING",
            "TimedOut in 1.5 s (timed_out): TimeoutError: the job exceeded its timeout of 1.5 s",
        ),
        (
            _final(OccurrenceStatus.CANCELLED, duration_ms=3.0, exception="from the dashboard"),
            "INFO",
            "Cancelled in 3 ms: from the dashboard",
        ),
        (
            _final(
                OccurrenceStatus.FAILED,
                exception="no handler for job type 'x' in worker 'w'",
                failure_type=FailureType.UNKNOWN_JOB_TYPE,
            ),
            "WARNING",
            "Failed (unknown_job_type): no handler for job type 'x' in worker 'w'",
        ),
    ],
)
def test_the_line_that_ends_an_attempt(record: StatusRecord, level: str, message: str) -> None:
    out = io.StringIO()
    configure("info", out, fmt="json")
    log_finished("reports.daily", record)
    (line,) = (json.loads(text) for text in lines(out))
    assert (line["level"], line["logger"], line["message"]) == (level, "rota.executions", message)
    assert (line["job_type"], line["occurrence_id"]) == ("reports.daily", str(record.occurrence_id))
    assert line["status"] == message.split(" ")[0]
    assert line["duration_ms"] == record.duration_ms
