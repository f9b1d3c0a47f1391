"""What a running handler gets: :class:`JobContext` (ids, attempt, scheduled time,
cancellation, a logger) and the :data:`LogSink` its log lines go to."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from uuid import UUID

import orjson

from rota.core.errors import JobCancelledError
from rota.core.models import JsonValue, LogRecord

__all__ = ["JobContext", "LogSink", "to_log_record"]

LogSink = Callable[[LogRecord], None]
"""Receives the log records of an occurrence; may be called from any thread."""


_STANDARD_RECORD_ATTRS = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()
    | {"message", "asctime", "taskName"}
)
_formatter = logging.Formatter()


def _json_safe(value: object) -> JsonValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return str(value)


def to_log_record(
    occurrence_id: UUID,
    record: logging.LogRecord,
    *,
    attempt: int | None = None,
    line: int | None = None,
) -> LogRecord:
    """A :class:`~rota.core.models.LogRecord` from a :mod:`logging` record: level name,
    formatted message (with exception), ``extra`` attributes as data, logger name as category;
    ``attempt`` and ``line`` identify the line so a copy that arrives twice is stored once."""
    message = record.getMessage()
    if record.exc_info:
        message = f"{message}\n{_formatter.formatException(record.exc_info)}"
    if record.stack_info:
        message = f"{message}\n{record.stack_info}"
    data = {
        key: _json_safe(value)
        for key, value in record.__dict__.items()
        if key not in _STANDARD_RECORD_ATTRS
    }
    return LogRecord(
        occurrence_id=occurrence_id,
        timestamp=datetime.fromtimestamp(record.created, UTC),
        level=record.levelname,
        message=message,
        data=data or None,
        category=record.name,
        attempt=attempt,
        line=line,
    )


class _OccurrenceLogger(logging.Logger):
    """A logger of one attempt of an occurrence: not registered with :mod:`logging`, no
    propagation; every record it accepts goes to the sink as a :class:`LogRecord` numbered
    from 1 within the attempt."""

    def __init__(self, name: str, occurrence_id: UUID, attempt: int, sink: LogSink) -> None:
        super().__init__(name, logging.DEBUG)
        self.propagate = False
        self._occurrence_id = occurrence_id
        self._attempt = attempt
        self._sink = sink
        self._lines = itertools.count(1)
        self._lock = threading.Lock()  # handlers may log from several threads

    def handle(self, record: logging.LogRecord) -> None:
        if not self.disabled and self.filter(record):
            with self._lock:
                line = next(self._lines)
                self._sink(
                    to_log_record(self._occurrence_id, record, attempt=self._attempt, line=line)
                )


class JobContext:
    """What a handler knows about the occurrence it runs: ids, attempt, scheduled time, a
    logger streamed to the occurrence's log, and cancellation.

    Handlers can be called directly with a context built by hand (``JobContext(job_type=…)``);
    without a log sink, ``ctx.log`` is the ordinary logger ``rota.jobs.<job type>``.
    """

    __slots__ = (
        "_cancel_flag",
        "_event",
        "_log",
        "_sink",
        "attempt",
        "correlation_id",
        "instance_id",
        "job_id",
        "job_type",
        "max_retries",
        "occurrence_id",
        "scheduled_for",
    )

    def __init__(
        self,
        *,
        job_type: str,
        occurrence_id: UUID | None = None,
        job_id: UUID | None = None,
        correlation_id: UUID | None = None,
        attempt: int = 1,
        max_retries: int = 0,
        scheduled_for: datetime | None = None,
        instance_id: str | None = None,
        log_sink: LogSink | None = None,
    ) -> None:
        if occurrence_id is None or job_id is None:
            from rota.core.ids import new_id

            occurrence_id = occurrence_id or new_id()
            job_id = job_id or new_id()
        self.occurrence_id = occurrence_id
        self.job_id = job_id
        self.correlation_id = correlation_id or occurrence_id
        self.job_type = job_type
        self.attempt = attempt
        self.max_retries = max_retries
        self.scheduled_for = scheduled_for or datetime.now(UTC)
        self.instance_id = instance_id
        self._sink = log_sink
        self._log: logging.Logger | None = None
        self._event: threading.Event | None = None
        self._cancel_flag = False

    def __repr__(self) -> str:
        return f"<JobContext {self.job_type} {self.occurrence_id} attempt {self.attempt}>"

    @property
    def retry_count(self) -> int:
        return self.attempt - 1

    @property
    def log(self) -> logging.Logger:
        """The occurrence's logger (created on first use): its lines go to the occurrence log."""
        log = self._log
        if log is None:
            if self._sink is None:
                log = logging.getLogger(f"rota.jobs.{self.job_type}")
            else:
                log = _OccurrenceLogger(self.job_type, self.occurrence_id, self.attempt, self._sink)
            self._log = log
        return log

    @property
    def cancelled(self) -> threading.Event:
        """Set once the occurrence is cancelled (or timed out); usable from sync code."""
        event = self._event
        if event is None:
            event = threading.Event()
            self._event = event
            if self._cancel_flag:  # re-check after publishing: a cancel may have raced us
                event.set()
        return event

    @property
    def is_cancelled(self) -> bool:
        return self._cancel_flag

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~rota.core.errors.JobCancelledError` if cancelled (for sync code)."""
        if self._cancel_flag:
            raise JobCancelledError(f"occurrence {self.occurrence_id} was cancelled")

    async def check_cancelled(self) -> None:
        """A cancellation point: yield to the loop, then raise
        :class:`~rota.core.errors.JobCancelledError` if the occurrence is cancelled."""
        await asyncio.sleep(0)
        self.raise_if_cancelled()

    def request_cancel(self) -> None:
        """Mark the occurrence cancelled (the executor calls this; thread-safe)."""
        self._cancel_flag = True
        event = self._event
        if event is not None:
            event.set()
