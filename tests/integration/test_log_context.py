"""A handler's own log lines carry its occurrence, job and attempt (embedded runtime)."""

from __future__ import annotations

import io
import json
import logging
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
