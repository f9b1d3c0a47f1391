"""The JSON wire format of DESIGN.md §5: job messages, status and log record lists, dead letters.

Bodies are UTF-8 JSON with camelCase keys, encoded with :mod:`orjson`. Datetimes travel as
ISO-8601 UTC with a ``Z`` suffix, UUIDs as hyphenated lowercase strings, statuses and priorities
as their integer codes. Encoding always writes every key (``null`` where empty); decoding ignores
keys it does not know (a newer peer may send more), fills optional keys that are missing with
their defaults, and refuses anything else with :class:`~rota.core.errors.ValidationError` naming
the offending field (camelCase; ``body`` when the body is not the expected JSON shape), so a
poison message can be detected and dead-lettered instead of crashing its consumer.

The original correlation id of a job message travels in the ``x-original-correlation-id``
header, not in the body: pass the message headers to :func:`decode_job_message` to get it back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID, SafeUUID

import orjson

from rota.core.errors import ValidationError
from rota.core.jsonlimits import MAX_JSON_DEPTH, value_too_deep
from rota.core.models import (
    FailureType,
    JobMessage,
    LogRecord,
    OccurrenceStatus,
    Priority,
    StatusRecord,
)

T = TypeVar("T")

HEADER_RETRY_COUNT = "x-retry-count"
HEADER_MAX_RETRIES = "x-max-retries"
HEADER_ORIGINAL_CORRELATION_ID = "x-original-correlation-id"
HEADER_REDELIVERED = "x-rota-redelivered"
"""On a job of an envelope given back as a message of its own: it was delivered before (as
RabbitMQ's ``redelivered`` flag says of a message given back)."""
HEADER_TRACEPARENT = "traceparent"
"""W3C Trace Context: the span the occurrence's trace continues from."""
CONTENT_TYPE = "application/json"
ENVELOPE_CONTENT_TYPE = "application/vnd.rota.jobs+json"
"""The content type of a job envelope: several job messages for one worker group in one
message (``{"jobs": [<job message>, …]}``)."""
MAX_ENVELOPE_JOBS = 1000
"""The most job messages one envelope may carry (a reader refuses a longer one whole)."""

_DUMPS_OPTIONS = orjson.OPT_UTC_Z
_STATUSES = tuple(OccurrenceStatus)
"""Statuses by code (the codes are 0, 1, 2, …)."""
_PRIORITIES = tuple(Priority)
_MISSING: Any = object()
_FREE_FORM = ("jobData", "result", "data")
"""Keys holding arbitrary JSON: the usual suspects when an encode fails."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A job message that will not run again by itself, with why (when its sender said so).

    A message rejected by a consumer reaches the dead-letter queue as it was published: its
    ``failure_type``, ``exception`` and ``failed_at`` are then ``None``."""

    message: JobMessage
    failure_type: FailureType | None = None
    exception: str | None = None
    failed_at: datetime | None = None


# --- encoding -------------------------------------------------------------------------------


def _utc(value: datetime, key: str) -> datetime:
    if value.tzinfo is UTC:
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{key}: datetime must be timezone-aware", field=key)
    return value.astimezone(UTC)


def _utc_or_none(value: datetime | None, key: str) -> datetime | None:
    return None if value is None else _utc(value, key)


def _default(value: object) -> object:
    """Encode what orjson does not know natively: UUIDs of driver types (asyncpg returns its
    own ``uuid.UUID`` subclass) as their canonical string."""
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__qualname__}")


