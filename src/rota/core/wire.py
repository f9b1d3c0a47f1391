"""The JSON wire format of DESIGN.md §5: job messages, status and log record lists, dead letters.

Bodies are UTF-8 JSON with camelCase keys, read and written by :mod:`msgspec` straight from and
to the records of :mod:`rota.core.models` (a job message's body through :class:`_JobBody`, which
holds ``correlationId`` and leaves the AMQP headers out). Datetimes travel as ISO-8601 UTC with a
``Z`` suffix, UUIDs as hyphenated lowercase strings, statuses and priorities as their integer
codes. Encoding always writes every key (``null`` where empty); decoding ignores keys it does
not know (a newer peer may send more), fills optional keys that are missing with their defaults,
and refuses anything else with :class:`~rota.core.errors.ValidationError` naming the offending
field (camelCase; ``body`` when the body is not the expected JSON shape), so a poison message can
be detected and dead-lettered instead of crashing its consumer. What the types cannot say is done
after the decode: times in other zones are converted to UTC, NUL characters in text replaced by
U+FFFD, free-form JSON (``jobData``, ``result``, ``data``) limited to
:data:`~rota.core.jsonlimits.MAX_JSON_DEPTH` levels.

The original correlation id of a job message travels in the ``x-original-correlation-id``
header, not in the body: pass the message headers to :func:`decode_job_message` to get it back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from uuid import UUID

import msgspec
from msgspec import UNSET, Meta, UnsetType

from rota.core.errors import ValidationError
from rota.core.jsonlimits import MAX_JSON_DEPTH, max_depth_exceeded, too_deep_at, value_too_deep
from rota.core.models import (
    AwareDatetime,
    FailureType,
    JobMessage,
    LogRecord,
    Priority,
    StatusRecord,
)

R = TypeVar("R", StatusRecord, LogRecord)
Body = bytes | bytearray | memoryview | str

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
READABLE_DEPTH = 1024
"""A body nested deeper than this is refused as a whole (``body``); one less deep but with a
free-form value past :data:`~rota.core.jsonlimits.MAX_JSON_DEPTH` is refused naming its field."""

_Count = Annotated[int, Meta(ge=0)]
_Seconds = Annotated[float, Meta(ge=0)]


class _JobBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The body of a job message (``docs/protocol.md`` §5): its keys in the order written, and
    what a reader takes."""

    occurrence_id: UUID
    job_id: UUID
    job_type: str
    job_data: Any = None
    correlation_id: UUID | None = None
    """Always the occurrence id: checked when read, then ignored."""
    timestamp: AwareDatetime
    scheduled_for: AwareDatetime
    retry_count: _Count = 0
    max_retries: _Count = 0
    priority: Priority = Priority.MEDIUM
    timeout_seconds: _Seconds | None = None
    job_version: Annotated[int, Meta(ge=1)] = 1
    worker_id: str | None = None
    retry_delay_seconds: _Seconds | None = None


class _EnvelopeJob(_JobBody, frozen=True, kw_only=True):
    """A job of an envelope (§5a): its body plus the AMQP headers its single message would
    carry beyond the body, left out when it has none."""

    headers: dict[str, Any] | UnsetType | None = UNSET


class _DeadLetterBody(_JobBody, frozen=True, kw_only=True):
    """A dead letter with reasons (§8): the job message plus why."""

    failure_type: FailureType | None = None
    exception: str | None = None
    failed_at: AwareDatetime | None = None


class _Envelope(msgspec.Struct, frozen=True):
    jobs: Annotated[list[msgspec.Raw], Meta(min_length=1, max_length=MAX_ENVELOPE_JOBS)]


class _EnvelopeRead(msgspec.Struct, frozen=True):
    """An envelope read in one pass (every job of it readable)."""

    jobs: Annotated[list[_EnvelopeJob], Meta(min_length=1, max_length=MAX_ENVELOPE_JOBS)]


