"""The reporter's fold of a Running report into the final one of the same flush: the final
record is copied whole, with the Running report's time as ``started_at``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import msgspec

from rota.core.models import FailureType, OccurrenceStatus, StatusRecord
from rota.worker.reporter import _with_start

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_the_final_record_is_copied_whole_with_its_start() -> None:
    values = {
        "occurrence_id": uuid.uuid4(),
        "status": OccurrenceStatus.FAILED,
        "timestamp": T0,
        "attempt": 3,
        "instance_id": "w-1",
        "result": {"n": 1},
        "exception": "boom",
        "duration_ms": 12.5,
        "retry_at": T0 + timedelta(seconds=30),
        "failure_type": FailureType.TIMED_OUT,
        "started_at": None,
    }
    # every field set to a value of its own (a field added later without one fails here)
    assert set(values) == {f.name for f in msgspec.structs.fields(StatusRecord)}
    record = StatusRecord(**values)  # type: ignore[arg-type]
    started = T0 - timedelta(seconds=1)
    folded = _with_start(record, started)
    assert folded == msgspec.structs.replace(record, started_at=started)
    assert folded.started_at == started
    assert record.started_at is None  # the record given is left as it was
