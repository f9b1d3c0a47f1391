"""A handler's own log lines carry its occurrence, job and attempt, and each finished attempt is
one line (embedded runtime)."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.app.server import prepare
from rota.observability.logs import configure
from tests.helpers import eventually, settings_for


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    configure("info", out)
    yield out
    root.handlers[:] = handlers
    root.setLevel(level)


async def test_handler_log_lines_carry_the_occurrence(
    tmp_path: Path, json_logs: io.StringIO
) -> None:
    settings = settings_for(tmp_path)
    rt = await prepare(settings, ["tests.integration.ops_jobs"])
    await rt.start()
    try:
        job = await rt.jobs.create_job({"job_type": "ops.fast", "execute_at": rt.jobs.now()})
        found: dict[str, object] = {}

        def logged() -> bool:
            for line in json_logs.getvalue().splitlines():
                record = json.loads(line)
                if record["message"] == "ops.fast running":
                    found.update(record)
            return bool(found)

        await eventually(logged, 15, "the handler's log line")
    finally:
        await rt.stop(grace=1)
    assert found, "the handler's log line"
    assert found["job_id"] == str(job.id)
    assert found["job_type"] == "ops.fast"
    assert found["attempt"] == 1
    occurrence = await _only_occurrence(tmp_path, job.id)
    assert found["occurrence_id"] == occurrence
    # lines of the runtime itself, outside any job, carry no occurrence
    started = [json.loads(x) for x in json_logs.getvalue().splitlines() if "rota started" in x]
    assert started
    assert "occurrence_id" not in started[0]


async def _only_occurrence(tmp_path: Path, job_id: object) -> str:
    from rota.core.records import OccurrenceQuery
    from rota.stores.sql import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path / 'rota.db'}")
    await store.open()
    try:
        page = await store.list_occurrences(OccurrenceQuery(job_id=job_id))  # type: ignore[arg-type]
    finally:
        await store.close()
    assert len(page.items) == 1
    return str(page.items[0].id)


@pytest.fixture
def text_logs() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    configure("info", out, fmt="text")
    yield out
    root.handlers[:] = handlers
    root.setLevel(level)


FINISHED = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3} (?P<level>[A-Z]+) +(?P<job_type>ops\.\w+): "
    r"(?P<what>(Completed|Failed)\b.*) \[occurrence_id=(?P<occ>[0-9a-f-]{36}) attempt=(?P<n>\d)\]$"
)


async def test_each_finished_attempt_is_one_text_line(
    tmp_path: Path, text_logs: io.StringIO
) -> None:
    """``rota dev``'s console: one line per finished attempt (job type, status, duration),
    a failure's with its retry or its end and the exception's first line."""
    settings = settings_for(tmp_path)
    rt = await prepare(settings, ["tests.integration.ops_jobs"])
    await rt.start()
    try:
        now = rt.jobs.now()
        fast = await rt.jobs.create_job({"job_type": "ops.fast", "execute_at": now})
        await rt.jobs.create_job({"job_type": "ops.broken", "execute_at": now})

        def finished() -> list[re.Match[str]]:
            found = [FINISHED.match(line) for line in text_logs.getvalue().splitlines()]
            return [m for m in found if m is not None]

        await eventually(lambda: len(finished()) >= 3, 15, "three finished attempts")
    finally:
        await rt.stop(grace=1)
    lines = finished()
    assert len(lines) == 3, text_logs.getvalue()
    done = [m for m in lines if m["job_type"] == "ops.fast"]
    assert len(done) == 1
    assert done[0]["level"] == "INFO"
    assert re.fullmatch(r"Completed in \d+ ms", done[0]["what"])
    assert done[0]["occ"] == await _only_occurrence(tmp_path, fast.id)
    first, last = sorted((m for m in lines if m["job_type"] == "ops.broken"), key=lambda m: m["n"])
    assert (first["level"], first["n"], last["level"], last["n"]) == (
        "WARNING",
        "1",
        "WARNING",
        "2",
    )
    assert first["occ"] == last["occ"]
    assert re.fullmatch(
        r"Failed in \d+ ms, retry at \d\d:\d\d:\d\dZ: RuntimeError: broken on attempt 1",
        first["what"],
    )
    assert re.fullmatch(
        r"Failed in \d+ ms \(retries_exhausted\): RuntimeError: broken on attempt 2", last["what"]
    )