_ENCODER = msgspec.json.Encoder()
_ENCODE_ERRORS = (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError)
_JOB = msgspec.json.Decoder(_JobBody)
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_ENVELOPE_READ = msgspec.json.Decoder(_EnvelopeRead)
_ENVELOPE_JOB = msgspec.json.Decoder(_EnvelopeJob)
_DEAD_LETTER = msgspec.json.Decoder(_DeadLetterBody)
_STATUS_RECORDS = msgspec.json.Decoder(list[StatusRecord])
_LOG_RECORDS = msgspec.json.Decoder(list[LogRecord])
_ANY = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A job message that will not run again by itself, with why (when its sender said so).

    A message rejected by a consumer reaches the dead-letter queue as it was published: its
    ``failure_type``, ``exception`` and ``failed_at`` are then ``None``."""

    message: JobMessage
    failure_type: FailureType | None = None
    exception: str | None = None
    failed_at: datetime | None = None


class EnvelopePart(msgspec.Struct, frozen=True):
    """One job of a decoded envelope: its message, or why it cannot be read (then
    ``document`` is the element as received, to dead-letter it alone)."""

    index: int
    document: object
    message: JobMessage | None
    error: ValidationError | None = None


# --- encoding -------------------------------------------------------------------------------


def _utc(value: datetime, key: str) -> datetime:
    if value.tzinfo is UTC:
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{key}: datetime must be timezone-aware", field=key)
    return value.astimezone(UTC)


def _utc_or_none(value: datetime | None, key: str) -> datetime | None:
    return value if value is None or value.tzinfo is UTC else _utc(value, key)


def _body(message: JobMessage, kind: type[_JobBody] = _JobBody, **more: Any) -> _JobBody:
    return kind(
        occurrence_id=message.occurrence_id,
        job_id=message.job_id,
        job_type=message.job_type,
        job_data=message.job_data,
        correlation_id=message.occurrence_id,
        timestamp=_utc(message.timestamp, "timestamp"),
        scheduled_for=_utc(message.scheduled_for, "scheduledFor"),
        retry_count=message.retry_count,
        max_retries=message.max_retries,
        priority=message.priority,
        timeout_seconds=message.timeout_seconds,
        job_version=message.job_version,
        worker_id=message.worker_id,
        retry_delay_seconds=message.retry_delay_seconds,
        **more,
    )


_TIMES: dict[type, tuple[tuple[str, str], ...]] = {
    StatusRecord: (
        ("timestamp", "timestamp"),
        ("retry_at", "retryAt"),
        ("started_at", "startedAt"),
    ),
    LogRecord: (("timestamp", "timestamp"),),
}
"""The datetime fields of each record (name, key)."""


def _in_utc(record: R) -> R:
    """``record`` with its datetimes in UTC (itself when they are: the usual case)."""
    changes = None
    for name, key in _TIMES[type(record)]:
        value = getattr(record, name)
        if value is not None and value.tzinfo is not UTC:
            changes = changes or {}
            changes[name] = _utc(value, key)
    return record if changes is None else msgspec.structs.replace(record, **changes)


def _encode(document: object, parts: Sequence[msgspec.Struct]) -> bytes:
    try:
        return _ENCODER.encode(document)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(exc, parts) from exc


def _encode_error(exc: BaseException, parts: Sequence[msgspec.Struct]) -> ValidationError:
    """Name the key whose value cannot be encoded (it is nearly always free-form data)."""
    for index, part in enumerate(parts):
        for field in msgspec.structs.fields(part):
            try:
                _ENCODER.encode(getattr(part, field.name))
            except _ENCODE_ERRORS:
                key = field.encode_name
                where = f"record {index}: " if len(parts) > 1 else ""
                return ValidationError(f"{where}{key}: cannot be encoded as JSON: {exc}", field=key)
    return ValidationError(f"cannot be encoded as JSON: {exc}", field="jobData")


def encode_job_message(message: JobMessage) -> bytes:
    """The JSON body of a job message."""
    body = _body(message)
    return _encode(body, (body,))


def _headers(message: JobMessage, *, enveloped: bool = False) -> dict[str, UUID | str]:
    """The AMQP headers of a job message that its body does not hold (UUIDs as they are).
    ``enveloped``: an envelope's element, which leaves out a correlation id that is its
    occurrence id (what a reader takes when it is missing)."""
    headers: dict[str, UUID | str] = {}
    correlation_id = message.original_correlation_id
    if correlation_id is not None and not (enveloped and correlation_id == message.occurrence_id):
        headers[HEADER_ORIGINAL_CORRELATION_ID] = correlation_id
    if message.traceparent is not None:
        headers[HEADER_TRACEPARENT] = message.traceparent
    return headers


def job_message_headers(message: JobMessage) -> dict[str, int | str]:
    """The AMQP headers that go with a job message."""
    headers: dict[str, int | str] = {
        HEADER_RETRY_COUNT: message.retry_count,
        HEADER_MAX_RETRIES: message.max_retries,
    }
    for name, value in _headers(message).items():
        headers[name] = str(value)
    return headers


def encode_job_envelope(messages: Sequence[JobMessage]) -> bytes:
    """The body of a job envelope: ``{"jobs": [...]}``, each element a job message as
    :func:`encode_job_message` writes it, plus ``headers`` (the AMQP headers its single
    message would carry that the body does not hold) when it has any."""
    if not 0 < len(messages) <= MAX_ENVELOPE_JOBS:
        raise ValueError(f"an envelope carries 1 to {MAX_ENVELOPE_JOBS} jobs, not {len(messages)}")
    jobs = [_body(m, _EnvelopeJob, headers=_headers(m, enveloped=True) or UNSET) for m in messages]
    return _encode({"jobs": jobs}, jobs)


def encode_envelope_part(part: EnvelopePart) -> bytes:
    """An envelope's element as a message body of its own (to dead-letter it alone): the
    element exactly as received."""
    if isinstance(part.document, msgspec.Raw):
        return bytes(part.document)
    try:
        return _ENCODER.encode(part.document)
    except _ENCODE_ERRORS:  # pragma: no cover - it was decoded from JSON
        return b"null"


def encode_status_records(records: Sequence[StatusRecord]) -> bytes:
    """A JSON array of status records (order kept)."""
    documents = [_in_utc(record) for record in records]
    return _encode(documents, documents)


def encode_log_records(records: Sequence[LogRecord]) -> bytes:
    """A JSON array of log records (order kept)."""
    documents = [_in_utc(record) for record in records]
    return _encode(documents, documents)


def encode_dead_letter(letter: DeadLetter) -> bytes:
    """The job message plus ``failureType``, ``exception`` and ``failedAt``."""
    body = _body(
        letter.message,
        _DeadLetterBody,
        failure_type=letter.failure_type,
        exception=letter.exception,
        failed_at=_utc_or_none(letter.failed_at, "failedAt"),
    )
    return _encode(body, (body,))


# --- decoding -------------------------------------------------------------------------------

_AT = re.compile(r"^(?:\[(\d+)\])?(?:\.([^.\[]+))?")
"""The record index and key that start msgspec's path (``[3].status``, ``.jobId``)."""
_MISSING = re.compile(r"missing required field `([^`]+)`")


