"""Bodies of ``/limits``: cluster-wide limits of job types, what the workers hold and who
waits."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field, StringConstraints

from rota.api.schemas.common import NO_NUL, ApiModel, InputModel
from rota.core.limits import MAX_CONCURRENT, MAX_RATE

Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=NO_NUL)]


class LimitFields(InputModel):
    max_concurrent: int | None = Field(
        None,
        alias="max",
        ge=1,
        le=MAX_CONCURRENT,
        description="At most this many occurrences of the type run at once, cluster-wide (per "
        "value of `key`, with a key).",
    )
    key: Name | None = Field(
        None,
        description="A top-level field of the job data: `max` applies per distinct value "
        "(e.g. `customerId`). Needs `max`.",
    )
    rate_per_second: float | None = Field(
        None, gt=0, le=MAX_RATE, description="At most this many starts per second (the type)."
    )


class LimitIn(LimitFields):
    job_type: Name = Field(alias="type", description="The job type limited.")


class LimitsIn(InputModel):
    limits: list[LimitIn] = Field(max_length=1000)


class SlotOut(ApiModel):
    key: str = Field(description="The semaphore: the type, or `type|field=<value as JSON>`.")
    running: int = Field(description="Occurrences holding a slot of it now.")


class WaitingOut(ApiModel):
    occurrence_id: str
    job_id: UUID | None = Field(None, description="Its job (null: the occurrence is unknown).")
    job_display_name: str | None = Field(
        None, description="Its job's display name (null: unknown, or the job was deleted)."
    )
    limit: str = Field(description="The semaphore (or the type, for its rate) it waits for.")
    since: datetime


class LimitOut(ApiModel):
    job_type: str = Field(alias="type")
    max_concurrent: int | None = Field(alias="max")
    key: str | None
    rate_per_second: float | None
    running: int = Field(description="Occurrences of the type holding a slot now.")
    waiting: int = Field(description="Occurrences of the type waiting for this limit now.")
    slots: list[SlotOut] = Field(description="The busiest semaphores of the type (at most 100).")


class LimitsOut(ApiModel):
    limits: list[LimitOut]
    waiting: list[WaitingOut] = Field(
        description="Occurrences received by a worker and waiting for a limit (oldest first, "
        "at most 1000); each is still Queued."
    )
