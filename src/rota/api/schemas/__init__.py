"""Request and response bodies: camelCase JSON out, camelCase or snake_case accepted in."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any, Final
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from rota.core.autodisable import AutoDisableDefaults, effective
from rota.core.errors import ValidationError
from rota.core.jobfields import BY_NAME, JOB_FIELDS
from rota.core.jobspec import MAX_SECONDS, JobSpec, as_utc
from rota.core.jsonlimits import MAX_JSON_DEPTH, max_depth_exceeded
from rota.core.models import (
    ConcurrencyPolicy,
    FailedOccurrence,
    FailureType,
    Job,
    JobVersion,
    LogRecord,
    MisfirePolicy,
    Occurrence,
    OccurrenceStatus,
    Priority,
    StatusChange,
    ZombiePolicy,
)
from rota.core.records import BucketStateName, InstanceStateName
from rota.core.security import ExceptionText

MAX_LIMIT = 1000
"""The largest page any list endpoint returns."""
MAX_BULK = 10_000


def parse_json_string(value: Any) -> Any:
    """Job data may come as JSON or, as in the reference API, as a string holding JSON.

    A string that looks like a JSON object or array must parse; any other string is kept as is.
    Its nesting is measured before it is parsed (no recursion): deeper than any setting
    allows (:data:`~rota.core.jsonlimits.MAX_JSON_DEPTH`) is refused here, and the job
    service holds what parses to the configured limit (``ROTA_API__MAX_JSON_DEPTH``).
    """
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        if max_depth_exceeded(value, MAX_JSON_DEPTH):
            raise ValueError(f"holds JSON nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from exc
    return value


def storable_json(value: Any) -> Any:
    """Job data is stored and sent as standard JSON in UTF-8, so what Python's JSON reader
    lets through but cannot be written back is refused here, not in the store: a lone
    surrogate (``"\\ud800"``), ``NaN``, or a number too large for a float (``1e999``)."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
    except UnicodeEncodeError:
        raise ValueError("holds text that is not valid Unicode (a lone surrogate)") from None
    except ValueError:
        raise ValueError("holds NaN or an infinite number, which JSON cannot carry") from None
    return value


JobData = Annotated[Any, BeforeValidator(parse_json_string), AfterValidator(storable_json)]
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def iso_only(value: Any) -> Any:
    """A date-time is ISO-8601 text, as documented: a number (which pydantic would take as
    seconds since 1970, so a stray 5 becomes 1970-01-01T00:00:05Z) is refused."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("must be an ISO-8601 date-time such as 2030-01-01T09:00:00Z")
    return value


UtcDatetime = Annotated[datetime, BeforeValidator(iso_only), AfterValidator(as_utc)]
"""A date-time in input, ISO-8601 text, as UTC (naive: taken as UTC)."""
NO_NUL = r"^[^\x00]*$"
"""Text may hold any character but NUL (PostgreSQL cannot store it)."""
ShortText = Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL)]
Tag = Annotated[str, StringConstraints(max_length=100, pattern=NO_NUL)]
FilterToken = Annotated[str, StringConstraints(max_length=500)]
"""One value of a repeatable query filter (``?status=0,1&status=failed``)."""
MAX_FILTER_VALUES = 100
"""How many times a query filter may be repeated."""
Seconds = Annotated[float, Field(allow_inf_nan=False, le=MAX_SECONDS)]
"""A duration in seconds: finite, at most 10 years (a date must still follow from it)."""


def split_tags(value: Any) -> Any:
    """Tags come as a list or, as in the reference API, as one string ``"a,b"``."""
    return value.split(",") if isinstance(value, str) else value


Tags = Annotated[
    list[Tag],
    BeforeValidator(split_tags),
    Field(max_length=100, description='A list, or one comma-separated string "a,b".'),
]


def status_name(status: OccurrenceStatus) -> str:
    """``TIMED_OUT`` -> ``TimedOut``: the API's name of a status."""
    return status.name.title().replace("_", "")


