"""The wire reader on msgspec (``rota.core.wire``): what this version's dispatcher writes is read
back exactly; any variation of a job message is either read into exact types or refused with a
``ValidationError`` naming a key of the message; envelopes are read job by job; msgspec's error
text is turned into the field it names (a change of its wording fails here)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rota.core import wire
from rota.core.errors import ValidationError
from rota.core.jsonlimits import MAX_JSON_DEPTH
from rota.core.models import JobMessage, LogRecord, OccurrenceStatus, Priority, StatusRecord
from rota.core.wire import (
    HEADER_ORIGINAL_CORRELATION_ID,
    HEADER_TRACEPARENT,
    MAX_ENVELOPE_JOBS,
    EnvelopePart,
    _invalid,
    decode_job_envelope,
    decode_job_message,
    decode_status_records,
    encode_envelope_part,
    encode_job_envelope,
    encode_job_message,
    encode_log_records,
    encode_status_records,
    job_message_headers,
)

OID = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057")
MESSAGE = JobMessage(
    occurrence_id=OID,
    job_id=uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8058"),
    job_type="report.build",
    job_data={"a": [1, 2, {"b": None}]},
    scheduled_for=datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    timestamp=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
    retry_count=2,
    max_retries=5,
    priority=Priority.HIGH,
    timeout_seconds=30.0,
    job_version=3,
    worker_id="w1",
    original_correlation_id=uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8059"),
    retry_delay_seconds=1.5,
    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
)
CANONICAL: dict[str, Any] = orjson.loads(encode_job_message(MESSAGE))
HEADERS = {**job_message_headers(MESSAGE)}

_ODD_VALUES = [
    None,
    True,
    False,
    0,
    1,
    -1,
    4,
    5,
    2.5,
    -0.5,
    "",
    "x\x00y",
    "report.build",
    str(OID),
    str(OID).upper(),
    "{" + str(OID) + "}",
    "urn:uuid:" + str(OID),
    OID.hex,
    "01890a5d_ac96-774b-bcce-b302099a8057",
    "not-a-uuid",
    "2030-01-02T03:04:05Z",
    "2030-01-02T03:04:05+02:00",
    "2030-01-02T03:04:05",
    "2030-01-02T03:04Z",
    "2030-01-02",
    [],
    {},
    [[[[]]]],
    {"a": {"b": {"c": 1}}},
]
_MISSING = object()
_TYPES: dict[str, tuple[type, ...]] = {
    "occurrence_id": (uuid.UUID,),
    "job_id": (uuid.UUID,),
    "job_type": (str,),
    "scheduled_for": (datetime,),
    "timestamp": (datetime,),
    "retry_count": (int,),
    "max_retries": (int,),
    "priority": (Priority,),
    "timeout_seconds": (float, type(None)),
    "job_version": (int,),
    "worker_id": (str, type(None)),
    "original_correlation_id": (uuid.UUID, type(None)),
    "retry_delay_seconds": (float, type(None)),
    "traceparent": (str, type(None)),
}


def _read(body: bytes, headers: dict[str, Any] | None) -> JobMessage | ValidationError:
    try:
        return decode_job_message(body, headers)
    except ValidationError as exc:
        return exc


def test_what_the_dispatcher_writes_is_read_back_exactly() -> None:
    assert HEADERS[HEADER_TRACEPARENT] == MESSAGE.traceparent
    assert decode_job_message(orjson.dumps(CANONICAL), HEADERS) == MESSAGE


@settings(max_examples=400, deadline=None)
@example(changes={"timestamp": "2030-01-02T03:04:05+02:00"}, header=None)
@example(changes={"scheduledFor": "2030-01-02T03:04Z"}, header=None)
@example(changes={"timeoutSeconds": 4, "retryDelaySeconds": 0}, header=None)
@example(changes={"jobType": "x\x00y", "workerId": "x\x00y"}, header=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(sorted(CANONICAL)),
        st.sampled_from([_MISSING, *_ODD_VALUES]),
        max_size=4,
    ),
    header=st.sampled_from([None, str(OID), "bad", b"01890a5d-ac96-774b-bcce-b302099a8057"]),
)
def test_any_variation_is_read_into_exact_types_or_refused_naming_its_key(
    changes: dict[str, Any], header: object
) -> None:
    doc = dict(CANONICAL)
    for key, value in changes.items():
        if value is _MISSING:
            doc.pop(key, None)
        else:
            doc[key] = value
    headers = None if header is None else {HEADER_ORIGINAL_CORRELATION_ID: header}
    message = _read(orjson.dumps(doc), headers)
    if isinstance(message, ValidationError):
        assert message.field in {*CANONICAL, HEADER_ORIGINAL_CORRELATION_ID}
        return
    for name, types in _TYPES.items():
        value = getattr(message, name)
        assert type(value) in types, (name, value)
        if isinstance(value, datetime):
            assert value.tzinfo is UTC
        if isinstance(value, str):
            assert "\x00" not in value
    for key, value in changes.items():  # what was sent, as read
        if key == "jobData" and value is not _MISSING:
            assert message.job_data == value
        if key in ("timestamp", "scheduledFor") and isinstance(value, str):
            read = message.timestamp if key == "timestamp" else message.scheduled_for
            assert read == datetime.fromisoformat(value)


def test_times_in_other_zones_and_uuids_in_other_spellings_are_read() -> None:
    body = orjson.dumps(
        {
            **CANONICAL,
            "occurrenceId": "{" + str(OID).upper() + "}",
            "jobId": "urn:uuid:" + str(MESSAGE.job_id),
            "timestamp": "2030-01-02T05:04:05+02:00",
            "scheduledFor": "2030-01-02T03:04Z",
        }
    )
    message = decode_job_message(body)
    assert (message.occurrence_id, message.job_id) == (OID, MESSAGE.job_id)
    assert message.timestamp == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert message.timestamp.tzinfo is UTC
    assert message.scheduled_for == datetime(2030, 1, 2, 3, 4, tzinfo=UTC)


def test_every_record_of_a_list_is_read_in_utc_and_in_other_spellings() -> None:
    plus_two = timezone(timedelta(hours=2))
    records = [
        StatusRecord(
            occurrence_id=uuid.uuid4(),
            status=OccurrenceStatus.COMPLETED,
            timestamp=datetime(2030, 1, 2, 5, n, tzinfo=plus_two),
            started_at=datetime(2030, 1, 2, 5, 0, tzinfo=plus_two),
        )
        for n in range(20)
    ]
    documents = orjson.loads(encode_status_records(records))
    assert {d["timestamp"][-1] for d in documents} == {"Z"}  # written in UTC
    for document in documents:
        document["timestamp"] = document["timestamp"].replace(":00Z", "Z")  # no seconds
    read = decode_status_records(orjson.dumps(documents))
    assert read == [
        msgspec.structs.replace(
            r, timestamp=r.timestamp.astimezone(UTC), started_at=datetime(2030, 1, 2, 3, tzinfo=UTC)
        )
        for r in records
    ]
    assert all(r.timestamp.tzinfo is UTC and r.started_at.tzinfo is UTC for r in read)  # type: ignore[union-attr]


def test_records_are_written_byte_for_byte_as_before() -> None:
    """The keys in the order the orjson writer had (a change of the records' field order
    would show here)."""
    status = StatusRecord(
        occurrence_id=OID, status=OccurrenceStatus.RUNNING, timestamp=MESSAGE.timestamp
    )
    assert encode_status_records([status]) == (
        b'[{"occurrenceId":"01890a5d-ac96-774b-bcce-b302099a8057","status":1,'
        b'"timestamp":"2030-01-02T03:04:05Z","instanceId":null,"attempt":1,"result":null,'
        b'"exception":null,"durationMs":null,"retryAt":null,"failureType":null,"startedAt":null}]'
    )
    line = LogRecord(occurrence_id=OID, timestamp=MESSAGE.timestamp, level="INFO", message="m")
    assert encode_log_records([line]) == (
        b'[{"occurrenceId":"01890a5d-ac96-774b-bcce-b302099a8057",'
        b'"timestamp":"2030-01-02T03:04:05Z","level":"INFO","message":"m","data":null,'
        b'"category":null,"attempt":null,"line":null}]'
    )
    assert list(CANONICAL) == [
        "occurrenceId", "jobId", "jobType", "jobData", "correlationId", "timestamp",
        "scheduledFor", "retryCount", "maxRetries", "priority", "timeoutSeconds", "jobVersion",
        "workerId", "retryDelaySeconds",
    ]  # fmt: skip


# --- msgspec's refusals, as our ValidationError --------------------------------------------

MSGSPEC_REFUSALS: list[tuple[bytes, str, str]] = [
    (orjson.dumps({**CANONICAL, "retryCount": "1"}), "retryCount", "Expected `int`, got `str`"),
    (orjson.dumps({**CANONICAL, "retryCount": -1}), "retryCount", "Expected `int` >= 0"),
    (orjson.dumps({**CANONICAL, "priority": 9}), "priority", "Invalid enum value 9"),
    (orjson.dumps({**CANONICAL, "priority": True}), "priority", "Expected `int`, got `bool`"),
    (orjson.dumps({k: v for k, v in CANONICAL.items() if k != "jobId"}), "jobId", "is required"),
    (orjson.dumps({**CANONICAL, "jobId": "nope"}), "jobId", "Invalid UUID"),
    (
        orjson.dumps({**CANONICAL, "timestamp": "2030-01-02T03:04:05"}),
        "timestamp",
        "Expected `datetime` with a timezone component",
    ),
    (
        orjson.dumps({**CANONICAL, "timeoutSeconds": -1}),
        "timeoutSeconds",
        "Expected `float` >= 0.0",
    ),
    (b"[1]", "body", "Expected `object`, got `array`"),
]


@pytest.mark.parametrize(("body", "field", "text"), MSGSPEC_REFUSALS)
def test_msgspec_refusals_name_the_key(body: bytes, field: str, text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        decode_job_message(body)
    assert caught.value.field == field
    assert str(caught.value) == (text if field == "body" else f"{field}: {text}")


@pytest.mark.parametrize(
    ("text", "where", "field", "said"),
    [
        ("Expected `int`, got `str` - at `$[3].status`", "", "status", "record 3: status: "),
        ("Object missing required field `level` - at `$[12]`", "", "level", "record 12: level: "),
        ("Object missing required field `jobs`", "", "jobs", "jobs: is required"),
        ("Expected `array`, got `object`", "", "body", "Expected `array`, got `object`"),
        ("Expected `object`, got `int` - at `$[0]`", "", "body", "record 0: Expected"),
        ("Invalid UUID - at `$.jobId`", "jobs[4]: ", "jobId", "jobs[4]: jobId: Invalid UUID"),
        ("Expected `str` - at `$.headers.traceparent`", "", "headers", "headers: Expected"),
    ],
)
def test_msgspec_paths_are_read_into_the_key_and_record(
    text: str, where: str, field: str, said: str
) -> None:
    refusal = _invalid(msgspec.ValidationError(text), where)
    assert refusal.field == field
    assert str(refusal).startswith(said)


def test_a_list_of_records_names_the_record_and_the_key() -> None:
    record = StatusRecord(
        occurrence_id=OID, status=OccurrenceStatus.RUNNING, timestamp=MESSAGE.timestamp
    )
    good = orjson.loads(encode_status_records([record]))[0]
    with pytest.raises(ValidationError, match=r"^record 1: status: Invalid enum value 9$") as c:
        decode_status_records(orjson.dumps([good, {**good, "status": 9}]))
    assert c.value.field == "status"


# --- envelopes ------------------------------------------------------------------------------


def _messages(count: int) -> list[JobMessage]:
    return [
        msgspec.structs.replace(MESSAGE, occurrence_id=uuid.uuid4(), job_data={"n": n})
        for n in range(count)
    ]


def test_an_envelope_round_trips_with_each_jobs_headers() -> None:
    messages = _messages(4)
    # What the dispatcher sends: the correlation id is the occurrence id, and left out.
    messages[1] = msgspec.structs.replace(
        messages[1], original_correlation_id=messages[1].occurrence_id, traceparent=None
    )
    messages[3] = msgspec.structs.replace(
        messages[3], original_correlation_id=messages[3].occurrence_id
    )
    body = encode_job_envelope(messages)
    elements = orjson.loads(body)["jobs"]
    assert [set(e) - set(CANONICAL) for e in elements] == [{"headers"}, set(), *[{"headers"}] * 2]
    assert elements[0]["headers"] == {
        HEADER_ORIGINAL_CORRELATION_ID: str(MESSAGE.original_correlation_id),
        HEADER_TRACEPARENT: MESSAGE.traceparent,
    }
    assert elements[3]["headers"] == {HEADER_TRACEPARENT: MESSAGE.traceparent}
    parts = decode_job_envelope(body)
    assert [p.message for p in parts] == messages
    assert [p.index for p in parts] == [0, 1, 2, 3]
    assert all(p.error is None for p in parts)
    # One without any correlation id is read as its occurrence's, as the worker runs it.
    alone = msgspec.structs.replace(messages[1], original_correlation_id=None)
    (part,) = decode_job_envelope(encode_job_envelope([alone]))
    assert part.message is not None
    assert part.message.original_correlation_id == alone.occurrence_id


def test_an_envelope_with_a_job_in_other_spellings_reads_every_job() -> None:
    """A job whose times and ids the one-pass reader refuses sends the envelope to the reader
    of one element at a time, which reads them as a single message's."""
    messages = _messages(3)
    document = orjson.loads(encode_job_envelope(messages))
    document["jobs"][1]["occurrenceId"] = "{" + str(messages[1].occurrence_id).upper() + "}"
    document["jobs"][1]["scheduledFor"] = "2030-01-02T05:04:05.678901+02:00"
    document["jobs"][2]["timestamp"] = "2030-01-02T03:04Z"
    parts = decode_job_envelope(orjson.dumps(document))
    assert all(p.error is None for p in parts)
    assert [p.message for p in parts] == [
        messages[0],
        messages[1],
        msgspec.structs.replace(messages[2], timestamp=datetime(2030, 1, 2, 3, 4, tzinfo=UTC)),
    ]


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 900])
def test_a_bad_job_of_an_envelope_is_refused_alone_and_given_back_as_received(
    levels: int,
) -> None:
    messages = _messages(3)
    document = orjson.loads(encode_job_envelope(messages))
    document["jobs"][1]["priority"] = 9
    text = orjson.dumps(document).replace(b'{"n":2}', b"[" * levels + b"]" * levels)
    text = text.replace(b'"jobs":[{', b'"jobs":[{ ', 1)  # as received: spacing kept
    parts = decode_job_envelope(text)
    assert [p.message for p in parts] == [messages[0], None, None]
    assert [p.error.field if p.error else None for p in parts] == [None, "priority", "jobData"]
    assert str(parts[1].error).startswith("jobs[1]: priority: ")
    assert str(parts[2].error).startswith("jobs[2]: jobData: nested more than")
    assert orjson.loads(encode_envelope_part(parts[1]))["priority"] == 9
    assert encode_envelope_part(parts[0]).startswith(b'{ "occurrenceId":')
    single = EnvelopePart(0, None, MESSAGE)  # a single message, as the consumer makes it
    assert single.message == MESSAGE


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[]", "body"),
        (b"{}", "jobs"),
        (b'{"jobs": {}}', "jobs"),
        (b'{"jobs": []}', "jobs"),
        (orjson.dumps({"jobs": [1] * (MAX_ENVELOPE_JOBS + 1)}), "jobs"),
        (b'{"jobs": [', "body"),
    ],
)
def test_an_envelope_that_is_no_envelope_is_refused_whole(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        decode_job_envelope(body)
    assert caught.value.field == field


def test_odd_jobs_of_an_envelope_name_their_field() -> None:
    bad_header = {HEADER_ORIGINAL_CORRELATION_ID: "?"}
    body = orjson.dumps(
        {"jobs": [1, {**CANONICAL, "headers": "x"}, {**CANONICAL, "headers": bad_header}]}
    )
    parts = decode_job_envelope(body)
    assert [p.error.field if p.error else None for p in parts] == [
        "body",
        "headers",
        HEADER_ORIGINAL_CORRELATION_ID,
    ]


def test_the_record_nesting_too_deeply_is_named_among_many_that_do_not() -> None:
    records = [
        StatusRecord(
            occurrence_id=uuid.uuid4(),
            status=OccurrenceStatus.COMPLETED,
            timestamp=MESSAGE.timestamp,
            result={"a": [{"b": [n]}]},  # 4 levels each: 400 in all, none too deep
        )
        for n in range(100)
    ]
    body = encode_status_records(records)
    assert decode_status_records(body) == records
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    documents = orjson.loads(body)
    documents[57]["result"] = "__deep__"
    with pytest.raises(ValidationError, match=r"^record 57: result: nested more than") as c:
        decode_status_records(orjson.dumps(documents).replace(b'"__deep__"', deep))
    assert c.value.field == "result"


def test_every_body_type_reads_the_same() -> None:
    body = orjson.dumps(CANONICAL)
    for text in (body, body.decode(), bytearray(body), memoryview(body)):
        assert decode_job_message(text, HEADERS) == MESSAGE
    record = StatusRecord(
        occurrence_id=OID,
        status=OccurrenceStatus.RUNNING,
        timestamp=MESSAGE.timestamp,
        exception="a\x00b",
    )
    records = encode_status_records([record])
    read = [
        decode_status_records(text) for text in (records, records.decode(), memoryview(records))
    ]
    assert read[0] == read[1] == read[2]
    assert read[0][0].exception == "a\ufffdb"


def test_an_envelope_is_looked_at_for_deep_values_once_not_once_a_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each job's data a container: the count of the envelope's brackets is taken once (taken
    for each job, it made reading an envelope quadratic in its size)."""
    looked: list[int] = []
    shallow = wire._shallow

    def counting(body: bytes | str, objects: int = 1) -> bool:
        looked.append(len(body))
        return shallow(body, objects)

    monkeypatch.setattr(wire, "_shallow", counting)
    messages = _messages(200)
    parts = decode_job_envelope(encode_job_envelope(messages))
    assert [p.message for p in parts] == messages
    assert len(looked) == 1