def _located(exc: msgspec.ValidationError) -> tuple[str, str | None, str | None]:
    """msgspec's refusal as (problem, record index, key): msgspec says where in its text only
    (``Expected `int`, got `str` - at `$[3].retryCount` ``)."""
    problem, _, path = str(exc).partition(" - at `$")
    match = _AT.match(path.rstrip("`"))
    index, key = match.groups() if match else (None, None)
    return problem, index, key


def _invalid(exc: msgspec.ValidationError, where: str = "") -> ValidationError:
    """Our refusal from msgspec's, naming the key (``Object missing required field `jobId` -
    at `$[3]` ``: ``record 3: jobId: is required``). Records of a list are ``record N: ``."""
    problem, index, key = _located(exc)
    if missing := _MISSING.search(problem):
        key, problem = missing.group(1), "is required"
    if index is not None:
        where += f"record {index}: "
    if key is None:
        return ValidationError(f"{where}{problem}", field="body")
    return ValidationError(f"{where}{key}: {problem}", field=key)


def _no_nul(text: str) -> str:
    """``text`` with NUL characters replaced by U+FFFD: PostgreSQL text cannot hold NUL, and
    one such character in an exception would otherwise make a whole batch unstorable."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _bytes(body: Body) -> bytes | str:
    return bytes(body) if isinstance(body, memoryview | bytearray) else body


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes | str, where: str = "") -> Any:
    """``body`` read by ``decoder``; a time or UUID that msgspec's strict parsers refuse but
    Python's read (``2030-01-01T00:00Z``, a UUID in braces) is rewritten and read again."""
    for _ in range(_REWRITES):
        try:
            return decoder.decode(body)
        except msgspec.ValidationError as exc:
            deep = None if _shallow(body) else _too_deep(body, where)
            rewritten = None if deep else _lenient(body, exc)
            if rewritten is None:
                raise deep or _invalid(exc, where) from None
            body = rewritten
        except msgspec.DecodeError as exc:
            raise ValidationError(f"{where}body is not JSON: {exc}", field="body") from None
        except RecursionError:
            deep = _too_deep(body, where)
            raise deep or ValidationError(f"{where}body: nested too deeply", field="body") from None
    raise ValidationError(f"{where}body: too many values to rewrite", field="body")