class ApiModel(BaseModel):
    """Base of every body: camelCase aliases, field names accepted on input too."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class InputModel(ApiModel):
    """Request bodies refuse unknown fields: a typo must not be a silent no-op."""

    model_config = ConfigDict(extra="forbid")


# --- jobs ------------------------------------------------------------------------------------

_ATTRIBUTES: Final = {to_snake(f.api): f.name for f in JOB_FIELDS if to_snake(f.api) != f.name}
"""Body field -> job attribute, where the API names a field otherwise than the job does
(``concurrentExecutionPolicy`` is the job's ``concurrency_policy``)."""


def _job_attributes(body: BaseModel, *, exclude_unset: bool = False) -> dict[str, Any]:
    """A job body's fields by job attribute name (``exclude_unset``: the fields sent only)."""
    values = body.model_dump(exclude_unset=exclude_unset, by_alias=False)
    return {_ATTRIBUTES.get(name, name): value for name, value in values.items()}


class JobCreate(InputModel):
    """A new job: ``jobType`` and exactly one of ``cronExpression`` / ``executeAt``."""

    job_type: ShortText = Field(description="The job type a worker group declares.")
    display_name: ShortText = Field("", description="Defaults to the job type.")
    description: Annotated[str, StringConstraints(max_length=4000, pattern=NO_NUL)] = ""
    tags: Tags = Field(default_factory=list)
    worker_id: ShortText | None = Field(
        None, description="The worker group; omitted: the one live group declaring the type."
    )
    job_data: JobData = Field(None, description="Any JSON, or a string holding JSON.")
    cron_expression: ShortText | None = Field(
        None, description="5 fields, or 6 with seconds first; macros like @daily."
    )
    time_zone: ShortText = Field("UTC", description="IANA time zone of the cron expression.")
    execute_at: UtcDatetime | None = Field(None, description="One-time run (naive: UTC).")
    is_active: bool = True
    priority: Priority = Priority.MEDIUM
    concurrent_execution_policy: ConcurrencyPolicy = Field(
        ConcurrencyPolicy.SKIP, description="0 Skip (overlapping fire skipped), 1 Queue."
    )
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    timeout_seconds: Seconds | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0, le=1000)
    retry_delay_seconds: Seconds | None = Field(None, ge=0)
    auto_disable_threshold: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="Consecutive failures that disable the job; 0: "
        "never; null: the server default.",
    )
    auto_disable_window_seconds: Seconds | None = Field(
        None, gt=0, description="Failures further apart start a new count; null: the default."
    )
    auto_disable_cooldown_seconds: Seconds | None = Field(
        None, gt=0, description="After this long disabled, one probe run; null: the default."
    )
    zombie_policy: ZombiePolicy | None = Field(
        None, description="requeue (a new attempt) or fail; null: the server default."
    )
    zombie_threshold_seconds: Seconds | None = Field(
        None,
        gt=0,
        description="Seconds without a heartbeat before a Running occurrence is a "
        "zombie; null: the server default.",
    )

    def to_spec(self, created_by: str | None = None) -> JobSpec:
        return JobSpec(**_job_attributes(self), created_by=created_by)


class JobPatch(InputModel):
    """A partial change: only the fields present are changed; ``null`` clears a nullable one
    (switch a job from cron to one-time with ``{"cronExpression": null, "executeAt": …}``)."""

    job_type: ShortText | None = None
    display_name: ShortText | None = None
    description: Annotated[str, StringConstraints(max_length=4000, pattern=NO_NUL)] | None = None
    tags: Tags | None = None
    worker_id: ShortText | None = None
    job_data: JobData = None
    cron_expression: ShortText | None = None
    time_zone: ShortText | None = None
    execute_at: UtcDatetime | None = None
    is_active: bool | None = None
    priority: Priority | None = None
    concurrent_execution_policy: ConcurrencyPolicy | None = None
    misfire_policy: MisfirePolicy | None = None
    timeout_seconds: Seconds | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0, le=1000)
    retry_delay_seconds: Seconds | None = Field(None, ge=0)
    auto_disable_threshold: int | None = Field(None, ge=0, le=1_000_000)
    auto_disable_window_seconds: Seconds | None = Field(None, gt=0)
    auto_disable_cooldown_seconds: Seconds | None = Field(None, gt=0)
    zombie_policy: ZombiePolicy | None = None
    zombie_threshold_seconds: Seconds | None = Field(None, gt=0)

    def changes(self) -> dict[str, Any]:
        """The fields sent, by job attribute name."""
        return _job_attributes(self, exclude_unset=True)


