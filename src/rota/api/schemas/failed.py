"""Bodies of the failed-occurrence (dead letter) endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field, StringConstraints, model_validator

from rota.api.schemas.common import (
    NO_NUL,
    REDACTED_JOB_DATA,
    ApiModel,
    InputModel,
    unwrap_partial_updates,
)
from rota.core.models import FailedOccurrence, FailureType
from rota.core.security import ExceptionText

_RESOLUTION_KEYS = frozenset(
    {"resolutionNote", "resolution_note", "resolutionAction", "resolution_action", "resolved"}
)


class FailedOccurrenceUpdate(InputModel):
    """A change of a failed occurrence's resolution; fields absent (or ``null``, or sent with
    ``"isUpdated": false``) are left as they are. A note or an action resolves the record
    unless ``resolved`` is ``false``."""

    resolution_note: Annotated[str, StringConstraints(max_length=4000, pattern=NO_NUL)] | None = (
        Field(None, description='Text, or {"value": text, "isUpdated": true}.')
    )
    resolution_action: Annotated[str, StringConstraints(max_length=100, pattern=NO_NUL)] | None = (
        Field(None, description='Text, or {"value": text, "isUpdated": true}.')
    )
    resolved: bool | None = Field(None, description="Default: true when a note or action is set.")

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        return unwrap_partial_updates(data, _RESOLUTION_KEYS)


class FailedOccurrenceOut(ApiModel):
    id: UUID
    occurrence_id: UUID | None = Field(description="null for a poison message naming none.")
    correlation_id: UUID | None = Field(description="The occurrence id (its correlation id).")
    job_id: UUID | None
    job_type: str
    job_display_name: str | None = Field(
        None,
        description="The job's display name (its type when it has none), read for a list's "
        "page at once; null when the job was deleted or is unknown (and in answers to a "
        "change).",
    )
    failure_type: FailureType = Field(
        description="retries_exhausted, permanent, timed_out, zombie, poison, "
        "unknown_job_type or invalid_data."
    )
    exception: str | None = Field(description="Why it failed (cut at 10,000 characters).")
    job_data: Any
    job_data_redacted: bool = Field(False, description=REDACTED_JOB_DATA)
    attempts: int = Field(description="The attempt that failed last (0: none ran).")
    retry_count: int = Field(description="Retries before it failed: attempts - 1.")
    failed_at: datetime
    created_at: datetime
    resolved: bool
    resolved_at: datetime | None
    resolved_by: str | None
    resolution_note: str | None
    resolution_action: str | None
    raw_message: str | None = Field(
        description="A poison message's body as received (cut), when it could not be read."
    )

    def redacted(self) -> FailedOccurrenceOut:
        """This record without its job data (what a Viewer is shown by default)."""
        return self.model_copy(update={"job_data": None, "job_data_redacted": True})

    @classmethod
    def of(
        cls, record: FailedOccurrence, shown: ExceptionText | None = None
    ) -> FailedOccurrenceOut:
        return cls(
            id=record.id,
            occurrence_id=record.occurrence_id,
            correlation_id=record.occurrence_id,
            job_id=record.job_id,
            job_type=record.job_type,
            failure_type=record.failure_type,
            exception=shown(record.exception) if shown else record.exception,
            job_data=record.job_data,
            attempts=record.attempts,
            retry_count=max(0, record.attempts - 1),
            failed_at=record.failed_at,
            created_at=record.created_at,
            resolved=record.resolved,
            resolved_at=record.resolved_at,
            resolved_by=record.resolved_by,
            resolution_note=record.resolution_note,
            resolution_action=record.resolution_action,
            raw_message=record.raw_message,
        )


class FailedOccurrencePage(ApiModel):
    items: list[FailedOccurrenceOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")
