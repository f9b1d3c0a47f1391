"""The one table of a job's fields and what each is: who may change it, whether it may be null,
whether a change of it makes a new version, what the fire planner reads, how it is kept.

The job service's updatable and nullable sets, the versioned fields, the API names and the
store's column lists and row mapping are all derived from :data:`JOB_FIELDS`.
``tests/unit/test_jobfields.py`` fails when a field of :class:`~rota.core.models.Job` or a
column of the ``jobs`` table is missing here, so a new field cannot be half added.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from rota.core.models import ConcurrencyPolicy, JobSource, MisfirePolicy, Priority, ZombiePolicy


class Part(enum.Enum):
    """Which write keeps a field (the store writes a job's fields in these groups)."""

    IDENTITY = "identity"
    """Written once, when the job is created (id, source, creation)."""
    DEFINITION = "definition"
    """What the job is and when it fires: replaced as a whole by every update."""
    STATISTICS = "statistics"
    """Run counts and durations: kept by the status tracker only."""
    AUTO_DISABLE = "auto_disable"
    """The consecutive-failure state: kept by the status tracker; an update writes it only
    when it sets ``is_active`` (which ends the auto-disable state)."""
    PAUSE = "pause"
    """The pause and skip state (``POST /jobs/{id}/pause``, ``/resume``, ``/skip``): kept by
    the pause service, the dispatcher (which counts down ``skip_next``) and the end of a
    timed pause; never written by an update, not versioned (state, not definition)."""


class Shape(enum.Enum):
    """How a field's value is kept (and read back)."""

    PLAIN = "plain"
    """Text, a number, a flag, a date-time, an id, or JSON: as it is."""
    ENUM = "enum"
    """A member of the field's ``enum``: by its value (an int or a string)."""
    TUPLE = "tuple"
    """A tuple: as a JSON array."""
    MAPPING = "mapping"
    """A read-only mapping: as a JSON object."""


_API_NAMES: Final = {
    "concurrency_policy": "concurrentExecutionPolicy",
    "average_duration_ms": "averageDuration",
    "interval_seconds": "every",
}
"""Attribute names whose API name is not their camelCase spelling (the reference API's)."""


def api_name(field: str) -> str:
    """The API (camelCase) name of a job attribute, for error messages."""
    if field in _API_NAMES:
        return _API_NAMES[field]
    head, *rest = field.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True, slots=True)
class JobField:
    """One field of :class:`~rota.core.models.Job`."""

    name: str
    """The attribute name (snake_case)."""
    part: Part
    updatable: bool = False
    """A partial change (``PATCH``, :meth:`JobService.update_job`) may set it."""
    nullable: bool = False
    """It may be ``None`` (for an updatable field: ``null`` in a change clears it)."""
    versioned: bool = False
    """A change of it bumps the job's version and keeps a snapshot of the old one."""
    schedule: bool = False
    """Part of the schedule: a change of it recomputes the next fire."""
    planned: bool = False
    """The fire planner reads it: the dispatcher loads these fields only."""
    shape: Shape = Shape.PLAIN
    enum: type[enum.Enum] | None = None
    """With ``Shape.ENUM``: the enum its values belong to."""
    stored_as: str | None = None
    """The store's column, when it is not named as the field."""
    stored_default: object = None
    """The value nearly every job has, which a compact store keeps as ``NULL`` (PostgreSQL,
    migration 0024: a new job's run counts, misfire policy, time zone and source cost no
    bytes); a ``NULL`` of the column reads as it. ``None``: the column holds the value."""

    def __post_init__(self) -> None:
        if (self.shape is Shape.ENUM) != (self.enum is not None):
            raise ValueError(f"job field {self.name}: an enum goes with Shape.ENUM, and only")

    @property
    def column(self) -> str:
        return self.stored_as or self.name

    @property
    def api(self) -> str:
        """Its name in the API (camelCase)."""
        return api_name(self.name)


_ID, _DEF, _STATS, _AUTO = Part.IDENTITY, Part.DEFINITION, Part.STATISTICS, Part.AUTO_DISABLE
_PAUSE = Part.PAUSE


def _setting(
    name: str, *, versioned: bool = False, schedule: bool = False, planned: bool = False
) -> JobField:
    """A definition field a change may set or clear (set it to ``None``)."""
    return JobField(
        name, _DEF, updatable=True, nullable=True, versioned=versioned, schedule=schedule,
        planned=planned,
    )  # fmt: skip


def _choice(
    name: str,
    kind: type[enum.Enum],
    *,
    nullable: bool = False,
    planned: bool = True,
    stored_default: object = None,
) -> JobField:
    """A definition field a change may set, whose values are the members of ``kind``
    (versioned: a setting)."""
    return JobField(
        name, _DEF, updatable=True, nullable=nullable, versioned=True, planned=planned,
        shape=Shape.ENUM, enum=kind, stored_default=stored_default,
    )  # fmt: skip