def _dumps(document: object, documents: Sequence[Mapping[str, object]]) -> bytes:
    try:
        return orjson.dumps(document, default=_default, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise _encode_error(exc, documents) from exc


def _encode_error(exc: Exception, documents: Sequence[Mapping[str, object]]) -> ValidationError:
    """Name the key whose value cannot be encoded (it is nearly always free-form data)."""
    for index, document in enumerate(documents):
        for key, value in document.items():
            try:
                orjson.dumps(value, default=_default, option=_DUMPS_OPTIONS)
            except orjson.JSONEncodeError:
                where = f"record {index}: " if len(documents) > 1 else ""
                return ValidationError(f"{where}{key}: cannot be encoded as JSON: {exc}", field=key)
    return ValidationError(f"cannot be encoded as JSON: {exc}", field=_FREE_FORM[0])


def _job_message_dict(message: JobMessage) -> dict[str, object]:
    return {
        "occurrenceId": message.occurrence_id,
        "jobId": message.job_id,
        "jobType": message.job_type,
        "jobData": message.job_data,
        "correlationId": message.occurrence_id,
        "timestamp": _utc(message.timestamp, "timestamp"),
        "scheduledFor": _utc(message.scheduled_for, "scheduledFor"),
        "retryCount": message.retry_count,
        "maxRetries": message.max_retries,
        "priority": int(message.priority),
        "timeoutSeconds": message.timeout_seconds,
        "jobVersion": message.job_version,
        "workerId": message.worker_id,
        "retryDelaySeconds": message.retry_delay_seconds,
    }


def _status_dict(record: StatusRecord) -> dict[str, object]:
    failure = record.failure_type
    return {
        "occurrenceId": record.occurrence_id,
        "status": int(record.status),
        "timestamp": _utc(record.timestamp, "timestamp"),
        "instanceId": record.instance_id,
        "attempt": record.attempt,
        "result": record.result,
        "exception": record.exception,
        "durationMs": record.duration_ms,
        "retryAt": _utc_or_none(record.retry_at, "retryAt"),
        "failureType": None if failure is None else failure.value,
        "startedAt": _utc_or_none(record.started_at, "startedAt"),
    }


def _log_dict(record: LogRecord) -> dict[str, object]:
    return {
        "occurrenceId": record.occurrence_id,
        "timestamp": _utc(record.timestamp, "timestamp"),
        "level": record.level,
        "message": record.message,
        "data": record.data,
        "category": record.category,
        "attempt": record.attempt,
        "line": record.line,
    }


def encode_job_message(message: JobMessage) -> bytes:
    """The JSON body of a job message."""
    document = _job_message_dict(message)
    return _dumps(document, (document,))


def job_message_headers(message: JobMessage) -> dict[str, int | str]:
    """The AMQP headers that go with a job message."""
    headers: dict[str, int | str] = {
        HEADER_RETRY_COUNT: message.retry_count,
        HEADER_MAX_RETRIES: message.max_retries,
    }
    if message.original_correlation_id is not None:
        headers[HEADER_ORIGINAL_CORRELATION_ID] = str(message.original_correlation_id)
    if message.traceparent is not None:
        headers[HEADER_TRACEPARENT] = message.traceparent
    return headers


def _envelope_part(message: JobMessage) -> dict[str, object]:
    document = _job_message_dict(message)
    headers: dict[str, str] = {}
    if message.original_correlation_id is not None:
        headers[HEADER_ORIGINAL_CORRELATION_ID] = str(message.original_correlation_id)
    if message.traceparent is not None:
        headers[HEADER_TRACEPARENT] = message.traceparent
    if headers:
        document["headers"] = headers
    return document


def encode_job_envelope(messages: Sequence[JobMessage]) -> bytes:
    """The body of a job envelope: ``{"jobs": [...]}``, each element a job message as
    :func:`encode_job_message` writes it, plus ``headers`` (the AMQP headers its single
    message would carry that the body does not hold) when it has any."""
    if not 0 < len(messages) <= MAX_ENVELOPE_JOBS:
        raise ValueError(f"an envelope carries 1 to {MAX_ENVELOPE_JOBS} jobs, not {len(messages)}")
    documents = [_envelope_part(message) for message in messages]
    return _dumps({"jobs": documents}, documents)


def encode_status_records(records: Sequence[StatusRecord]) -> bytes:
    """A JSON array of status records (order kept)."""
    documents = [_status_dict(record) for record in records]
    return _dumps(documents, documents)


def encode_log_records(records: Sequence[LogRecord]) -> bytes:
    """A JSON array of log records (order kept)."""
    documents = [_log_dict(record) for record in records]
    return _dumps(documents, documents)


def encode_dead_letter(letter: DeadLetter) -> bytes:
    """The job message plus ``failureType``, ``exception`` and ``failedAt``."""
    document = _job_message_dict(letter.message)
    failure = letter.failure_type
    document["failureType"] = None if failure is None else failure.value
    document["exception"] = letter.exception
    document["failedAt"] = _utc_or_none(letter.failed_at, "failedAt")
    return _dumps(document, (document,))


# --- decoding -------------------------------------------------------------------------------


class _Reader:
    """Typed access to one decoded JSON object; every refusal names the key."""

    __slots__ = ("doc", "where")

    def __init__(self, doc: object, where: str) -> None:
        if not isinstance(doc, dict):
            raise ValidationError(f"{where}expected a JSON object", field="body")
        self.doc: dict[str, object] = doc
        self.where = where

    def fail(self, key: str, problem: str) -> ValidationError:
        return ValidationError(f"{self.where}{key}: {problem}", field=key)

    def raw(self, key: str, default: object = _MISSING) -> object:
        value = self.doc.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise self.fail(key, "is required")
            return default
        return value

    def uuid(self, key: str) -> UUID:
        value = self.raw(key)
        if isinstance(value, str):
            try:
                return UUID(value)
            except ValueError:
                pass
        raise self.fail(key, "must be a UUID string")

    def text(self, key: str) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise self.fail(key, "must be a string")
        return _no_nul(value)

    def text_or_none(self, key: str) -> str | None:
        value = self.raw(key, None)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, "must be a string or null")
        return None if value is None else _no_nul(value)

    def integer(self, key: str, default: int | None, low: int, high: int | None = None) -> int:
        """An integer in ``[low, high]``; required when ``default`` is ``None``."""
        value = self.raw(key, _MISSING if default is None else default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, "must be an integer")
        if value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise self.fail(key, f"must be {bounds}")
        return value

    def integer_or_none(self, key: str, low: int) -> int | None:
        """An integer ``>= low``, or ``None`` when absent or null."""
        if self.doc.get(key) is None:
            return None
        return self.integer(key, None, low)

    def number_or_none(self, key: str) -> float | None:
        value = self.raw(key, None)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, "must be a number or null")
        if value < 0:
            raise self.fail(key, "must not be negative")
        return float(value)

    def time(self, key: str) -> datetime:
        return _parse_time(self, key, self.raw(key))

    def time_or_none(self, key: str) -> datetime | None:
        value = self.raw(key, None)
        return None if value is None else _parse_time(self, key, value)

    def free_form(self, key: str) -> object:
        """Arbitrary JSON (``jobData``, ``result``, ``data``), or ``None`` when missing: at
        most :data:`~rota.core.jsonlimits.MAX_JSON_DEPTH` levels deep, so that the store and
        the next encoder can write it again (a deeper value would fail every retry of the
        batch that carries it)."""
        value = self.raw(key, None)
        if value is not None and value_too_deep(value, MAX_JSON_DEPTH):
            raise self.fail(key, f"nested more than {MAX_JSON_DEPTH} levels deep")
        return value

    def mapping_or_none(self, key: str) -> dict[str, object] | None:
        value = self.free_form(key)
        if value is not None and not isinstance(value, dict):
            raise self.fail(key, "must be an object or null")
        return value

    def enum_or_none(self, key: str, kind: Callable[[str], T]) -> T | None:
        value = self.raw(key, None)
        if value is None:
            return None
        try:
            return kind(value) if isinstance(value, str) else kind(str(value))
        except ValueError:
            raise self.fail(key, f"unknown value {value!r}") from None


