"""The worker's secrets (rota.worker.secrets): where values come from, and masking."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec

import rota
from rota.core.ids import new_id
from rota.core.models import FailureType, JobMessage, LogRecord, OccurrenceStatus, StatusRecord
from rota.worker.secrets import MAX_SECRET_BYTES, SEALED, WorkerSecrets


def test_values_come_from_prefixed_variables_then_files(tmp_path: Path) -> None:
    (tmp_path / "DB_PASSWORD").write_bytes(b"from-the-file\r\n")
    (tmp_path / "BOTH").write_text("file-loses")
    (tmp_path / "HUGE").write_bytes(b"x" * (MAX_SECRET_BYTES + 1))
    (tmp_path / "adir").mkdir()
    environ = {"ROTA_SECRET_BOTH": "env-wins", "PATH": "/usr/bin", "ROTA_AUTH_SECRET": "s"}
    secrets = WorkerSecrets(environ=environ, directory=tmp_path)
    assert secrets.lookup("DB_PASSWORD") == "from-the-file"
    assert secrets.lookup("BOTH") == "env-wins"
    assert secrets.lookup("PATH") is None  # no prefix, no file: not a secret
    assert secrets.lookup("AUTH_SECRET") is None
    assert secrets.lookup("HUGE") is None
    assert secrets.lookup("adir") is None
    assert secrets.lookup("missing") is None
    assert WorkerSecrets(environ={}, directory=tmp_path / "nope").lookup("x") is None


def test_records_and_log_lines_are_masked_once_a_value_was_resolved() -> None:
    secrets = WorkerSecrets(environ={"ROTA_SECRET_TOKEN": "tok-123456"})
    now = datetime.now(UTC)
    record = StatusRecord(
        occurrence_id=new_id(),
        status=OccurrenceStatus.FAILED,
        timestamp=now,
        result={"echo": "tok-123456"},
        exception="HTTPError: 401 for Bearer tok-123456",
    )
    assert secrets.record(record) is record  # nothing resolved yet: nothing to mask
    assert secrets._remembered("TOKEN") == "tok-123456"
    masked = secrets.record(record)
    assert masked.result == {"echo": "[secret TOKEN]"}
    assert masked.exception == "HTTPError: 401 for Bearer [secret TOKEN]"
    lines: list[LogRecord] = []
    sink = secrets.sink(lines.append)
    sink(
        LogRecord(
            occurrence_id=record.occurrence_id,
            timestamp=now,
            level="INFO",
            message="sent tok-123456",
            data={"header": "Bearer tok-123456"},
        )
    )
    assert (lines[0].message, lines[0].data) == (
        "sent [secret TOKEN]",
        {"header": "Bearer [secret TOKEN]"},
    )


def test_job_data_still_sealed_fails_the_attempt_for_good_saying_why() -> None:
    """Encryption at rest with sealed messages and a worker without the keys (or keys that do
    not open it): the handler never gets the envelope as its data."""

    @rota.job("sealed-data")
    def handler(ctx: rota.JobContext, data: dict[str, object]) -> None: ...

    now = datetime.now(UTC)
    message = JobMessage(
        occurrence_id=new_id(),
        job_id=new_id(),
        job_type="sealed-data",
        job_data={"$enc": "v1:AAAA"},
        scheduled_for=now,
        timestamp=now,
    )
    definition, why = WorkerSecrets(environ={}).parse(handler, message)
    assert definition is None
    assert why == (FailureType.PERMANENT, SEALED)
    plain = msgspec.structs.replace(message, job_data={"n": 1})
    assert WorkerSecrets(environ={}).parse(handler, plain) == (handler, {"n": 1})