class BulkCreate(InputModel):
    jobs: Annotated[list[JobCreate], Field(min_length=1, max_length=MAX_BULK)]


class AutoDisableOut(ApiModel):
    """A job's auto-disable settings in effect (its own, else the server's) and state."""

    threshold: int = Field(description="Consecutive failures that disable it (0: never).")
    window_seconds: float
    cooldown_seconds: float | None = Field(description="null: no probe run; re-enable by hand.")
    consecutive_failures: int
    last_failure_at: datetime | None
    disabled_reason: str | None = Field(description="Set while it is disabled automatically.")
    disabled_at: datetime | None
    probing: bool = Field(description="Its cooldown passed: the next run is a probe.")


class JobOut(ApiModel):
    id: UUID
    display_name: str
    description: str
    tags: list[str]
    worker_id: str | None
    job_type: str
    job_data: Any
    cron_expression: str | None
    time_zone: str
    execute_at: datetime | None
    is_active: bool
    priority: Priority
    concurrent_execution_policy: ConcurrencyPolicy
    misfire_policy: MisfirePolicy
    timeout_seconds: float | None
    max_retries: int | None
    retry_delay_seconds: float | None
    next_run_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str | None
    updated_by: str | None
    total_executions: int
    success_rate: float | None = Field(description="Percent of finished runs that completed.")
    average_duration: float | None = Field(description="Milliseconds, over completed runs.")
    bucket: int
    source: str = Field(
        description="`api`, or `code` for a job declared by `@rota.job(…, cron=…)` (read-only)."
    )
    auto_disable_threshold: int | None = Field(description="The job's own; null: the default.")
    auto_disable_window_seconds: float | None
    auto_disable_cooldown_seconds: float | None
    zombie_policy: ZombiePolicy | None = Field(description="The job's own; null: the default.")
    zombie_threshold_seconds: float | None
    auto_disable: AutoDisableOut

    @classmethod
    def of(cls, job: Job, defaults: AutoDisableDefaults | None = None) -> JobOut:
        settings = effective(job, defaults or AutoDisableDefaults())
        return cls(
            **{name: getattr(job, attribute) for name, attribute in _JOB_OUT_FIELDS},
            tags=list(job.tags),
            success_rate=job.success_rate,
            source=job.source.value,
            auto_disable=AutoDisableOut(
                threshold=settings.threshold,
                window_seconds=settings.window_seconds,
                cooldown_seconds=settings.cooldown_seconds,
                consecutive_failures=job.consecutive_failures,
                last_failure_at=job.last_failure_at,
                disabled_reason=job.disabled_reason,
                disabled_at=job.disabled_at,
                probing=job.probing,
            ),
        )


_JOB_OUT_FIELDS: Final = tuple(
    (name, _ATTRIBUTES.get(name, name))
    for name in JobOut.model_fields
    if _ATTRIBUTES.get(name, name) in BY_NAME and name not in ("tags", "source")
)
"""The fields of :class:`JobOut` copied from the job's attribute of the same meaning."""


class JobPage(ApiModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class JobList(ApiModel):
    items: list[JobOut]


class JobVersionOut(ApiModel):
    version: int
    snapshot: dict[str, Any] = Field(description="The versioned fields as they were.")
    created_at: datetime

    @classmethod
    def of(cls, version: JobVersion) -> JobVersionOut:
        return cls(
            version=version.version, snapshot=dict(version.snapshot), created_at=version.created_at
        )


class JobVersionList(ApiModel):
    items: list[JobVersionOut] = Field(description="Earlier versions, oldest first.")


class TriggerRequest(InputModel):
    reason: Annotated[str, StringConstraints(max_length=500)] | None = None
    job_data: JobData = Field(None, description="Replaces the job's data for this run only.")
    force: bool = Field(False, description="Run even if an occurrence is queued or running.")


class Preview(ApiModel):
    fires: list[datetime]


class CancelRequest(InputModel):
    reason: Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)] | None = None


