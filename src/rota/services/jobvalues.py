"""A job's definition fields checked and put in canonical form (pure): what the job service
takes from a spec or a change, or a ``ValidationError`` naming the field (its API name)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeVar

from rota.core.bounds import checked_schedule
from rota.core.errors import ValidationError
from rota.core.jobfields import api_name
from rota.core.jobspec import MAX_SECONDS, JobSpec
from rota.core.models import ConcurrencyPolicy, Job, MisfirePolicy, Priority, ZombiePolicy

E = TypeVar("E", Priority, ConcurrencyPolicy, MisfirePolicy, ZombiePolicy)


def normalised(job: Job | JobSpec) -> dict[str, Any]:
    """A job's (or a spec's) definition fields checked and in canonical form, by attribute
    name, or ``ValidationError``."""
    job_type = text_value(job.job_type, "job_type").strip()
    if not job_type:
        raise ValidationError("jobType must not be empty", field="jobType")
    return {
        "job_type": job_type,
        "display_name": text_value(job.display_name, "display_name").strip() or job_type,
        "description": text_value(job.description, "description"),
        "tags": tag_values(job.tags),
        "is_active": flag_value(job.is_active, "is_active"),
        "priority": enum_value(Priority, job.priority, "priority"),
        "concurrency_policy": enum_value(
            ConcurrencyPolicy, job.concurrency_policy, "concurrency_policy"
        ),
        "misfire_policy": enum_value(MisfirePolicy, job.misfire_policy, "misfire_policy"),
        "timeout_seconds": number_value(job.timeout_seconds, "timeout_seconds", positive=True),
        "max_retries": count_value(job.max_retries, "max_retries"),
        "retry_delay_seconds": number_value(job.retry_delay_seconds, "retry_delay_seconds"),
        "auto_disable_threshold": count_value(job.auto_disable_threshold, "auto_disable_threshold"),
        "auto_disable_window_seconds": number_value(
            job.auto_disable_window_seconds, "auto_disable_window_seconds", positive=True
        ),
        "auto_disable_cooldown_seconds": number_value(
            job.auto_disable_cooldown_seconds, "auto_disable_cooldown_seconds", positive=True
        ),
        "zombie_policy": None
        if job.zombie_policy is None
        else enum_value(ZombiePolicy, job.zombie_policy, "zombie_policy"),
        "zombie_threshold_seconds": number_value(
            job.zombie_threshold_seconds, "zombie_threshold_seconds", positive=True
        ),
        **checked_schedule(job),
    }


def text_value(value: object, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{api_name(field)} must be a string", field=api_name(field))
    return value


def tag_values(value: Iterable[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    raw = value.split(",") if isinstance(value, str) else value
    tags: dict[str, None] = {}
    for tag in raw:
        if not isinstance(tag, str):
            raise ValidationError("tags must be strings", field="tags")
        stripped = tag.strip()
        if stripped:
            tags[stripped] = None
    return tuple(tags)


def flag_value(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{api_name(field)} must be true or false", field=api_name(field))
    return value


def enum_value(kind: type[E], value: Any, field: str) -> E:
    if type(value) is kind:  # a member already (what the API's bodies hold)
        return value
    try:
        return kind(value)
    except ValueError as exc:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ValidationError(
            f"{api_name(field)} must be one of {allowed}", field=api_name(field)
        ) from exc


def number_value(value: object, field: str, *, positive: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{api_name(field)} must be a number", field=api_name(field))
    if value < 0 or (positive and value == 0):
        bound = "greater than 0" if positive else "at least 0"
        raise ValidationError(f"{api_name(field)} must be {bound}", field=api_name(field))
    if not math.isfinite(value) or value > MAX_SECONDS:
        raise ValidationError(
            f"{api_name(field)} must be at most {MAX_SECONDS} (10 years)", field=api_name(field)
        )
    return float(value)


def count_value(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(
            f"{api_name(field)} must be a whole number, at least 0", field=api_name(field)
        )
    return value
