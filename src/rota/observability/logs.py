"""Log output for the entry points: JSON lines (``rota server``, ``rota worker``) or readable
text lines (``rota dev``'s console), ``--log-format`` / ``ROTA_LOG_FORMAT`` choosing; and the
log context (occurrence, job, attempt, trace ids) every line carries.

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
from enum import StrEnum
from typing import Any, Final, TextIO

import orjson

from rota.core.redact import mask_urls

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}

CONTEXT_FIELDS = ("occurrence_id", "job_id", "job_type", "attempt", "trace_id", "span_id")
"""The keys of the log context (a job's ids, a trace's)."""

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


class SecretFilter(logging.Filter):
    """Masks every URL in a line (its password, its secret query parameters:
    :func:`rota.core.redact.mask_urls`): the message with its arguments, and the text of an
    exception, of our lines and of the libraries' (a driver's connection error naming its
    URL; the formatters mask the exception's text). On the handler, so it sees every line
    written."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_urls(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class _MaskedExceptions(logging.Formatter):
    def formatException(self, ei: Any) -> str:
        return mask_urls(super().formatException(ei))


QUIET_LOGGERS: Final = {
    # httpx logs each request at INFO: the dashboard's calls to the API inside the server
    "httpx": logging.WARNING,
    "alembic": logging.WARNING,
    # aiosqlite's DEBUG lines carry every statement's parameters: password hashes,
    # webhook secrets, job data
    "aiosqlite": logging.INFO,
}


class JsonFormatter(_MaskedExceptions):
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


class TextFormatter(_MaskedExceptions):
    """One readable line: ``HH:MM:SS.mmm LEVEL source: message [key=value …]``.

    The source is the job type on a line written inside a job (the handler's own lines and the
    line that ends each attempt), else the logger's name without its ``rota.`` prefix. The key
    fields are the log context but the job type (the source already) and the job id (the
    occurrence id finds it): ``occurrence_id``, ``attempt``, ``trace_id``, ``span_id``. A
    traceback follows on the lines below. Times are local, as on a console."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record.__dict__
        when = self.formatTime(record, "%H:%M:%S") + f".{int(record.msecs):03d}"
        source = fields.get("job_type") or record.name.removeprefix("rota.")
        text = f"{when} {record.levelname:<7} {source}: {record.getMessage()}"
        keys = " ".join(f"{key}={fields[key]}" for key in TEXT_FIELDS if key in fields)
        if keys:
            text = f"{text} [{keys}]"
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        elif record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return text


TEXT_FIELDS = ("occurrence_id", "attempt", "trace_id", "span_id")
"""The key fields a text line shows after its message, in this order."""


class LogFormat(StrEnum):
    """How log lines are written: ``json`` (one object per line) or ``text`` (readable)."""

    JSON = "json"
    TEXT = "text"


class ApiAccessFilter(logging.Filter):
    """For uvicorn's access lines in a console (``rota dev``): keeps the calls of the REST API
    (``/api/…``) as ``METHOD path status``, drops the rest: the dashboard's pages, fragments and
    htmx polling (``/``, ``/ui/…``), static files, the docs, ``/metrics``, the health checks
    and the event streams. (The dashboard's calls to the API from the server itself go through
    no socket, so uvicorn never logs them; httpx's line for each is silenced.)"""

    QUIET_PREFIXES = ("/api/v1/health/", "/api/v1/events")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 5:
            return True  # not uvicorn's usual access line: leave it alone
        _client, method, path, _version, status = args
        path = str(path)
        if not path.startswith("/api/") or path.startswith(self.QUIET_PREFIXES):
            return False
        record.msg = "%s %s %s"
        record.args = (method, path.partition("?")[0], status)
        return True


def configure(
    level: str,
    stream: TextIO | None = None,
    *,
    fmt: LogFormat | str = LogFormat.JSON,
    console: bool = False,
) -> None:
    """Send every log line to ``stream`` (stderr) in ``fmt``, with the log context on each
    line. ``console`` (``rota dev``): show the REST API calls (:class:`ApiAccessFilter`) and
    not uvicorn's own start and stop lines (the command prints where it listens); otherwise
    no access lines at all."""
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    text = LogFormat(fmt) is LogFormat.TEXT
    handler.setFormatter(TextFormatter() if text else JsonFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    access = logging.getLogger("uvicorn.access")
    access.filters[:] = []
    if console:
        access.setLevel(logging.NOTSET)
        access.addFilter(ApiAccessFilter())
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    else:
        access.setLevel(logging.WARNING)
        logging.getLogger("uvicorn.error").setLevel(logging.NOTSET)
    for name, quiet in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet)
