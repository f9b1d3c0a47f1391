"""Bodies of the job endpoints."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, NotRequired, Required
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_snake
from pydantic_core import to_jsonable_python
from typing_extensions import TypedDict

from rota.api.schemas.common import (
    MAX_BULK,
    NO_NUL,
    REDACTED_JOB_DATA,
    ApiModel,
    InputModel,
    JobData,
    Seconds,
    ShortText,
    Tags,
    UtcDatetime,
)
from rota.api.schemas.dependencies import DependencyOut, DependsOn
from rota.core.autodisable import AutoDisableDefaults, effective
from rota.core.intervals import format_duration
from rota.core.jobfields import BY_NAME, JOB_FIELDS
from rota.core.jobspec import MAX_SECONDS, JobSpec
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    JobVersion,
    MisfirePolicy,
    Priority,
    ZombiePolicy,
)

_ATTRIBUTES: Final = {to_snake(f.api): f.name for f in JOB_FIELDS if to_snake(f.api) != f.name}
"""Body field -> job attribute, where the API names a field otherwise than the job does
(``concurrentExecutionPolicy`` is the job's ``concurrency_policy``)."""
_ALIASES: Final = {
    "timeout_seconds": "timeoutSeconds",
    "auto_disable_threshold": "autoDisableThreshold",
    "auto_disable_window_seconds": "autoDisableWindowSeconds",
    "auto_disable_cooldown_seconds": "autoDisableCooldownSeconds",
}


_REFERENCE_FIELDS: Final = frozenset({"timeout_minutes", "auto_disable_settings"})
"""The reference's forms of Rota's fields, folded into them on input (:class:`ReferenceForms`)."""


def _job_attributes(body: BaseModel, *, exclude_unset: bool = False) -> dict[str, Any]:
    """A job body's fields by job attribute name (``exclude_unset``: the fields sent only)."""
    values = body.model_dump(
        exclude_unset=exclude_unset, by_alias=False, exclude={*_REFERENCE_FIELDS, "depends_on"}
    )
    return {_ATTRIBUTES.get(name, name): value for name, value in values.items()}


Every = Annotated[str, StringConstraints(max_length=40, pattern=NO_NUL)] | int
"""An interval: a duration text (``"1h30m"``) or whole seconds; checked by the service (422
naming ``every``)."""

Minutes = Annotated[float, Field(allow_inf_nan=False, gt=0, le=MAX_SECONDS / 60)]


class AutoDisableSettingsIn(InputModel):
    """The reference's per-job auto-disable form, ``{"enabled": true, "threshold": 10}``:
    ``enabled`` false is ``autoDisableThreshold`` 0 (never); ``threshold`` is
    ``autoDisableThreshold``; ``failureWindowMinutes`` and ``autoReEnableCooldownMinutes`` are
    ``autoDisableWindowSeconds`` and ``autoDisableCooldownSeconds`` in minutes."""

    enabled: bool | None = None
    threshold: int | None = Field(None, ge=1, le=1_000_000)
    failure_window_minutes: Minutes | None = None
    auto_re_enable_cooldown_minutes: Minutes | None = None

    def settings(self) -> dict[str, Any]:
        """The Rota fields (attribute names) it sets."""
        out: dict[str, Any] = {}
        if self.enabled is False:
            out["auto_disable_threshold"] = 0
        elif self.threshold is not None:
            out["auto_disable_threshold"] = self.threshold
        if self.failure_window_minutes is not None:
            out["auto_disable_window_seconds"] = self.failure_window_minutes * 60
        if self.auto_re_enable_cooldown_minutes is not None:
            out["auto_disable_cooldown_seconds"] = self.auto_re_enable_cooldown_minutes * 60
        return out


class ReferenceForms(InputModel):
    """The reference's ``timeoutMinutes`` and ``autoDisableSettings``, accepted beside Rota's
    ``timeoutSeconds`` and ``autoDisable…`` fields and folded into them; a setting given both
    ways is refused."""

    timeout_minutes: Minutes | None = Field(
        None, description="The reference's form of timeoutSeconds (minutes)."
    )
    auto_disable_settings: AutoDisableSettingsIn | None = Field(
        None,
        description='The reference\'s form, {"enabled": true, "threshold": 10}: enabled false '
        "is autoDisableThreshold 0; failureWindowMinutes, autoReEnableCooldownMinutes.",
    )

    @model_validator(mode="after")
    def _fold_reference_forms(self) -> ReferenceForms:
        sent = self.model_fields_set
        if "timeout_minutes" not in sent and self.auto_disable_settings is None:
            return self
        given = {name: getattr(self, name) for name in sent}
        for name, value in _folded(given).items():
            setattr(self, name, value)
            sent.add(name)
        return self


def _folded(given: dict[str, Any]) -> dict[str, Any]:
    """The Rota fields the reference's forms among ``given`` (the body's fields sent, by
    field name) set; ``ValueError`` when one is also given in Rota's form, otherwise."""
    folded: dict[str, Any] = {}
    if "timeout_minutes" in given:
        minutes = given["timeout_minutes"]
        folded["timeout_seconds"] = None if minutes is None else minutes * 60
    settings = given.get("auto_disable_settings")
    if settings is not None:
        folded.update(settings.settings())
    for name, value in folded.items():
        if name in given and given[name] != value:
            raise ValueError(f"{_ALIASES[name]} is given twice (once in the reference's form)")
    return folded


class JobCreate(ReferenceForms):
    """A new job: ``jobType`` and one of ``cronExpression``, ``every`` (an interval) or
    ``executeAt`` (one-time); ``cronExpression`` with ``executeAt`` is the older form of a cron
    with ``startAt``; none of them: it runs only when triggered, by hand or by its upstreams
    (``dependsOn``)."""

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
    execute_at: UtcDatetime | None = Field(
        None,
        description="One-time run (naive: UTC); with cronExpression, the start: no fire before it.",
    )
    is_active: bool = True
    priority: Priority = Priority.MEDIUM
    concurrent_execution_policy: ConcurrencyPolicy = Field(
        ConcurrencyPolicy.SKIP,
        description="While an occurrence is Queued or Running: 0 Skip (the fire is skipped), "
        "1 Queue (it waits), 2 AllowAll (it runs alongside), 3 BufferOne (it waits if none "
        "waits yet, else skipped), 4 CancelOther (the earlier ones are cancelled, it runs).",
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
    every: Every | None = Field(
        None,
        description="An interval schedule instead of a cron: a duration like '90m', '1h30m', "
        "'45s', '2d' (or whole seconds), 1s to 366d; fires aligned to startAt, else to the "
        "creation time. Exclusive with cronExpression and executeAt.",
    )
    start_at: UtcDatetime | None = Field(
        None, description="A recurring job's first possible fire: none before it."
    )
    end_at: UtcDatetime | None = Field(
        None, description="No fire after it; past it the job has no next fire."
    )
    max_runs: int | None = Field(
        None,
        ge=1,
        le=1_000_000_000,
        description="After this many fires planned to run (runCount), no next fire.",
    )
    jitter_seconds: Seconds | None = Field(
        None,
        ge=0,
        le=3600,
        description="Each fire is sent after a random delay in [0, jitterSeconds]; the run "
        "keeps its nominal scheduledFor and records the delay as its jitterSeconds.",
    )
    misfire_window_seconds: Seconds | None = Field(
        None,
        ge=1,
        description="A fire later than this is missed (misfirePolicy applies); null: the "
        "server's misfire threshold.",
    )
    depends_on: DependsOn | None = Field(
        None, description="The jobs it runs after: [{jobId, on: success|completion|failure}]."
    )

    def to_spec(self, created_by: str | None = None) -> JobSpec:
        # Each field read as it is (model_dump would copy every value: issue 19).
        return item_spec(self.__dict__, created_by)


_SPEC_FIELDS: Final = {
    name: _ATTRIBUTES.get(name, name)
    for name in JobCreate.model_fields
    if name not in _REFERENCE_FIELDS and name != "depends_on"
}
"""A new job's body fields that are the spec's, each with its job attribute name (the
reference's forms are folded into Rota's on input; ``dependsOn`` is set apart)."""


class JobPatch(ReferenceForms):
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
    every: Every | None = None
    start_at: UtcDatetime | None = None
    end_at: UtcDatetime | None = None
    max_runs: int | None = Field(None, ge=1, le=1_000_000_000)
    jitter_seconds: Seconds | None = Field(None, ge=0, le=3600)
    misfire_window_seconds: Seconds | None = Field(None, ge=1)
    depends_on: DependsOn | None = Field(
        None, description="Replaces the jobs it runs after ([] : none)."
    )

    def changes(self) -> dict[str, Any]:
        """The fields sent, by job attribute name."""
        return _job_attributes(self, exclude_unset=True)


def _item_fields() -> dict[str, Any]:
    """:class:`JobCreate`'s fields as the keys of a typed dict: the same types, limits,
    aliases and descriptions; no defaults (a key not sent takes the spec's)."""
    annotated: Any = Annotated  # built from the model's fields, which mypy cannot follow
    out: dict[str, Any] = {}
    for name, info in JobCreate.model_fields.items():
        # the default shown in the schema only, as JobCreate's (which shows none made by a
        # factory): a key not sent stays unsent
        plain = not info.is_required() and info.default_factory is None
        shown = {"default": to_jsonable_python(info.default)} if plain else {}
        meta = Field(alias=info.alias, description=info.description, json_schema_extra=shown)
        kind = annotated[(info.annotation, *info.metadata, meta)]
        out[name] = Required[kind] if info.is_required() else NotRequired[kind]
    return out


if TYPE_CHECKING:
    JobCreateItem = dict[str, Any]
else:
    JobCreateItem = TypedDict("JobCreateItem", _item_fields())
    JobCreateItem.__doc__ = JobCreate.__doc__
    JobCreateItem.__pydantic_config__ = ConfigDict(
        extra="forbid", validate_by_name=True, validate_by_alias=True
    )
"""A job of a bulk create: a :class:`JobCreate` read as a dict of the fields sent, which
pydantic builds in about half the time of a model, and its spec made without a pass over the
fields not sent (issue 19: a 10,000-job bulk create). A test holds its spec to
:meth:`JobCreate.to_spec`'s."""


def _fold_item(item: dict[str, Any]) -> dict[str, Any]:
    """A bulk job's reference forms folded into Rota's fields, as :class:`ReferenceForms`."""
    if "timeout_minutes" in item or item.get("auto_disable_settings") is not None:
        item.update(_folded(item))
    return item


def item_spec(item: dict[str, Any], created_by: str | None = None) -> JobSpec:
    """The spec of a job body's fields (a bulk create's job, or a :class:`JobCreate`'s
    values), each under its job attribute name; ``dependsOn`` is not the spec's."""
    spec = _SPEC_FIELDS
    return JobSpec(
        **{spec[name]: value for name, value in item.items() if name in spec},
        created_by=created_by,
    )


class BulkCreate(InputModel):
    jobs: Annotated[
        list[Annotated[JobCreateItem, AfterValidator(_fold_item)]],
        Field(min_length=1, max_length=MAX_BULK),
    ]

    def canonical_json(self) -> bytes:
        """The body as an idempotent repeat is compared: every job in full, each field with
        its default when not sent (so sending a default or not is the same body)."""
        full = _FullBulk(jobs=[JobCreate.model_validate(item) for item in self.jobs])
        return full.model_dump_json(by_alias=True).encode()


class _FullBulk(InputModel):
    jobs: list[JobCreate]


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


class AuditInfoOut(ApiModel):
    """Who created and last changed a job, when: the reference's ``auditInfo``."""

    creation_date: datetime
    creator_user_name: str | None
    last_modification_date: datetime | None = Field(description="null: never changed.")
    last_modifier_user_name: str | None

    @classmethod
    def of(cls, job: Job) -> AuditInfoOut:
        changed = job.updated_at != job.created_at
        return cls(
            creation_date=job.created_at,
            creator_user_name=job.created_by,
            last_modification_date=job.updated_at if changed else None,
            last_modifier_user_name=job.updated_by if changed else None,
        )


class JobWarningOut(ApiModel):
    """Something about an accepted job its author should know."""

    code: str = Field(
        description="Stable, for scripts. `unknown_job_type`: no worker has ever declared the "
        "job's type (in its workerId group, if it names one); its runs are recorded Skipped "
        "with skipReason `no_worker` until a worker declaring it registers. "
        "`no_live_worker`: workers declared the type before but none is live now; its runs "
        "wait for one, and its data was checked against the data schema a worker last "
        "published for the type (the message says whether one is known). `name_taken` (on "
        "create, and on an edit of its name): other jobs have its display name (ignoring case); "
        "their ids are in jobIds."
    )
    message: str = Field(description="For people.")
    job_ids: list[UUID] = Field(
        default_factory=list, description="The other jobs the warning is about (if any)."
    )


class JobOut(ApiModel):
    id: UUID
    display_name: str
    description: str
    tags: list[str]
    worker_id: str | None
    job_type: str
    job_data: Any
    job_data_redacted: bool = Field(False, description=REDACTED_JOB_DATA)
    cron_expression: str | None
    time_zone: str
    execute_at: datetime | None
    is_active: bool
    priority: Priority
    concurrent_execution_policy: ConcurrencyPolicy
    misfire_policy: MisfirePolicy
    timeout_seconds: float | None
    timeout_minutes: float | None = Field(
        description="timeoutSeconds in minutes (the reference's)."
    )
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
    avarage_duration: float | None = Field(
        description="averageDuration again, under the reference's name (spelled as it spells it)."
    )
    audit_info: AuditInfoOut = Field(
        description="createdAt, createdBy, updatedAt, updatedBy again, in the reference's form."
    )
    bucket: int
    source: str = Field(
        description="`api`, or `code` for a job declared by `@rota.job(…, cron=…)` (read-only)."
    )
    auto_disable_threshold: int | None = Field(description="The job's own; null: the default.")
    auto_disable_window_seconds: float | None
    auto_disable_cooldown_seconds: float | None
    zombie_policy: ZombiePolicy | None = Field(description="The job's own; null: the default.")
    zombie_threshold_seconds: float | None
    every: str | None = Field(description="The interval schedule ('1h30m'); null: none.")
    interval_seconds: int | None = Field(description="every in seconds.")
    start_at: datetime | None
    end_at: datetime | None
    max_runs: int | None
    run_count: int | None = Field(
        description="Fires planned to run so far (read-only; Skipped fires and manual "
        "triggers do not count); null: none yet."
    )
    jitter_seconds: float | None
    misfire_window_seconds: float | None = Field(description="null: the server's threshold.")
    auto_disable: AutoDisableOut
    paused: bool = Field(
        description="Paused (POST /jobs/{id}/pause): its fires are recorded Skipped (`paused`) "
        "instead of running, until resumed or pausedUntil. Apart from isActive and auto-disable."
    )
    pause_note: str | None = Field(description="Why it was paused (null: not paused, no note).")
    paused_until: datetime | None = Field(
        description="When the pause ends by itself (null: when resumed by hand)."
    )
    paused_by: str | None = Field(description="Who paused it.")
    paused_at: datetime | None = Field(description="When it was paused (null: not paused).")
    skip_next: int = Field(
        description="How many of its next fires are recorded Skipped (`skip_next`) instead of "
        "running (POST /jobs/{id}/skip); 0: none."
    )
    skip_note: str | None = Field(description="Why they are skipped.")
    warnings: list[JobWarningOut] = Field(
        default_factory=list,
        description="What its author should know about the job (empty: nothing); see "
        "JobWarningOut. Not part of the job: not versioned, not in its ETag.",
    )
    depends_on: list[DependencyOut] | None = Field(
        None,
        description="GET /jobs/{id}: the jobs it runs after (GET /jobs/{id}/dependencies); "
        "elsewhere null.",
    )
    dependents: list[DependencyOut] | None = Field(
        None, description="GET /jobs/{id}: the jobs that run after it; elsewhere null."
    )

    def redacted(self) -> JobOut:
        """This job without its data (what a Viewer is shown by default)."""
        return self.model_copy(update={"job_data": None, "job_data_redacted": True})

    @classmethod
    def of(
        cls,
        job: Job,
        defaults: AutoDisableDefaults | None = None,
        warnings: Sequence[JobWarningOut] = (),
    ) -> JobOut:
        settings = effective(job, defaults or AutoDisableDefaults())
        return cls(
            warnings=list(warnings),
            **{name: getattr(job, attribute) for name, attribute in _JOB_OUT_FIELDS},
            tags=list(job.tags),
            paused=job.is_paused,
            skip_next=job.skip_next or 0,
            timeout_minutes=None if job.timeout_seconds is None else job.timeout_seconds / 60,
            success_rate=job.success_rate,
            avarage_duration=job.average_duration_ms,
            audit_info=AuditInfoOut.of(job),
            source=job.source.value,
            every=format_duration(job.interval_seconds),
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
    if _ATTRIBUTES.get(name, name) in BY_NAME
    and name not in ("tags", "source", "warnings", "skip_next", "every", "job_data_redacted")
)
"""The fields of :class:`JobOut` copied from the job's attribute of the same meaning."""


class JobPage(ApiModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class JobList(ApiModel):
    items: list[JobOut]


class BulkCreatedIds(ApiModel):
    """A bulk create's answer under ``Prefer: return=minimal``: the new jobs' ids, in the
    order of the request's jobs."""

    count: int = Field(description="How many jobs were created (all of the request's).")
    ids: list[UUID]


class JobVersionOut(ApiModel):
    version: int
    snapshot: dict[str, Any] = Field(description="The versioned fields as they were.")
    created_at: datetime
    job_data_redacted: bool = Field(
        False, description=f"{REDACTED_JOB_DATA} (here: the snapshot's jobData)"
    )

    def redacted(self) -> JobVersionOut:
        """This version without its data (``snapshot.jobData`` null)."""
        snapshot = {**self.snapshot, "jobData": None} if "jobData" in self.snapshot else None
        return self.model_copy(
            update={"snapshot": snapshot or self.snapshot, "job_data_redacted": True}
        )

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


class ReferenceTriggerRequest(TriggerRequest):
    """The reference's manual trigger, ``POST /jobs/job/trigger``: the job id in the body."""

    job_id: UUID = Field(description="The job to run.")


class BackfillRequest(InputModel):
    """The past window whose fires to run: ``from`` and ``to``, both included."""

    start: UtcDatetime = Field(alias="from", description="The window's first instant (ISO 8601).")
    end: UtcDatetime = Field(alias="to", description="Its last instant; not in the future.")
    reason: Annotated[str, StringConstraints(max_length=500)] | None = Field(
        None, description="Kept as the trigger reason of each run (default: backfill)."
    )


class PauseRequest(InputModel):
    """Pause a job: its fires are recorded Skipped (``paused``) until it is resumed, or until
    ``until`` if given."""

    note: Annotated[str, StringConstraints(max_length=500)] | None = Field(
        None, description="Why: shown on the job and in the reason of each fire skipped."
    )
    until: UtcDatetime | None = Field(
        None, description="When the pause ends by itself (ISO 8601, in the future)."
    )


class SkipRequest(InputModel):
    """Skip the job's next ``count`` fires (0 clears the count)."""

    count: int = Field(ge=0, le=1000, description="Fires to skip, 1..1000; 0: clear.")
    note: Annotated[str, StringConstraints(max_length=500)] | None = Field(
        None, description="Why: in the reason of each fire skipped."
    )


class BackfillOut(ApiModel):
    fires: int = Field(description="Fires of the job's cron expression in the window.")
    created: int = Field(description="Runs created: one per fire that had none.")
    already_recorded: int = Field(description="Fires the job already had a run of: left alone.")
    occurrence_ids: list[UUID] = Field(description="The runs created, oldest fire first.")


class Preview(ApiModel):
    fires: list[datetime]
