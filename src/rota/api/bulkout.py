"""Many jobs as the API shows them, written straight to JSON (a bulk create's answer).

A bulk create answers with up to 10,000 :class:`~rota.api.schemas.jobs.JobOut`; building
and validating each model cost more than the rest of the request (issue 19). Here each job
becomes a plain dict, keyed and ordered as ``JobOut`` (its camelCase aliases), with the
values ``JobOut`` would hold (floats as floats), and the whole answer is serialized by
pydantic-core's ``to_json``: the same writer the models use, so the bytes are the same
(a test compares them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, get_args

from pydantic import BaseModel
from pydantic_core import to_json

from rota.api.schemas.jobs import _JOB_OUT_FIELDS, AuditInfoOut, AutoDisableOut, JobOut
from rota.core.autodisable import AutoDisableDefaults, effective
from rota.core.intervals import format_duration
from rota.core.models import Job
from rota.services.jobs import JobService

JSON: Final = "application/json"


def _is_float(model: type[BaseModel], name: str) -> bool:
    annotation = model.model_fields[name].annotation
    return annotation is float or float in get_args(annotation)


def _alias(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].alias or name


_COPIED: Final = _JOB_OUT_FIELDS
_KEYS: Final = tuple(_alias(JobOut, name) for name in JobOut.model_fields)
"""JobOut's keys in its order; every value below is put under its alias, then ordered."""
_A = {name: _alias(JobOut, name) for name in JobOut.model_fields}
_AUDIT = {name: _alias(AuditInfoOut, name) for name in AuditInfoOut.model_fields}
_AUTO = {name: _alias(AutoDisableOut, name) for name in AutoDisableOut.model_fields}
_COPY: Final = tuple((_A[name], attribute) for name, attribute in _COPIED)
_FLOATS: Final = tuple(_A[name] for name, _ in _COPIED if _is_float(JobOut, name))
"""The copied values JobOut holds as floats (a job's may be an int: ``float()`` as JobOut)."""


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _job(job: Job, defaults: AutoDisableDefaults, warnings: list[dict[str, str]]) -> dict[str, Any]:
    values = {alias: getattr(job, attribute) for alias, attribute in _COPY}
    for key in _FLOATS:
        values[key] = _float(values[key])
    settings = effective(job, defaults)
    changed = job.updated_at != job.created_at
    timeout = job.timeout_seconds
    average = _float(job.average_duration_ms)
    values.update(
        {
            _A["tags"]: list(job.tags),
            _A["timeout_minutes"]: None if timeout is None else timeout / 60,
            _A["success_rate"]: _float(job.success_rate),
            _A["average_duration"]: average,
            _A["avarage_duration"]: average,
            _A["audit_info"]: {
                _AUDIT["creation_date"]: job.created_at,
                _AUDIT["creator_user_name"]: job.created_by,
                _AUDIT["last_modification_date"]: job.updated_at if changed else None,
                _AUDIT["last_modifier_user_name"]: job.updated_by if changed else None,
            },
            _A["source"]: job.source.value,
            _A["every"]: format_duration(job.interval_seconds),
            _A["auto_disable"]: {
                _AUTO["threshold"]: settings.threshold,
                _AUTO["window_seconds"]: _float(settings.window_seconds),
                _AUTO["cooldown_seconds"]: _float(settings.cooldown_seconds),
                _AUTO["consecutive_failures"]: job.consecutive_failures,
                _AUTO["last_failure_at"]: job.last_failure_at,
                _AUTO["disabled_reason"]: job.disabled_reason,
                _AUTO["disabled_at"]: job.disabled_at,
                _AUTO["probing"]: job.probing,
            },
            _A["paused"]: job.paused_at is not None,
            _A["skip_next"]: job.skip_next or 0,
            _A["job_data_redacted"]: False,  # an Operator's answer: the data shown
            _A["warnings"]: warnings,
            _A["depends_on"]: None,
            _A["dependents"]: None,
        }
    )
    return {key: values[key] for key in _KEYS}


def jobs_json(jobs: Sequence[Job], service: JobService) -> bytes:
    """``{"items": [...]}`` as :class:`~rota.api.schemas.jobs.JobList` would serialize it,
    each job with its warnings (from the worker registry as the service last read it)."""
    defaults = service.auto_disable_defaults
    items = [
        _job(job, defaults, [{"code": w.code, "message": w.message} for w in warnings])
        for job in jobs
        for warnings in (service.job_warnings(job),)
    ]
    return to_json({"items": items})


def ids_json(jobs: Sequence[Job]) -> bytes:
    """``{"count": n, "ids": [...]}`` as :class:`~rota.api.schemas.jobs.BulkCreatedIds`
    would serialize it (a bulk create's answer under ``Prefer: return=minimal``)."""
    return to_json({"count": len(jobs), "ids": [job.id for job in jobs]})