def _parse_time(reader: _Reader, key: str, value: object) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is None:
                raise reader.fail(key, "must carry a time zone (UTC: Z)")
            return parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)
    raise reader.fail(key, "must be an ISO-8601 datetime string")


def _no_nul(text: str) -> str:
    """``text`` with NUL characters replaced by U+FFFD: PostgreSQL text cannot hold NUL, and
    one such character in an exception would otherwise make a whole batch unstorable."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _loads(body: bytes | bytearray | memoryview | str) -> object:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"body is not JSON: {exc}", field="body") from exc


def _records(body: bytes | bytearray | memoryview | str, read: Callable[[_Reader], T]) -> list[T]:
    documents = _loads(body)
    if not isinstance(documents, list):
        raise ValidationError("expected a JSON array of records", field="body")
    return [read(_Reader(doc, f"record {index}: ")) for index, doc in enumerate(documents)]


def _read_job_message(reader: _Reader, headers: Mapping[str, object] | None) -> JobMessage:
    occurrence_id = reader.uuid("occurrenceId")
    if "correlationId" in reader.doc and reader.raw("correlationId") is not None:
        reader.uuid("correlationId")  # validated; it is the occurrence id by definition
    return JobMessage(
        occurrence_id=occurrence_id,
        job_id=reader.uuid("jobId"),
        job_type=reader.text("jobType"),
        job_data=reader.free_form("jobData"),
        timestamp=reader.time("timestamp"),
        scheduled_for=reader.time("scheduledFor"),
        retry_count=reader.integer("retryCount", 0, 0),
        max_retries=reader.integer("maxRetries", 0, 0),
        priority=_PRIORITIES[reader.integer("priority", Priority.MEDIUM, 0, len(_PRIORITIES) - 1)],
        timeout_seconds=reader.number_or_none("timeoutSeconds"),
        job_version=reader.integer("jobVersion", 1, 1),
        worker_id=reader.text_or_none("workerId"),
        original_correlation_id=_original_correlation_id(headers),
        retry_delay_seconds=reader.number_or_none("retryDelaySeconds"),
        traceparent=_traceparent(headers),
    )


def _traceparent(headers: Mapping[str, object] | None) -> str | None:
    value = headers.get(HEADER_TRACEPARENT) if headers else None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value if isinstance(value, str) else None


def _original_correlation_id(headers: Mapping[str, object] | None) -> UUID | None:
    if not headers:
        return None
    value = headers.get(HEADER_ORIGINAL_CORRELATION_ID)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    try:
        return UUID(str(value))
    except ValueError:
        raise ValidationError(
            f"{HEADER_ORIGINAL_CORRELATION_ID}: must be a UUID string",
            field=HEADER_ORIGINAL_CORRELATION_ID,
        ) from None


def _read_status(reader: _Reader) -> StatusRecord:
    return StatusRecord(
        occurrence_id=reader.uuid("occurrenceId"),
        status=_STATUSES[reader.integer("status", None, 0, len(_STATUSES) - 1)],
        timestamp=reader.time("timestamp"),
        attempt=reader.integer("attempt", 1, 1),
        instance_id=reader.text_or_none("instanceId"),
        result=reader.free_form("result"),
        exception=reader.text_or_none("exception"),
        duration_ms=reader.number_or_none("durationMs"),
        retry_at=reader.time_or_none("retryAt"),
        failure_type=reader.enum_or_none("failureType", FailureType),
        started_at=reader.time_or_none("startedAt"),
    )


def _read_log(reader: _Reader) -> LogRecord:
    return LogRecord(
        occurrence_id=reader.uuid("occurrenceId"),
        timestamp=reader.time("timestamp"),
        level=reader.text("level"),
        message=reader.text("message"),
        data=reader.mapping_or_none("data"),
        category=reader.text_or_none("category"),
        attempt=reader.integer_or_none("attempt", 1),
        line=reader.integer_or_none("line", 1),
    )


def decode_job_message(
    body: bytes | bytearray | memoryview | str, headers: Mapping[str, object] | None = None
) -> JobMessage:
    """A job message from its JSON body (and AMQP headers); ``ValidationError`` if malformed."""
    doc = _loads(body)
    if type(doc) is dict:
        message = _fast_job_message(doc, headers)
        if message is not None:
            return message
    return _read_job_message(_Reader(doc, ""), headers)


# --- the fast path of job messages ------------------------------------------------------------
#
# A job message as this version's dispatcher writes it (every key, canonical values) is read by
# :func:`_fast_job_message` in one pass of plain lookups and exact type checks. Whatever it does
# not take as is (a missing or null key that is not optional, a wrong type, a value out of range,
# a NUL in a string, a time without its zone) makes it answer ``None``, and the message is read
# again by the validating reader above, which accepts or refuses it and names the field: the
# fast path accepts a subset of what the reader accepts, with the same result.

_new = object.__new__
_set = object.__setattr__
_UUID_UNKNOWN = SafeUUID.unknown
_MAX_PRIORITY = len(_PRIORITIES) - 1
_DEFAULT_PRIORITY = int(Priority.MEDIUM)
_fromisoformat = datetime.fromisoformat


def _fast_uuid(value: object) -> UUID | None:
    """``UUID(value)`` for a string with 32 hex digits once its hyphens are gone (what ``UUID``
    itself parses, without its keyword checks), else ``None``."""
    if type(value) is not str:
        return None
    digits = value.replace("-", "")
    if len(digits) != 32:
        return None
    try:
        number = int(digits, 16)  # (no ':', '{' or '}' then: UUID reads the same digits)
    except ValueError:
        return None
    result = _new(UUID)
    _set(result, "int", number)
    _set(result, "is_safe", _UUID_UNKNOWN)
    return result


def _fast_time(value: object) -> datetime | None:
    if type(value) is not str:
        return None
    try:
        parsed = _fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is UTC else None


def _fast_seconds(value: object) -> object:
    """A non-negative number as a float, ``None`` for null; ``_MISSING``: not taken as is."""
    if value is None:
        return None
    if (type(value) is float or type(value) is int) and value >= 0:
        return float(value)
    return _MISSING


def _fast_job_message(
    doc: dict[str, Any], headers: Mapping[str, object] | None
) -> JobMessage | None:
    get = doc.get
    text = get("occurrenceId")
    occurrence_id = _fast_uuid(text)
    job_id = _fast_uuid(get("jobId"))
    job_type = get("jobType")
    timestamp = _fast_time(get("timestamp"))
    scheduled_for = _fast_time(get("scheduledFor"))
    if (
        occurrence_id is None
        or job_id is None
        or timestamp is None
        or scheduled_for is None
        or type(job_type) is not str
        or "\x00" in job_type
    ):
        return None
    correlation = get("correlationId")
    if correlation is not None and correlation != text and _fast_uuid(correlation) is None:
        return None
    retry_count = get("retryCount", 0)
    max_retries = get("maxRetries", 0)
    priority = get("priority", _DEFAULT_PRIORITY)
    job_version = get("jobVersion", 1)
    if (
        type(retry_count) is not int
        or type(max_retries) is not int
        or type(priority) is not int
        or type(job_version) is not int
        or retry_count < 0
        or max_retries < 0
        or not 0 <= priority <= _MAX_PRIORITY
        or job_version < 1
    ):
        return None
    worker_id = get("workerId")
    if worker_id is not None and (type(worker_id) is not str or "\x00" in worker_id):
        return None
    timeout = _fast_seconds(get("timeoutSeconds"))
    retry_delay = _fast_seconds(get("retryDelaySeconds"))
    if timeout is _MISSING or retry_delay is _MISSING:
        return None
    job_data = get("jobData")
    if type(job_data) in (dict, list) and value_too_deep(job_data, MAX_JSON_DEPTH):
        return None
    return JobMessage(
        occurrence_id=occurrence_id,
        job_id=job_id,
        job_type=job_type,
        job_data=job_data,
        timestamp=timestamp,
        scheduled_for=scheduled_for,
        retry_count=retry_count,
        max_retries=max_retries,
        priority=_PRIORITIES[priority],
        timeout_seconds=timeout,  # type: ignore[arg-type]
        job_version=job_version,
        worker_id=worker_id,
        original_correlation_id=_original_correlation_id(headers) if headers else None,
        retry_delay_seconds=retry_delay,  # type: ignore[arg-type]
        traceparent=_traceparent(headers) if headers else None,
    )


@dataclass(frozen=True, slots=True)
class EnvelopePart:
    """One job of a decoded envelope: its message, or why it cannot be read (then
    ``document`` is the element as received, to dead-letter it alone)."""

    index: int
    document: object
    message: JobMessage | None
    error: ValidationError | None = None


def decode_job_envelope(body: bytes | bytearray | memoryview | str) -> list[EnvelopePart]:
    """The jobs of an envelope, each decoded alone: a job that cannot be read is a part with
    its ``error`` (its siblings are not affected). ``ValidationError`` when the envelope itself
    is not ``{"jobs": [...]}`` with 1 to :data:`MAX_ENVELOPE_JOBS` elements."""
    doc = _loads(body)
    if type(doc) is not dict:
        raise ValidationError("an envelope must be a JSON object", field="body")
    jobs = doc.get("jobs")
    if type(jobs) is not list or not 0 < len(jobs) <= MAX_ENVELOPE_JOBS:
        raise ValidationError(
            f"jobs: must be an array of 1 to {MAX_ENVELOPE_JOBS} job messages", field="jobs"
        )
    parts: list[EnvelopePart] = []
    for index, part in enumerate(jobs):
        try:
            parts.append(EnvelopePart(index, part, _envelope_message(index, part)))
        except ValidationError as exc:
            parts.append(EnvelopePart(index, part, None, exc))
    return parts


def _envelope_message(index: int, part: object) -> JobMessage:
    where = f"jobs[{index}]: "
    if type(part) is not dict:
        raise ValidationError(f"{where}expected a JSON object", field="body")
    headers = part.get("headers")
    if headers is not None and type(headers) is not dict:
        raise ValidationError(f"{where}headers: must be an object", field="headers")
    message = _fast_job_message(part, headers)
    if message is not None:
        return message
    return _read_job_message(_Reader(part, where), headers)


def encode_envelope_part(part: EnvelopePart) -> bytes:
    """An envelope's element as a message body of its own (to dead-letter it alone)."""
    try:
        return orjson.dumps(part.document)
    except (orjson.JSONEncodeError, TypeError):  # pragma: no cover - it was decoded from JSON
        return b"null"


def decode_status_records(body: bytes | bytearray | memoryview | str) -> list[StatusRecord]:
    """Status records from a JSON array; ``ValidationError`` (naming the field) if malformed."""
    return _records(body, _read_status)


def decode_log_records(body: bytes | bytearray | memoryview | str) -> list[LogRecord]:
    """Log records from a JSON array; ``ValidationError`` (naming the field) if malformed."""
    return _records(body, _read_log)


def decode_dead_letter(
    body: bytes | bytearray | memoryview | str, headers: Mapping[str, object] | None = None
) -> DeadLetter:
    """A dead letter: a job message with optional ``failureType``, ``exception``, ``failedAt``."""
    reader = _Reader(_loads(body), "")
    return DeadLetter(
        message=_read_job_message(reader, headers),
        failure_type=reader.enum_or_none("failureType", FailureType),
        exception=reader.text_or_none("exception"),
        failed_at=reader.time_or_none("failedAt"),
    )
