"""The JSON wire format (DESIGN.md §5): exact keys, round trips, and refusals that name the
field (a poison message is detected, never crashes its consumer)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.core.errors import ValidationError
from rota.core.jsonlimits import MAX_JSON_DEPTH
from rota.core.models import (
    FailureType,
    JobMessage,
    LogRecord,
    OccurrenceStatus,
    Priority,
    StatusRecord,
)
from rota.core.wire import (
    HEADER_MAX_RETRIES,
    HEADER_ORIGINAL_CORRELATION_ID,
    HEADER_RETRY_COUNT,
    DeadLetter,
    decode_dead_letter,
    decode_job_message,
    decode_log_records,
    decode_status_records,
    encode_dead_letter,
    encode_job_message,
    encode_log_records,
    encode_status_records,
    job_message_headers,
)

T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
OID = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057")
JID = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8058")

JOB_KEYS = {
    "occurrenceId",
    "jobId",
    "jobType",
    "jobData",
    "correlationId",
    "timestamp",
    "scheduledFor",
    "retryCount",
    "maxRetries",
    "priority",
    "timeoutSeconds",
    "jobVersion",
    "workerId",
    "retryDelaySeconds",
}
STATUS_KEYS = {
    "occurrenceId",
    "status",
    "timestamp",
    "instanceId",
    "attempt",
    "result",
    "exception",
    "durationMs",
    "retryAt",
    "failureType",
    "startedAt",
}
LOG_KEYS = {
    "occurrenceId", "timestamp", "level", "message", "data", "category", "attempt", "line",
}  # fmt: skip


def message(**changes: Any) -> JobMessage:
    fields: dict[str, Any] = {
        "occurrence_id": OID,
        "job_id": JID,
        "job_type": "GenerateReportJob",
        "job_data": {"kind": "sales", "pages": [1, 2], "nested": {"ok": True, "none": None}},
        "scheduled_for": T0,
        "timestamp": T0 + timedelta(seconds=1),
        "retry_count": 2,
        "max_retries": 5,
        "priority": Priority.HIGH,
        "timeout_seconds": 600.0,
        "job_version": 3,
        "worker_id": "reports",
        "original_correlation_id": JID,
        "retry_delay_seconds": 2.5,
    }
    fields.update(changes)
    return JobMessage(**fields)


def status(**changes: Any) -> StatusRecord:
    fields: dict[str, Any] = {
        "occurrence_id": OID,
        "status": OccurrenceStatus.FAILED,
        "timestamp": T0,
        "attempt": 2,
        "instance_id": "reports-host-1-abc",
        "result": None,
        "exception": "Traceback: boom",
        "duration_ms": 12.5,
        "retry_at": T0 + timedelta(seconds=20),
        "failure_type": FailureType.RETRIES_EXHAUSTED,
    }
    fields.update(changes)
    return StatusRecord(**fields)


def log(**changes: Any) -> LogRecord:
    fields: dict[str, Any] = {
        "occurrence_id": OID,
        "timestamp": T0,
        "level": "INFO",
        "message": "building sales report",
        "data": {"rows": 3},
        "category": "report",
        "attempt": 2,
        "line": 7,
    }
    fields.update(changes)
    return LogRecord(**fields)


def job_document(**changes: Any) -> bytes:
    document = orjson.loads(encode_job_message(message()))
    document.update(changes)
    return orjson.dumps(document)


def status_document(**changes: Any) -> bytes:
    document = orjson.loads(encode_status_records([status()]))[0]
    document.update(changes)
    return orjson.dumps([document])


def log_document(**changes: Any) -> bytes:
    document = orjson.loads(encode_log_records([log()]))[0]
    document.update(changes)
    return orjson.dumps([document])


# --- job messages ---------------------------------------------------------------------------


def test_job_message_keys_and_values_are_the_documented_ones() -> None:
    document = orjson.loads(encode_job_message(message()))
    assert set(document) == JOB_KEYS
    assert document["occurrenceId"] == str(OID)
    assert document["correlationId"] == str(OID)
    assert document["jobId"] == str(JID)
    assert document["scheduledFor"] == "2030-01-02T03:04:05.678901Z"
    assert document["timestamp"] == "2030-01-02T03:04:06.678901Z"
    assert document["priority"] == 3
    assert document["retryCount"] == 2
    assert document["timeoutSeconds"] == 600.0
    assert document["retryDelaySeconds"] == 2.5


def test_job_message_round_trips_with_its_headers() -> None:
    original = message()
    headers = job_message_headers(original)
    assert headers == {
        HEADER_RETRY_COUNT: 2,
        HEADER_MAX_RETRIES: 5,
        HEADER_ORIGINAL_CORRELATION_ID: str(JID),
    }
    assert decode_job_message(encode_job_message(original), headers) == original


def test_job_message_without_optional_values_round_trips() -> None:
    bare = JobMessage(
        occurrence_id=OID,
        job_id=JID,
        job_type="cleanup",
        job_data=None,
        scheduled_for=T0,
        timestamp=T0,
    )
    headers = job_message_headers(bare)
    assert HEADER_ORIGINAL_CORRELATION_ID not in headers
    assert decode_job_message(encode_job_message(bare), headers) == bare
    document = orjson.loads(encode_job_message(bare))
    assert document["workerId"] is None
    assert document["timeoutSeconds"] is None
    assert document["retryDelaySeconds"] is None  # null: the job type's retry delay


def test_missing_optional_keys_take_defaults_and_unknown_keys_are_ignored() -> None:
    body = orjson.dumps(
        {
            "occurrenceId": str(OID),
            "jobId": str(JID),
            "jobType": "cleanup",
            "timestamp": "2030-01-02T03:04:05Z",
            "scheduledFor": "2030-01-02T03:04:05+00:00",
            "someFutureKey": [1, 2, 3],
        }
    )
    decoded = decode_job_message(body)
    assert decoded.priority is Priority.MEDIUM
    assert decoded.retry_count == 0
    assert decoded.max_retries == 0
    assert decoded.job_version == 1
    assert decoded.job_data is None
    assert decoded.worker_id is None
    assert decoded.original_correlation_id is None
    assert decoded.retry_delay_seconds is None  # an older sender: the job type's delay
    assert decoded.scheduled_for == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_datetimes_with_other_offsets_are_converted_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    local = T0.astimezone(plus_two)
    document = orjson.loads(encode_job_message(message(scheduled_for=local)))
    assert document["scheduledFor"] == "2030-01-02T03:04:05.678901Z"
    body = job_document(timestamp="2030-01-02T05:04:05+02:00")
    decoded = decode_job_message(body)
    assert decoded.timestamp == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert decoded.timestamp.tzinfo is UTC


def test_naive_datetime_is_refused_on_encode() -> None:
    with pytest.raises(ValidationError) as caught:
        encode_job_message(message(timestamp=datetime(2030, 1, 1)))
    assert caught.value.field == "timestamp"


def test_unencodable_job_data_names_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        encode_job_message(message(job_data={"handle": object()}))
    assert caught.value.field == "jobData"


JOB_REFUSALS: list[tuple[bytes, str]] = [
    (b"not json", "body"),
    (b"[1, 2]", "body"),
    (b"", "body"),
    (job_document(occurrenceId=None), "occurrenceId"),
    (job_document(occurrenceId="not-a-uuid"), "occurrenceId"),
    (job_document(jobId=17), "jobId"),
    (job_document(jobType=None), "jobType"),
    (job_document(correlationId="nope"), "correlationId"),
    (job_document(timestamp="yesterday"), "timestamp"),
    (job_document(scheduledFor="2030-01-02T03:04:05"), "scheduledFor"),  # no zone
    (job_document(scheduledFor=1893553445), "scheduledFor"),
    (job_document(retryCount=-1), "retryCount"),
    (job_document(retryCount=True), "retryCount"),
    (job_document(maxRetries="5"), "maxRetries"),
    (job_document(priority=9), "priority"),
    (job_document(priority=2.5), "priority"),
    (job_document(timeoutSeconds="600"), "timeoutSeconds"),
    (job_document(timeoutSeconds=-1), "timeoutSeconds"),
    (job_document(retryDelaySeconds="2"), "retryDelaySeconds"),
    (job_document(retryDelaySeconds=-0.5), "retryDelaySeconds"),
    (job_document(jobVersion=0), "jobVersion"),
    (job_document(workerId=5), "workerId"),
]


@pytest.mark.parametrize(("body", "field"), JOB_REFUSALS)
def test_bad_job_message_is_refused_naming_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        decode_job_message(body)
    assert caught.value.field == field


def test_missing_required_key_is_named() -> None:
    document = orjson.loads(encode_job_message(message()))
    del document["jobType"]
    with pytest.raises(ValidationError, match="jobType: is required") as caught:
        decode_job_message(orjson.dumps(document))
    assert caught.value.field == "jobType"


def test_bad_original_correlation_header_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        decode_job_message(encode_job_message(message()), {HEADER_ORIGINAL_CORRELATION_ID: "x"})
    assert caught.value.field == HEADER_ORIGINAL_CORRELATION_ID


def test_original_correlation_header_may_arrive_as_bytes() -> None:
    headers = {HEADER_ORIGINAL_CORRELATION_ID: str(JID).encode()}
    assert decode_job_message(encode_job_message(message()), headers).original_correlation_id == JID


# --- status records -------------------------------------------------------------------------


def test_status_records_keys_and_round_trip() -> None:
    records = [
        status(),
        status(
            status=OccurrenceStatus.COMPLETED,
            result={"rows": [1, 2, 3], "text": "ünïcode ✓"},
            exception=None,
            retry_at=None,
            failure_type=None,
            duration_ms=None,
            instance_id=None,
            attempt=1,
            started_at=datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        ),
    ]
    body = encode_status_records(records)
    documents = orjson.loads(body)
    assert [set(d) for d in documents] == [STATUS_KEYS, STATUS_KEYS]
    assert documents[0]["status"] == 3
    assert documents[0]["failureType"] == "retries_exhausted"
    assert documents[0]["retryAt"] == "2030-01-02T03:04:25.678901Z"
    assert documents[1]["startedAt"] == "2030-01-02T03:04:05.123456Z"
    assert decode_status_records(body) == records


def test_many_status_records_keep_their_order() -> None:
    records = [status(occurrence_id=uuid.uuid4(), attempt=n + 1) for n in range(50)]
    assert decode_status_records(encode_status_records(records)) == records


def test_empty_status_list_round_trips() -> None:
    assert encode_status_records([]) == b"[]"
    assert decode_status_records(b"[]") == []


def test_status_decoded_from_a_minimal_record() -> None:
    body = orjson.dumps([{"occurrenceId": str(OID), "status": 1, "timestamp": "2030-01-01T00:00Z"}])
    (record,) = decode_status_records(body)
    assert record.status is OccurrenceStatus.RUNNING
    assert record.attempt == 1
    assert record.failure_type is None
    assert record.timestamp == datetime(2030, 1, 1, tzinfo=UTC)


STATUS_REFUSALS: list[tuple[bytes, str]] = [
    (b'{"occurrenceId": "x"}', "body"),
    (b"[1]", "body"),
    (b"[[]]", "body"),
    (b"{", "body"),
    (status_document(status=42), "status"),
    (status_document(status="Completed"), "status"),
    (status_document(status=None), "status"),
    (status_document(attempt=0), "attempt"),
    (status_document(durationMs="fast"), "durationMs"),
    (status_document(retryAt="soon"), "retryAt"),
    (status_document(failureType="gremlins"), "failureType"),
    (status_document(instanceId=["a"]), "instanceId"),
    (status_document(exception=42), "exception"),
    (status_document(occurrenceId=str(OID)[:-1]), "occurrenceId"),
]


@pytest.mark.parametrize(("body", "field"), STATUS_REFUSALS)
def test_bad_status_records_are_refused_naming_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        decode_status_records(body)
    assert caught.value.field == field


def test_refusal_says_which_record() -> None:
    good = orjson.loads(encode_status_records([status()]))[0]
    bad = dict(good, timestamp=None)
    with pytest.raises(ValidationError, match="record 2: timestamp") as caught:
        decode_status_records(orjson.dumps([good, good, bad]))
    assert caught.value.field == "timestamp"


def test_unencodable_result_names_the_field() -> None:
    with pytest.raises(ValidationError, match="record 1") as caught:
        encode_status_records([status(), status(result={1j})])
    assert caught.value.field == "result"


# --- log records ----------------------------------------------------------------------------


def test_log_records_keys_and_round_trip() -> None:
    records = [
        log(),
        log(level="ERROR", message="", data=None, category=None, attempt=None, line=None),
    ]
    body = encode_log_records(records)
    assert [set(d) for d in orjson.loads(body)] == [LOG_KEYS, LOG_KEYS]
    assert decode_log_records(body) == records


LOG_REFUSALS: list[tuple[bytes, str]] = [
    (b'"text"', "body"),
    (log_document(level=20), "level"),
    (log_document(message=None), "message"),
    (log_document(data=[1, 2]), "data"),
    (log_document(category=1), "category"),
    (log_document(attempt=0), "attempt"),
    (log_document(line="7"), "line"),
    (log_document(line=True), "line"),
    (log_document(timestamp="2030-13-01T00:00:00Z"), "timestamp"),
]


def test_log_records_without_line_numbers_are_accepted() -> None:
    """Workers in other languages may leave ``attempt`` and ``line`` out."""
    document = orjson.loads(encode_log_records([log()]))[0]
    del document["attempt"], document["line"]
    (record,) = decode_log_records(orjson.dumps([document]))
    assert (record.attempt, record.line) == (None, None)


@pytest.mark.parametrize(("body", "field"), LOG_REFUSALS)
def test_bad_log_records_are_refused_naming_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        decode_log_records(body)
    assert caught.value.field == field


# --- dead letters ---------------------------------------------------------------------------


def test_dead_letter_is_the_job_message_plus_why() -> None:
    letter = DeadLetter(
        message=message(),
        failure_type=FailureType.POISON,
        exception="cannot decode jobData",
        failed_at=T0,
    )
    body = encode_dead_letter(letter)
    document = orjson.loads(body)
    assert set(document) == JOB_KEYS | {"failureType", "exception", "failedAt"}
    assert document["failureType"] == "poison"
    assert document["failedAt"] == "2030-01-02T03:04:05.678901Z"
    assert decode_dead_letter(body, job_message_headers(letter.message)) == letter


def test_a_rejected_job_message_reads_as_a_dead_letter_without_reason() -> None:
    original = message()
    letter = decode_dead_letter(encode_job_message(original), job_message_headers(original))
    assert letter == DeadLetter(message=original)


def test_bad_dead_letter_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        decode_dead_letter(job_document(failureType="???"))
    assert caught.value.field == "failureType"
    with pytest.raises(ValidationError) as caught:
        decode_dead_letter(job_document(failedAt="later"))
    assert caught.value.field == "failedAt"


# --- nesting --------------------------------------------------------------------------------


def nested(document: bytes, key: str, levels: int) -> bytes:
    """``document`` with the value of ``key`` replaced by arrays nested ``levels`` deep (as
    text: the encoder itself refuses to write such depths)."""
    marker = b'"__nested__"'
    placed = orjson.loads(document)
    records = placed if isinstance(placed, list) else [placed]
    records[0][key] = "__nested__"
    return orjson.dumps(placed).replace(marker, b"[" * levels + b"1" + b"]" * levels)


DEEP_DECODERS: list[tuple[Any, bytes, str]] = [
    (decode_job_message, job_document(), "jobData"),
    (decode_dead_letter, job_document(), "jobData"),
    (decode_status_records, status_document(), "result"),
    (decode_log_records, log_document(data={}), "data"),
]


@pytest.mark.parametrize(("decode", "document", "key"), DEEP_DECODERS)
@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 300, 1000])
def test_free_form_json_nested_too_deeply_is_refused_naming_the_field(
    decode: Any, document: bytes, key: str, levels: int
) -> None:
    """Between what orjson reads (1,024 levels) and what it writes (254) a value decoded but
    could never be stored or sent again: every retry of the batch carrying it failed. Now
    the message is refused, naming the field, and goes where poison goes."""
    with pytest.raises(ValidationError, match="nested more than") as caught:
        decode(nested(document, key, levels))
    assert caught.value.field == key


@pytest.mark.parametrize(("decode", "document", "key"), DEEP_DECODERS)
def test_free_form_json_at_the_depth_limit_is_taken(decode: Any, document: bytes, key: str) -> None:
    levels = MAX_JSON_DEPTH - 1 if key == "data" else MAX_JSON_DEPTH  # data: an object first
    if key == "data":
        body = nested(document, key, levels).replace(b'"data":[', b'"data":{"a":[', 1)
        body = body.replace(b"]" * levels, b"]" * levels + b"}", 1)
    else:
        body = nested(document, key, levels)
    assert decode(body)


def test_a_body_past_what_the_reader_takes_is_refused_as_the_body() -> None:
    with pytest.raises(ValidationError) as caught:
        decode_job_message(nested(job_document(), "jobData", 5000))
    assert caught.value.field == "body"


# --- properties -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=12,
)
utc_times = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


@given(
    data=json_values,
    scheduled=utc_times,
    retry=st.integers(0, 100),
    priority=st.sampled_from(Priority),
    timeout=st.none() | st.floats(0, 1e6),
    # NUL is not carried as such (it becomes U+FFFD: test_nul_characters_in_text_are_replaced).
    job_type=st.text(
        st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1
    ),
)
def test_any_job_message_round_trips(
    data: Any,
    scheduled: datetime,
    retry: int,
    priority: Priority,
    timeout: float | None,
    job_type: str,
) -> None:
    original = message(
        job_data=data,
        scheduled_for=scheduled,
        retry_count=retry,
        priority=priority,
        timeout_seconds=timeout,
        job_type=job_type,
    )
    body = encode_job_message(original)
    assert decode_job_message(body, job_message_headers(original)) == original


@given(
    result=json_values,
    code=st.sampled_from(OccurrenceStatus),
    when=utc_times,
    duration=st.none() | st.floats(0, 1e9),
)
def test_any_status_record_round_trips(
    result: Any, code: OccurrenceStatus, when: datetime, duration: float | None
) -> None:
    record = status(result=result, status=code, timestamp=when, duration_ms=duration)
    assert decode_status_records(encode_status_records([record])) == [record]


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash_a_decoder(body: bytes) -> None:
    fields: list[str | None] = []
    for decode in (decode_job_message, decode_status_records, decode_log_records):
        try:
            decode(body)
        except ValidationError as exc:  # anything else escapes and fails the test
            fields.append(exc.field)
    assert None not in fields


def test_driver_uuid_types_encode_as_their_string() -> None:
    # asyncpg hands the store its own uuid.UUID subclass; orjson knows only the exact type.
    from asyncpg.pgproto.pgproto import UUID as DriverUUID

    job_id = uuid.uuid4()
    body = encode_job_message(message(job_id=DriverUUID(str(job_id))))
    assert orjson.loads(body)["jobId"] == str(job_id)
    assert decode_job_message(body).job_id == job_id


# --- the messages the dispatcher sends ------------------------------------------------------


def test_every_job_message_the_dispatcher_sends_carries_the_retry_headers() -> None:
    from rota.core.models import Occurrence
    from rota.services.dispatcher import to_message

    first = Occurrence(
        id=OID,
        job_id=JID,
        job_type="GenerateReportJob",
        worker_id="reports",
        status=OccurrenceStatus.QUEUED,
        scheduled_for=T0,
        due_at=T0,
        created_at=T0,
        max_retries=4,
        retry_delay_seconds=0.2,
    )
    third = msgspec.structs.replace(first, attempt=3)
    for occurrence, retries in ((first, 0), (third, 2)):
        sent = to_message(occurrence, T0)
        assert job_message_headers(sent) == {
            HEADER_RETRY_COUNT: retries,
            HEADER_MAX_RETRIES: 4,
            HEADER_ORIGINAL_CORRELATION_ID: str(OID),
        }
        document = orjson.loads(encode_job_message(sent))
        assert document["retryCount"] == retries
        assert document["maxRetries"] == 4
        assert document["retryDelaySeconds"] == 0.2
        assert decode_job_message(encode_job_message(sent), job_message_headers(sent)) == sent


def test_nul_characters_in_text_are_replaced() -> None:
    """PostgreSQL text cannot hold NUL: one in an exception must not make a batch unstorable."""
    (record,) = decode_status_records(status_document(exception="boom\x00tail"))
    assert record.exception == "boom\ufffdtail"
    (line,) = decode_log_records(log_document(message="a\x00b", category="c\x00"))
    assert (line.message, line.category) == ("a\ufffdb", "c\ufffd")