# --- occurrences -----------------------------------------------------------------------------


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
    correlation_id: UUID
    worker_id: str | None
    instance_id: str | None = Field(description="The worker instance that reported last.")
    status: OccurrenceStatus
    status_name: str
    scheduled_for: datetime
    due_at: datetime
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
            "correlation_id": occ.id,
            "worker_id": occ.worker_id,
            "instance_id": occ.instance_id,
            "status": occ.status,
            "status_name": status_name(occ.status),
            "scheduled_for": occ.scheduled_for,
            "due_at": occ.due_at,
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
    dispatched_at: datetime | None
    status_change_logs: list[StatusChangeOut] = Field(description="Oldest first.")

    @classmethod
    def of(cls, occ: Occurrence, shown: ExceptionText | None = None) -> OccurrenceDetail:
        return cls(
            **cls.fields_of(occ, shown),
            job_data=occ.job_data,
            dispatched_at=occ.dispatched_at,
            status_change_logs=[StatusChangeOut.of(c) for c in occ.status_changes],
        )


class OccurrencePage(ApiModel):
    items: list[OccurrenceOut]
    next_cursor: str | None


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


class LogPage(ApiModel):
    items: list[LogLine]
    next_after: int = Field(description="Pass as ?after= to get the lines that follow.")


# --- health ----------------------------------------------------------------------------------


class Liveness(ApiModel):
    status: str


class Readiness(ApiModel):
    status: str = Field(description='"ok" when every component is, else "unavailable".')
    components: dict[str, str] = Field(description='Component -> "ok" or its error.')


# --- admin -----------------------------------------------------------------------------------


class BucketOut(ApiModel):
    bucket: int
    owner: str | None = Field(description="The scheduler instance holding its lease, if any.")
    state: BucketStateName = Field(
        description="Active: dispatched by its owner. Completing: the owner is stopping "
        "gracefully and releases it after its in-flight dispatch. Lost: no live lease (or "
        "its owner stopped heartbeating): another instance takes it over."
    )
    lease_expires_at: datetime | None
    lag: float = Field(
        description="Seconds the earliest due entry of the bucket is behind now (0: none overdue)."
    )
    indexed: int = Field(description="Entries of the bucket in the hot window (the index).")


class InstanceOut(ApiModel):
    instance_id: str
    state: InstanceStateName
    buckets: list[int] = Field(description="Buckets it holds leases on.")


class BucketsOut(ApiModel):
    bucket_count: int
    instances: list[InstanceOut] = Field(description="Live scheduler instances.")
    buckets: list[BucketOut]


class ReliabilityOut(ApiModel):
    """Counters of this server since it started (each server keeps its own)."""

    status_batches: int = Field(description="Status batches the tracker stored.")
    status_applied: int = Field(description="Status records applied.")
    status_ignored: int = Field(description="Status records ignored, all reasons.")
    late_reports: int = Field(
        description="Reports from an older attempt than the occurrence's (a superseded "
        "attempt, e.g. of a requeued zombie): ignored and counted, never applied."
    )
    heartbeats: int
    store_errors: int = Field(description="Failed store writes the tracker retried.")
    zombies_requeued: int
    zombies_failed: int
    probes_released: int = Field(description="Auto-disabled jobs let through for a probe run.")


# --- failed occurrences (dead letters) -------------------------------------------------------


UPDATE_WRAPPER_KEYS = frozenset({"value", "isUpdated", "is_updated"})


