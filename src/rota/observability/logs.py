"""Log output for the entry points: JSON lines when stderr is not a terminal, readable lines
on one; and the log context (occurrence, job, attempt, trace ids) every line carries.

Library code only calls :func:`bind_context`; :func:`configure` is called by the entry points
(the CLI) and nowhere else.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}

CONTEXT_FIELDS = ("occurrence_id", "job_id", "job_type", "attempt", "trace_id", "span_id")
"""The context keys, in the order the readable format shows them."""

_context: ContextVar[Mapping[str, object] | None] = ContextVar("rota_log_context", default=None)


def bind_context(**fields: object) -> None:
    """Add ``fields`` to the log context of the current task (and of what it starts: tasks
    and pool threads copy the context). ``None`` values are left out."""
    current = _context.get()
    merged = dict(current) if current else {}
    for key, value in fields.items():
        if value is not None:
            merged[key] = value
    _context.set(merged)


def set_job_context(occurrence_id: object, job_id: object, job_type: str, attempt: int) -> None:
    """The log context of a task that runs one job attempt (replacing what it inherited):
    the executor's per-job fast path."""
    _context.set(
        {"occurrence_id": occurrence_id, "job_id": job_id, "job_type": job_type, "attempt": attempt}
    )


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """``fields`` in the log context for the ``with`` block."""
    token = _context.set(_context.get())
    try:
        bind_context(**fields)
        yield
    finally:
        _context.reset(token)


def current_context() -> Mapping[str, object]:
    return _context.get() or {}


class ContextFilter(logging.Filter):
    """Copies the log context onto each record (a field the call's ``extra`` sets wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get()
        if context:
            fields = record.__dict__
            for key, value in context.items():
                if key not in fields:
                    fields[key] = value
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and every ``extra`` field."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class ReadableFormatter(logging.Formatter):
    """``time level logger: message`` followed by the context ids as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = record.__dict__
        context = " ".join(f"{key}={fields[key]}" for key in CONTEXT_FIELDS if key in fields)
        if not context:
            return text
        head, sep, tail = text.partition("\n")  # keep a traceback below the context
        return f"{head} [{context}]{sep}{tail}"


def configure(level: str, stream: TextIO | None = None, *, json: bool | None = None) -> None:
    """Send every log line to ``stream`` (stderr): readable on a terminal, JSON lines
    otherwise (``json`` forces either), with the log context on each line."""
    out = stream if stream is not None else sys.stderr
    as_json = not out.isatty() if json is None else json
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if as_json else ReadableFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
