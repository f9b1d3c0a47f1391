"""The fast path of job messages (``rota.core.wire._fast_job_message``): it takes what this
version's dispatcher writes, and for any document it either gives what the validating reader
gives or leaves the document to that reader (so refusals, and the fields they name, are the
reader's)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rota.core.errors import ValidationError
from rota.core.models import JobMessage, Priority
from rota.core.wire import (
    HEADER_ORIGINAL_CORRELATION_ID,
    HEADER_TRACEPARENT,
    _fast_job_message,
    _read_job_message,
    _Reader,
    encode_job_message,
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
    "2030-01-02",
    [],
    {},
    [[[[]]]],
    {"a": {"b": {"c": 1}}},
]
_MISSING = object()


def _slow(doc: dict[str, Any], headers: dict[str, Any] | None) -> JobMessage | ValidationError:
    try:
        return _read_job_message(_Reader(doc, ""), headers)
    except ValidationError as exc:
        return exc


def _fast(
    doc: dict[str, Any], headers: dict[str, Any] | None
) -> JobMessage | ValidationError | None:
    try:
        return _fast_job_message(dict(doc), headers)
    except ValidationError as exc:
        return exc


def test_what_the_dispatcher_writes_takes_the_fast_path() -> None:
    headers = job_message_headers(MESSAGE)
    headers[HEADER_TRACEPARENT] = MESSAGE.traceparent or ""
    assert _fast_job_message(dict(CANONICAL), headers) == MESSAGE
    assert _slow(dict(CANONICAL), headers) == MESSAGE


@settings(max_examples=400, deadline=None)
@example(changes={"timestamp": "2030-01-02T03:04:05+02:00"}, header=None)
@example(changes={"scheduledFor": "2030-01-02T03:04:05+02:00"}, header=None)
@example(changes={"timeoutSeconds": 4, "retryDelaySeconds": 0}, header=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(sorted(CANONICAL)),
        st.sampled_from([_MISSING, *_ODD_VALUES]),
        max_size=4,
    ),
    header=st.sampled_from([None, str(OID), "bad", b"01890a5d-ac96-774b-bcce-b302099a8057"]),
)
def test_the_fast_path_gives_what_the_reader_gives_or_leaves_it_to_the_reader(
    changes: dict[str, Any], header: object
) -> None:
    doc = dict(CANONICAL)
    for key, value in changes.items():
        if value is _MISSING:
            doc.pop(key, None)
        else:
            doc[key] = value
    headers = None if header is None else {HEADER_ORIGINAL_CORRELATION_ID: header}
    fast = _fast(doc, headers)
    slow = _slow(doc, headers)
    if isinstance(fast, ValidationError):  # the headers are read by the same code on both paths
        assert isinstance(slow, ValidationError)
        assert slow.field == fast.field
        return
    if fast is not None:
        assert isinstance(slow, JobMessage)
        assert _exactly(fast) == _exactly(slow)


def _exactly(message: JobMessage) -> list[tuple[str, object, type, object]]:
    """Each field's value, type and (datetimes) time zone: equal values may differ in these."""
    return [
        (field, value, type(value), getattr(value, "tzinfo", None))
        for field in JobMessage.__dataclass_fields__
        for value in [getattr(message, field)]
    ]