def unwrap_partial_updates(data: Any, keys: frozenset[str] | None = None) -> Any:
    """The reference API's partial-update form, ``{"field": {"value": v, "isUpdated": true}}``,
    as plain ``{"field": v}``. Used by ``PUT /jobs/job`` and ``PUT /failed-occurrences/{id}``
    alike. Only the given ``keys`` (API and field names; ``None``: every key) are looked at.

    A field's value is a wrapper only when it is an object of no other keys than ``value``
    and ``isUpdated`` (or ``is_updated``) with a boolean ``isUpdated``:

    - ``isUpdated`` true with a ``value``: the field changes to that value;
    - ``isUpdated`` false (with or without a ``value``): the field is left out (not changed);
    - ``isUpdated`` true without a ``value``: refused (``ValidationError`` naming the field);
    - a ``value`` with an ``isUpdated`` that is not a boolean: refused the same way.

    Anything else is a plain value, kept as it is (``{"value": 5}`` with no ``isUpdated`` is
    an object, e.g. a job's ``jobData``), for the field's own validation."""
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if (
            (keys is None or key in keys)
            and isinstance(value, dict)
            and value
            and set(value) <= UPDATE_WRAPPER_KEYS
        ):
            flag_key = "isUpdated" if "isUpdated" in value else "is_updated"
            flag = value.get(flag_key)
            if isinstance(flag, bool):
                if not flag:
                    continue
                if "value" not in value:
                    raise ValidationError(
                        f"{key}: isUpdated is true but no value was given", field=key
                    )
                out[key] = value["value"]
                continue
            if flag_key in value and "value" in value:
                raise ValidationError(f"{key}: isUpdated must be true or false", field=key)
        out[key] = value
    return out


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
    failure_type: FailureType = Field(
        description="retries_exhausted, permanent, timed_out, zombie, poison, "
        "unknown_job_type or invalid_data."
    )
    exception: str | None = Field(description="Why it failed (cut at 10,000 characters).")
    job_data: Any
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


# --- workers ---------------------------------------------------------------------------------


class WorkerInstanceOut(ApiModel):
    instance_id: str
    host: str
    pid: int
    version: str
    concurrency: int
    current_load: int
    started_at: datetime
    last_heartbeat: datetime
    job_types: list[str]


class WorkerGroupOut(ApiModel):
    worker_id: str
    """The group: jobs naming it are routed to its queue."""
    instances: list[WorkerInstanceOut]
    capacity: int
    """The concurrency of all its live instances together."""
    load: int
    """Jobs its instances run now."""
    job_types: dict[str, dict[str, Any]]
    """Job type -> what an instance declared about it (data schema, defaults, schedule)."""


class WorkerList(ApiModel):
    items: list[WorkerGroupOut]


# --- statistics ------------------------------------------------------------------------------


class OccurrenceCounts(ApiModel):
    total: int
    by_status: dict[str, int] = Field(description="Status name -> occurrences, all time.")


class JobCounts(ApiModel):
    total: int
    active: int


class WindowStats(ApiModel):
    """What ended in the last 24 hours (by end time)."""

    since: datetime
    executions: int = Field(description="Completed + failed + cancelled.")
    completed: int
    failed: int = Field(description="Failed or TimedOut.")
    cancelled: int
    success_rate: float | None = Field(
        description="Percent of completed among completed and failed; null when none ended."
    )
    average_duration_ms: float | None = Field(description="Mean over the completed ones.")


class WorkerCounts(ApiModel):
    groups: int
    instances: int = Field(description="Live worker instances (online).")
    capacity: int = Field(description="Their concurrency together.")
    load: int = Field(description="Jobs they run now (as of their last heartbeats).")


class Overview(ApiModel):
    occurrences: OccurrenceCounts
    jobs: JobCounts
    last24h: WindowStats = Field(alias="last24h")
    workers: WorkerCounts
    generated_at: datetime


class ThroughputPointOut(ApiModel):
    start: datetime
    completed: int
    failed: int


class Throughput(ApiModel):
    window_seconds: int
    bucket_seconds: int
    start: datetime
    end: datetime
    points: list[ThroughputPointOut] = Field(description="Oldest first, empty buckets included.")
