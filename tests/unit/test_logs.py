"""Log output: JSON lines off a terminal, readable lines on one, the log context on both."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from uuid import uuid4

import pytest

from rota.observability.logs import bind_context, configure, current_context, log_context

log = logging.getLogger("tests.logs")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


def test_json_lines_when_not_a_terminal_with_context_and_extra() -> None:
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


def test_readable_lines_on_a_terminal_show_the_context() -> None:
    out = Terminal()
    configure("debug", out)
    with log_context(occurrence_id="o-1", attempt=1):
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    text = out.getvalue()
    assert not text.startswith("{")
    first = text.splitlines()[0]
    assert "ERROR" in first
    assert "tests.logs: failed [occurrence_id=o-1 attempt=1]" in first
    assert "ValueError: boom" in text


def test_an_explicit_extra_wins_over_the_context() -> None:
    out = io.StringIO()
    configure("info", out, json=True)
    with log_context(job_id="from-context"):
        log.info("x", extra={"job_id": "explicit"})
    assert json.loads(lines(out)[0])["job_id"] == "explicit"


async def test_each_task_keeps_its_own_context() -> None:
    out = io.StringIO()
    configure("info", out, json=True)

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