JOB_FIELDS: Final[tuple[JobField, ...]] = (
    JobField("id", _ID, planned=True),
    JobField("job_type", _DEF, updatable=True, versioned=True, planned=True),
    _setting("worker_id", versioned=True, planned=True),
    JobField("display_name", _DEF, updatable=True),
    JobField("description", _DEF, updatable=True),
    JobField("tags", _DEF, updatable=True, shape=Shape.TUPLE),
    _setting("job_data", versioned=True, planned=True),
    _setting("cron_expression", versioned=True, schedule=True, planned=True),
    JobField(
        "time_zone",
        _DEF,
        updatable=True,
        versioned=True,
        schedule=True,
        planned=True,
        stored_default="UTC",
    ),
    _setting("execute_at", versioned=True, schedule=True, planned=True),
    JobField("is_active", _DEF, updatable=True, planned=True),
    _choice("priority", Priority),
    _choice("concurrency_policy", ConcurrencyPolicy),
    _choice("misfire_policy", MisfirePolicy, stored_default=MisfirePolicy.FIRE_ONCE),
    _setting("timeout_seconds", versioned=True, planned=True),
    _setting("max_retries", versioned=True, planned=True),
    _setting("retry_delay_seconds", versioned=True, planned=True),
    JobField("next_run_at", _DEF, nullable=True, planned=True),
    JobField("bucket", _DEF, planned=True),
    JobField("version", _DEF, planned=True),
    JobField("created_at", _ID, planned=True),  # an interval's default anchor
    JobField("updated_at", _DEF),
    JobField("created_by", _ID, nullable=True),
    JobField("updated_by", _DEF, nullable=True),
    JobField("total_executions", _STATS, stored_default=0),
    JobField("success_count", _STATS, stored_default=0),
    JobField("failure_count", _STATS, stored_default=0),
    JobField("average_duration_ms", _STATS, nullable=True),
    JobField("source", _ID, shape=Shape.ENUM, enum=JobSource, stored_default=JobSource.API),
    JobField("declared_spec", _DEF, updatable=True, nullable=True, shape=Shape.MAPPING),
    _setting("auto_disable_threshold", versioned=True),
    _setting("auto_disable_window_seconds", versioned=True),
    _setting("auto_disable_cooldown_seconds", versioned=True),
    JobField("consecutive_failures", _AUTO, stored_default=0),
    JobField("last_failure_at", _AUTO, nullable=True),
    JobField("disabled_reason", _AUTO, nullable=True),
    JobField("disabled_at", _AUTO, nullable=True),
    JobField("probing", _AUTO, planned=True),
    _choice("zombie_policy", ZombiePolicy, nullable=True, planned=False),
    _setting("zombie_threshold_seconds", versioned=True),
    _setting("interval_seconds", versioned=True, schedule=True, planned=True),
    _setting("start_at", versioned=True, schedule=True, planned=True),
    _setting("end_at", versioned=True, schedule=True, planned=True),
    _setting("max_runs", versioned=True, schedule=True, planned=True),
    JobField("run_count", _STATS, nullable=True, planned=True),
    _setting("jitter_seconds", versioned=True, planned=True),
    _setting("misfire_window_seconds", versioned=True, planned=True),
    JobField("paused_at", _PAUSE, nullable=True, planned=True),
    JobField("paused_by", _PAUSE, nullable=True),
    JobField("pause_note", _PAUSE, nullable=True, planned=True),
    JobField("paused_until", _PAUSE, nullable=True, planned=True),
    JobField("skip_next", _PAUSE, nullable=True, planned=True),
    JobField("skip_note", _PAUSE, nullable=True, planned=True),
)
"""Every field of :class:`~rota.core.models.Job`, in its order."""

BY_NAME: Final[Mapping[str, JobField]] = {f.name: f for f in JOB_FIELDS}

UPDATABLE_FIELDS: Final = frozenset(f.name for f in JOB_FIELDS if f.updatable)
"""Job fields :meth:`JobService.update_job` may change (snake_case attribute names)."""
NULLABLE_FIELDS: Final = frozenset(f.name for f in JOB_FIELDS if f.updatable and f.nullable)
"""The updatable fields a change may set to ``None``."""
VERSIONED_FIELDS: Final = tuple(f.name for f in JOB_FIELDS if f.versioned)
"""A change of any of these bumps a job's version and keeps a snapshot of the old one: every
setting of what runs, when and how (type, group, data, schedule, priority, overlap and misfire
policies, timeout, retries, auto-disable and zombie settings). The labels (name, description,
tags) and the state (``is_active``, statistics, auto-disable state) are not versioned."""
SCHEDULE_FIELDS: Final = tuple(f.name for f in JOB_FIELDS if f.schedule)
"""A change of any of these recomputes the job's next fire."""


def version_snapshot(job: object) -> dict[str, object]:
    """The versioned fields of a job under their API names, as JSON values (an enum by its
    value, a date-time as ISO text, a tuple as a list): what a job version keeps."""
    snapshot: dict[str, object] = {}
    for field in JOB_FIELDS:
        if not field.versioned:
            continue
        value = getattr(job, field.name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        snapshot[field.api] = value
    return snapshot