_REWRITES = 8
"""The most keys of one body :func:`_lenient` rewrites (each in every record at once)."""
_LENIENT: dict[str, Callable[[str], str]] = {
    "Invalid RFC3339 encoded datetime": lambda text: datetime.fromisoformat(text).isoformat(),
    "Invalid UUID": lambda text: str(UUID(text)),
}
"""What msgspec refuses that Python's parsers read (ISO-8601 beyond RFC 3339, UUIDs in braces
or as URNs), and the canonical text for it."""


def _lenient(body: bytes | str, exc: msgspec.ValidationError) -> bytes | None:
    """``body`` with the values msgspec refused at its key rewritten canonically (in every
    record of a list); ``None`` when that is not what it refused or Python does not read it."""
    problem, index, key = _located(exc)
    rewrite = _LENIENT.get(problem)
    if rewrite is None or key is None:
        return None
    document = _ANY.decode(body)
    try:
        for holder in document if index is not None else (document,):
            if isinstance(holder, dict) and isinstance(holder.get(key), str):
                holder[key] = rewrite(holder[key])
    except ValueError:
        return None
    return _ENCODER.encode(document)


def _too_deep(body: bytes | str, where: str) -> ValidationError | None:
    """The refusal of a body that nests a value past the depth limit, naming its key (a
    record's key in a list of records), ``body`` past :data:`READABLE_DEPTH`; else ``None``.
    Depth is judged before types, on the text: msgspec reads no deeper than about 1,000
    levels, and a value too deep is refused as such whatever else is wrong with it."""
    if max_depth_exceeded(body, READABLE_DEPTH):
        return ValidationError(f"{where}body: nested too deeply", field="body")
    records = body.lstrip()[:1] in (b"[", "[")
    location = too_deep_at(body, MAX_JSON_DEPTH + (2 if records else 1))
    if location and records:
        where, location = f"{where}record {location[0]}: ", location[1:]
    if location and isinstance(location[0], str):
        return _nested_too_deep(location[0], where)
    return None


def _nested_too_deep(key: str, where: str = "") -> ValidationError:
    problem = f"nested more than {MAX_JSON_DEPTH} levels deep"
    return ValidationError(f"{where}{key}: {problem}", field=key)


def _shallow(body: bytes | str, objects: int = 1) -> bool:
    """Whether no value of ``body``, a text holding ``objects`` objects of ours (a message, or
    a list and its records), can nest past the limit: no more containers open in it."""
    if isinstance(body, str):
        opened = body.count("[") + body.count("{")
    else:
        opened = body.count(b"[") + body.count(b"{")
    return opened - objects <= MAX_JSON_DEPTH


def _has_nul(body: bytes | str) -> bool:
    """Whether a string of the JSON text ``body`` may hold NUL (which JSON writes escaped)."""
    if isinstance(body, str):
        return "\\u0000" in body
    return b"\\u0000" in body


