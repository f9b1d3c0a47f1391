"""Change events: building them, the publisher's buffer, and worker roster changes."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from rota.coordination.memory import MemoryCoordination
from rota.core.errors import ValidationError
from rota.core.events import (
    LOG_LINES_PER_EVENT,
    LOG_MESSAGE_CHARS,
    Event,
    format_event_id,
    occurrence_changed,
    occurrence_created,
    occurrence_logs,
    occurrence_updated,
    pack_events,
    parse_event_id,
    unpacked,
)
from rota.core.ids import new_id
from rota.core.models import Job, JsonValue, LogRecord, OccurrenceStatus, WorkerInfo
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.records import AppliedChange
from rota.services.events import EventPublisher
from rota.services.workers import roster_changes

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_event_ids_round_trip_and_sort() -> None:
    assert parse_event_id("1700000000000-3-12") == (1700000000000, 3, 12)
    assert format_event_id((1700000000000, 3, 12)) == "1700000000000-3-12"
    assert parse_event_id("5-0-10") > parse_event_id("5-0-9")
    with pytest.raises(ValidationError) as caught:
        parse_event_id("5-0", field="Last-Event-ID")
    assert caught.value.field == "Last-Event-ID"
    for too_big in ("99999999999999999999-0-0", f"1-{2**63}-0", "1-0-9999999999"):
        with pytest.raises(ValidationError):
            parse_event_id(too_big)


def test_log_events_are_compact_one_per_occurrence() -> None:
    first, second = new_id(), new_id()
    lines = [
        LogRecord(
            occurrence_id=first,
            timestamp=NOW + timedelta(seconds=n),
            level="INFO",
            message=f"line {n} " + "x" * 1000,
        )
        for n in range(30)
    ]
    lines.append(LogRecord(occurrence_id=second, timestamp=NOW, level="ERROR", message="boom"))
    one, two = occurrence_logs(lines)
    assert one.data["occurrenceId"] == str(first)
    assert one.data["count"] == 30
    shown = one.data["lines"]
    assert len(shown) == LOG_LINES_PER_EVENT
    assert shown[-1]["message"].startswith("line 29 ")
    assert all(len(line["message"]) == LOG_MESSAGE_CHARS for line in shown)
    assert one.data["message"] == shown[-1]["message"]
    assert (two.data["level"], two.data["message"], two.data["count"]) == ("ERROR", "boom", 1)


def test_a_runs_events_are_rendered_when_first_read_and_equal_the_payload() -> None:
    occurrence = new_occurrence(
        Job(id=new_id(), job_type="report", execute_at=NOW, next_run_at=None),
        NOW,
        NOW,
        PlanSettings(),
    )
    created = occurrence_created(occurrence)
    updated = occurrence_updated(
        occurrence_id=occurrence.id,
        job_id=occurrence.job_id,
        job_type="report",
        worker_id="w",
        instance_id="w-1",
        from_status=OccurrenceStatus.QUEUED,
        status=OccurrenceStatus.RUNNING,
        attempt=1,
    )
    assert created.type == "occurrence.created"
    assert created.data == {
        "occurrenceId": str(occurrence.id),
        "jobId": str(occurrence.job_id),
        "jobType": "report",
        "workerId": None,
        "status": 0,
        "statusName": "Queued",
        "attempt": 1,
        "scheduledFor": NOW.isoformat(),
        "skipReason": None,
    }
    assert updated.job_id == str(occurrence.job_id)
    assert updated.occurrence_id == str(occurrence.id)
    assert (updated.data["fromStatus"], updated.data["status"]) == (0, 1)
    assert updated.data["statusName"] == "Running"
    assert updated == Event(updated.type, dict(updated.data))
    applied = AppliedChange(
        occurrence_id=occurrence.id,
        job_id=occurrence.job_id,
        from_status=OccurrenceStatus.QUEUED,
        to_status=OccurrenceStatus.RUNNING,
        attempt=1,
        job_type="report",
        worker_id="w",
        instance_id="w-1",
    )
    assert occurrence_changed(applied).data == updated.data  # a store's change: the same

    rendered: list[int] = []

    def render() -> dict[str, JsonValue]:
        rendered.append(7)
        return {"n": 7}

    deferred = Event.deferred("job.updated", render)
    assert rendered == []  # nothing rendered while nobody reads it
    assert deferred.data == {"n": 7}
    assert deferred.data == {"n": 7}
    assert rendered == [7]  # once


async def test_publisher_batches_and_drops_the_oldest_when_full() -> None:
    coordination = MemoryCoordination()
    publisher = EventPublisher(coordination, max_pending=3)
    publisher.emit(Event("job.updated", {"n": n}) for n in range(5))
    publisher.emit([])
    assert publisher.stats.dropped == 2
    await publisher.flush()
    kept = await coordination.replay(None)
    assert [e.data["n"] for _, e in kept] == [2, 3, 4]
    assert publisher.stats.published == 3


async def test_publisher_loop_publishes_until_stopped() -> None:
    coordination = MemoryCoordination()
    publisher = EventPublisher(coordination)
    feed = coordination.events()
    task = asyncio.create_task(publisher.run())
    publisher.emit([Event("job.created", {"jobId": "a"})])
    _, event = await asyncio.wait_for(anext(feed), 5)
    assert event.data == {"jobId": "a"}
    publisher.emit([Event("job.deleted", {"jobId": "a"})])
    publisher.stop()
    await asyncio.wait_for(task, 5)
    assert [e.type for _, e in await coordination.replay(None)] == ["job.created", "job.deleted"]


def _worker(instance: str, concurrency: int = 4, load: int = 0) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance,
        worker_id="reports",
        host="h",
        pid=1,
        job_types={"Report": {}},
        concurrency=concurrency,
        current_load=load,
    )


def test_roster_changes_report_joins_leaves_and_declarations_not_load() -> None:
    before = {"a": _worker("a"), "b": _worker("b")}
    after = {"b": _worker("b", load=3), "c": _worker("c"), "a2": _worker("a2")}
    changes = [(e.data["change"], e.data["instanceId"]) for e in roster_changes(before, after)]
    assert changes == [("left", "a"), ("joined", "a2"), ("joined", "c")]
    bigger = {"b": _worker("b", concurrency=8)}
    (event,) = roster_changes({"b": _worker("b")}, bigger)
    assert (event.type, event.data["change"], event.data["concurrency"]) == (
        "worker.changed",
        "changed",
        8,
    )


def test_config_masking_by_name_and_in_urls() -> None:
    from rota.api.routes.admin import MASK, mask_secrets

    settings = {
        "auth": {
            "jwt_secret": "s" * 40,
            "admin_password": "hunter2",
            "access_token_minutes": 15,
            "signing_key": "k",
            "refresh_token_days": None,
        },
        "database_url": "postgresql://rota:pw@db:5432/rota",
        "redis_url": "redis://cache:6379/0",
        "amqp_url": "amqp://guest:guest@mq:5672/%2F",
        "name_prefix": "rota",
        "bucket_count": 16,
        "mirrors": ["https://u:p@mirror.example/x"],
    }
    masked = mask_secrets(settings)
    assert masked["auth"] == {
        "jwtSecret": MASK,
        "adminPassword": MASK,
        "accessTokenMinutes": 15,
        "signingKey": MASK,
        "refreshTokenDays": None,
    }
    assert masked["databaseUrl"] == f"postgresql://rota:{MASK}@db:5432/rota"
    assert masked["redisUrl"] == "redis://cache:6379/0"
    assert masked["amqpUrl"] == f"amqp://guest:{MASK}@mq:5672/%2F"
    assert (masked["namePrefix"], masked["bucketCount"]) == ("rota", 16)
    assert masked["mirrors"] == [f"https://u:{MASK}@mirror.example/x"]


class _DriverUUID(uuid.UUID):
    """A UUID of another class, as a database driver returns them (asyncpg's)."""


def test_run_events_pack_ids_of_any_uuid_class() -> None:
    occurrence_id, job_id = _DriverUUID(int=7), _DriverUUID(int=8)
    change = AppliedChange(
        occurrence_id=occurrence_id,
        job_id=job_id,
        from_status=OccurrenceStatus.QUEUED,
        to_status=OccurrenceStatus.COMPLETED,
        attempt=1,
    )
    event = occurrence_changed(change)
    [[kind, payload]] = orjson.loads(pack_events([event]))
    read = unpacked(kind, payload)
    assert read.data == event.data
    assert (read.occurrence_id, read.job_id) == (str(occurrence_id), str(job_id))
