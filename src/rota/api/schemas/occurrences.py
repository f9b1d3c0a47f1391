"""Bodies of the occurrence endpoints: occurrences, their status history and logs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field, StringConstraints

from rota.api.schemas.common import (
    NO_NUL,
    REDACTED_JOB_DATA,
    ApiModel,
    InputModel,
    status_name,
)
from rota.core.models import LogRecord, Occurrence, OccurrenceStatus, StatusChange
from rota.core.security import ExceptionText

DETAIL_LOG_LINES = 100
"""How many log lines ``GET /occurrences/{id}`` shows in ``logs``."""


class LogLine(ApiModel):
    seq: int
    timestamp: datetime
    level: str
    message: str
    data: dict[str, Any] | None
    category: str | None
    attempt: int | None = Field(description="The attempt that wrote the line, if known.")

    @classmethod
    def of(cls, seq: int, record: LogRecord) -> LogLine:
        return cls(
            seq=seq,
            timestamp=record.timestamp,
            level=record.level,
            message=record.message,
            attempt=record.attempt,
            data=None if record.data is None else dict(record.data),
            category=record.category,
        )


class StatusChangeOut(ApiModel):
    timestamp: datetime
    from_: OccurrenceStatus | None = Field(alias="from")
    to: OccurrenceStatus
    attempt: int
    reason: str | None

    @classmethod
    def of(cls, change: StatusChange) -> StatusChangeOut:
        return cls(
            timestamp=change.timestamp,
            from_=change.from_status,
            to=change.to_status,
            attempt=change.attempt,
            reason=change.reason,
        )


class OccurrenceOut(ApiModel):
    id: UUID
    job_id: UUID
    job_type: str
    job_name: str = Field(description="The job type again, under the reference's name.")
    job_display_name: str | None = Field(
        None,
        description="The job's display name (its type when it has none), read for a list's "
        "page at once; null when the job was deleted (and in answers to a change).",
    )
    correlation_id: UUID
    worker_id: str | None
    instance_id: str | None = Field(description="The worker instance that reported last.")
    status: OccurrenceStatus
    status_name: str
    scheduled_for: datetime = Field(
        description="The nominal fire time (its identity, unique per job); a run of a job with "
        "jitter is sent jitterSeconds later."
    )
    due_at: datetime
    jitter_seconds: float | None = Field(
        None, description="The random delay its job's jitter gave it; null: none."
    )
    start_time: datetime | None
    end_time: datetime | None
    duration_ms: float | None
    result: Any
    exception: str | None
    retry_count: int
    attempt: int
    max_retries: int
    skip_reason: str | None
    trigger_reason: str | None
    created_at: datetime
    last_heartbeat: datetime | None
    job_version: int

    @classmethod
    def fields_of(cls, occ: Occurrence, shown: ExceptionText | None = None) -> dict[str, Any]:
        """``shown``: how the exception is shown to the caller (whole by default)."""
        return {
            "id": occ.id,
            "job_id": occ.job_id,
            "job_type": occ.job_type,
            "job_name": occ.job_type,
            "correlation_id": occ.id,
            "worker_id": occ.worker_id,
            "instance_id": occ.instance_id,
            "status": occ.status,
            "status_name": status_name(occ.status),
            "scheduled_for": occ.scheduled_for,
            "due_at": occ.due_at,
            "jitter_seconds": occ.jitter_seconds,
            "start_time": occ.start_time,
            "end_time": occ.end_time,
            "duration_ms": occ.duration_ms,
            "result": occ.result,
            "exception": shown(occ.exception) if shown else occ.exception,
            "retry_count": occ.retry_count,
            "attempt": occ.attempt,
            "max_retries": occ.max_retries,
            "skip_reason": occ.skip_reason,
            "trigger_reason": occ.trigger_reason,
            "created_at": occ.created_at,
            "last_heartbeat": occ.last_heartbeat,
            "job_version": occ.job_version,
        }

    @classmethod
    def of(cls, occ: Occurrence, shown: ExceptionText | None = None) -> OccurrenceOut:
        return cls(**cls.fields_of(occ, shown))


class OccurrenceDetail(OccurrenceOut):
    job_data: Any
    job_data_redacted: bool = Field(False, description=REDACTED_JOB_DATA)
    dispatched_at: datetime | None
    status_change_logs: list[StatusChangeOut] = Field(description="Oldest first.")
    logs: list[LogLine] | None = Field(
        None,
        description=f"GET /occurrences/{{id}}: its first {DETAIL_LOG_LINES} log lines (the "
        "reference's field; all of them: GET /occurrences/{id}/logs); elsewhere null.",
    )
    waiting_for: str | None = Field(
        None,
        description="GET /occurrences/{id}: the cluster-wide limit a worker holds this Queued "
        "occurrence back for (its semaphore, or its type for a rate); null when none.",
    )
    graph_run_id: UUID | None = Field(
        None,
        description="GET /occurrences/{id}: the graph run (job dependencies) it belongs to, "
        "if any (GET /graph-runs/{id}); elsewhere null.",
    )

    def redacted(self) -> OccurrenceDetail:
        """This occurrence without its job data (what a Viewer is shown by default)."""
        return self.model_copy(update={"job_data": None, "job_data_redacted": True})

    @classmethod
    def of(
        cls,
        occ: Occurrence,
        shown: ExceptionText | None = None,
        logs: list[LogLine] | None = None,
        waiting_for: str | None = None,
    ) -> OccurrenceDetail:
        return cls(
            **cls.fields_of(occ, shown),
            job_data=occ.job_data,
            dispatched_at=occ.dispatched_at,
            status_change_logs=[StatusChangeOut.of(c) for c in occ.status_changes],
            logs=logs,
            waiting_for=waiting_for,
        )


class OccurrencePage(ApiModel):
    items: list[OccurrenceOut]
    next_cursor: str | None


class CancelRequest(InputModel):
    reason: Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)] | None = None


class LogPage(ApiModel):
    items: list[LogLine]
    next_after: int = Field(description="Pass as ?after= to get the lines that follow.")