def _message(
    body: _JobBody,
    headers: Mapping[str, object] | None,
    raw: bytes | str,
    *,
    correlation_id: UUID | None = None,
    shallow: bool | None = None,
) -> JobMessage:
    """The job message of ``body``, read from the text ``raw``; ``correlation_id``: its
    original correlation id when the headers hold none; ``shallow``: whether ``raw`` is known
    to nest no value past the limit (``None``: look)."""
    data = body.job_data
    if (
        isinstance(data, dict | list)
        and not (_shallow(raw) if shallow is None else shallow)
        and value_too_deep(data, MAX_JSON_DEPTH)
    ):
        raise _nested_too_deep("jobData")
    worker_id = body.worker_id
    return JobMessage(
        occurrence_id=body.occurrence_id,
        job_id=body.job_id,
        job_type=_no_nul(body.job_type),
        job_data=data,
        timestamp=_utc(body.timestamp, "timestamp"),
        scheduled_for=_utc(body.scheduled_for, "scheduledFor"),
        retry_count=body.retry_count,
        max_retries=body.max_retries,
        priority=body.priority,
        timeout_seconds=body.timeout_seconds,
        job_version=body.job_version,
        worker_id=None if worker_id is None else _no_nul(worker_id),
        original_correlation_id=(_original_correlation_id(headers) if headers else None)
        or correlation_id,
        retry_delay_seconds=body.retry_delay_seconds,
        traceparent=_traceparent(headers) if headers else None,
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
        return msgspec.convert(value, UUID)  # the canonical text, read in C
    except msgspec.ValidationError:
        pass
    try:
        return UUID(str(value))
    except ValueError:
        raise ValidationError(
            f"{HEADER_ORIGINAL_CORRELATION_ID}: must be a UUID string",
            field=HEADER_ORIGINAL_CORRELATION_ID,
        ) from None


def decode_job_message(body: Body, headers: Mapping[str, object] | None = None) -> JobMessage:
    """A job message from its JSON body (and AMQP headers); ``ValidationError`` if malformed."""
    raw = _bytes(body)
    return _message(_decode(_JOB, raw), headers, raw)


def decode_job_envelope(body: Body) -> list[EnvelopePart]:
    """The jobs of an envelope, each decoded alone: a job that cannot be read is a part with
    its ``error`` (its siblings are not affected). ``ValidationError`` when the envelope itself
    is not ``{"jobs": [...]}`` with 1 to :data:`MAX_ENVELOPE_JOBS` elements.

    An envelope whose jobs are all readable (nearly every one) is read in one pass; one that
    is not is read again, element by element, to tell which job is wrong and keep it as
    received."""
    raw = _bytes(body)
    try:
        envelope: _EnvelopeRead = _ENVELOPE_READ.decode(raw)
        # Looked at once for the whole envelope (its object, its list and each job's object
        # are ours), not once a job.
        shallow = _shallow(raw, 2 + len(envelope.jobs))
        # A correlation id left out is the occurrence id.
        return [
            EnvelopePart(
                i,
                None,
                _message(
                    j, j.headers or None, raw, correlation_id=j.occurrence_id, shallow=shallow
                ),
            )
            for i, j in enumerate(envelope.jobs)
        ]
    except (msgspec.ValidationError, msgspec.DecodeError, ValidationError, RecursionError):
        return _decode_apart(raw)


def _decode_apart(raw: bytes | str) -> list[EnvelopePart]:
    """:func:`decode_job_envelope` element by element."""
    envelope: _Envelope = _decode(_ENVELOPE, raw)
    parts: list[EnvelopePart] = []
    for index, element in enumerate(envelope.jobs):
        try:
            parts.append(EnvelopePart(index, element, _envelope_message(index, element)))
        except ValidationError as exc:
            parts.append(EnvelopePart(index, element, None, exc))
    return parts


def _envelope_message(index: int, element: msgspec.Raw) -> JobMessage:
    where = f"jobs[{index}]: "
    raw = bytes(element)
    job: _EnvelopeJob = _decode(_ENVELOPE_JOB, raw, where)
    try:
        # A correlation id left out is the occurrence id.
        return _message(job, job.headers or None, raw, correlation_id=job.occurrence_id)
    except ValidationError as exc:
        raise ValidationError(f"{where}{exc}", field=exc.field) from None


def _records(
    decoder: msgspec.json.Decoder[list[R]], body: Body, free: str, text: Sequence[str]
) -> list[R]:
    """Records of a list, then what the types cannot say: the ``free`` form value within the
    depth limit, times in UTC, no NUL in the ``text`` fields."""
    raw = _bytes(body)
    records: list[R] = _decode(decoder, raw)
    if not _shallow(raw, 1 + len(records)):
        for index, record in enumerate(records):
            if value_too_deep(getattr(record, free), MAX_JSON_DEPTH):
                raise _nested_too_deep(free, f"record {index}: ")
    nul = _has_nul(raw)
    for index, record in enumerate(records):
        fixed = _in_utc(record)
        if nul:
            fixed = msgspec.structs.replace(
                fixed, **{name: _no_nul(v) for name in text if (v := getattr(fixed, name))}
            )
        if fixed is not record:
            records[index] = fixed
    return records


def decode_status_records(body: Body) -> list[StatusRecord]:
    """Status records from a JSON array; ``ValidationError`` (naming the field) if malformed."""
    return _records(_STATUS_RECORDS, body, "result", ("instance_id", "exception"))


def decode_log_records(body: Body) -> list[LogRecord]:
    """Log records from a JSON array; ``ValidationError`` (naming the field) if malformed."""
    return _records(_LOG_RECORDS, body, "data", ("level", "message", "category"))


def decode_dead_letter(body: Body, headers: Mapping[str, object] | None = None) -> DeadLetter:
    """A dead letter: a job message with optional ``failureType``, ``exception``, ``failedAt``."""
    raw = _bytes(body)
    letter: _DeadLetterBody = _decode(_DEAD_LETTER, raw)
    return DeadLetter(
        message=_message(letter, headers, raw),
        failure_type=letter.failure_type,
        exception=None if letter.exception is None else _no_nul(letter.exception),
        failed_at=_utc_or_none(letter.failed_at, "failedAt"),
    )
