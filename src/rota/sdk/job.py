"""The worker SDK: what users write job handlers against (DESIGN.md §4).

.. code-block:: python

    import rota

    class Report(rota.JobData):
        kind: str

    @rota.job("GenerateReportJob", max_retries=5, retry_delay=10, timeout=600)
    async def generate_report(ctx: rota.JobContext, data: Report) -> str:
        ctx.log.info("building %s report", data.kind)
        await ctx.check_cancelled()
        return "report ready"

``@rota.job`` returns a :class:`JobDefinition`; nothing is registered globally. Workers find
definitions by scanning modules (:mod:`rota.sdk.registry`). Application code runs jobs from the
same definition, typed from the handler's signature (:mod:`rota.sdk.enqueue`):

.. code-block:: python

    async with rota.Client(url, api_key=key) as client:
        handle = await generate_report.now(client, Report(kind="sales"), priority=3)
        text = await handle.result(timeout=60)  # "report ready": the handler's str
        await generate_report.schedule(client, Report(kind="hr"), at=tomorrow_9am)
        await generate_report.after(client, Report(kind="ops"), delay=timedelta(minutes=5))
        await generate_report.cron(client, Report(kind="sales"), "0 6 * * *", time_zone="UTC")
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, ParamSpec, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pydantic
from pydantic import BaseModel

from rota.core.errors import PermanentError, ValidationError
from rota.core.models import JsonValue, Priority
from rota.sdk.context import JobContext, LogSink
from rota.sdk.enqueue import Enqueue

__all__ = [
    "JobContext",
    "JobData",
    "JobDefinition",
    "JobOptions",
    "LogSink",
    "PermanentError",
    "RetryHook",
    "job",
]

P = ParamSpec("P")
R = TypeVar("R")

RetryHook = Callable[["JobContext", BaseException], "datetime | None"]
"""``should_retry(ctx, exc)``: when the next attempt is due, or ``None`` for no retry."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$")
_MAX_NAME_LENGTH = 200
_NO_ANNOTATION = (inspect.Parameter.empty, Any, object)


class JobData(BaseModel):
    """Base class for typed job data: a pydantic model whose JSON Schema is published with the
    job type (the dashboard checks job data against it)."""


# --- options ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """A job type's defaults, as given to :func:`job` (validated)."""

    max_retries: int | None = None
    retry_delay: float | None = None
    """Base delay in seconds before the first retry (doubled for each further one); a job's
    own ``retryDelaySeconds`` wins over it."""
    retry_jitter: float = 0.0
    """Randomness of each retry delay, as a fraction: the delay is drawn uniformly from
    ``delay × (1 − jitter)`` to ``delay × (1 + jitter)`` (0: none, 1: from 0 to twice)."""
    max_retry_delay: float | None = None
    """Longest wait before a retry, in seconds (``None``: the worker's cap, 30 days)."""
    timeout: float | None = None
    """Seconds an attempt may run; a job's own ``timeoutSeconds`` wins over it."""
    priority: Priority | None = None
    cron: str | None = None
    time_zone: str = "UTC"
    should_retry: RetryHook | None = None
    concurrency: int | None = None
    """Most handlers of this job type one worker runs at once (``None``: its slots)."""


def _check_name(name: object) -> str:
    if callable(name):
        raise ValidationError(
            "@rota.job needs a job type name: use @rota.job('MyJob')", field="name"
        )
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("a job type name must be a non-empty string", field="name")
    if len(name) > _MAX_NAME_LENGTH or not _NAME_RE.match(name):
        raise ValidationError(
            f"job type name {name!r} must be at most {_MAX_NAME_LENGTH} characters of letters, "
            "digits, '_', '.', ':' or '-'",
            field="name",
        )
    return name


def _check_number(value: float | None, field: str, *, allow_zero: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{field} must be a finite number of seconds", field=field)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValidationError(f"{field} must be {bound}, got {value}", field=field)
    return float(value)


def _check_jitter(value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise ValidationError(
            f"retryJitter must be a fraction between 0 and 1, got {value!r}", field="retryJitter"
        )
    return float(value)


def _check_retries(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(
            f"maxRetries must be an integer >= 0, got {value!r}", field="maxRetries"
        )
    return value


def _check_concurrency(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(
            f"concurrency must be an integer >= 1, got {value!r}", field="concurrency"
        )
    return value


def _check_priority(value: Priority | int | None) -> Priority | None:
    if value is None:
        return None
    try:
        return Priority(value)
    except ValueError:
        raise ValidationError(
            f"priority must be one of {[p.value for p in Priority]}, got {value!r}",
            field="priority",
        ) from None


def _check_schedule(cron: str | None, time_zone: str) -> None:
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValidationError(f"unknown time zone {time_zone!r}", field="timeZone") from None
    if cron is not None:
        from rota.core.cron import CronSchedule  # only jobs with a schedule need the parser

        CronSchedule.parse(cron, time_zone)


def build_options(
    *,
    max_retries: int | None = None,
    retry_delay: float | None = None,
    retry_jitter: float = 0.0,
    max_retry_delay: float | None = None,
    timeout: float | None = None,
    priority: Priority | int | None = None,
    cron: str | None = None,
    time_zone: str = "UTC",
    should_retry: RetryHook | None = None,
    concurrency: int | None = None,
) -> JobOptions:
    """Validated :class:`JobOptions`; raises :class:`~rota.core.errors.ValidationError`."""
    _check_schedule(cron, time_zone)
    if should_retry is not None and not callable(should_retry):
        raise ValidationError("should_retry must be callable", field="shouldRetry")
    return JobOptions(
        max_retries=_check_retries(max_retries),
        retry_delay=_check_number(retry_delay, "retryDelay", allow_zero=True),
        retry_jitter=_check_jitter(retry_jitter),
        max_retry_delay=_check_number(max_retry_delay, "maxRetryDelay", allow_zero=False),
        timeout=_check_number(timeout, "timeout", allow_zero=False),
        priority=_check_priority(priority),
        cron=cron,
        time_zone=time_zone,
        should_retry=should_retry,
        concurrency=_check_concurrency(concurrency),
    )


# --- definitions ----------------------------------------------------------------------------


def _data_parameter(func: Callable[..., Any]) -> inspect.Parameter | None:
    """The handler's data parameter (its second), after checking the signature's shape."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"cannot read the signature of {func!r}: {exc}") from exc
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if not 1 <= len(positional) <= 2:
        raise ValidationError(
            f"a job handler takes (ctx) or (ctx, data); {func.__qualname__} takes "
            f"{len(positional)} required positional parameters"
        )
    return positional[1] if len(positional) == 2 else None


class _DataSpec:
    """How to turn a message's raw job data into the handler's data argument."""

    __slots__ = ("adapter", "annotation", "model")

    def __init__(self, annotation: Any) -> None:
        self.annotation = annotation
        self.model: type[BaseModel] | None = None
        self.adapter: pydantic.TypeAdapter[Any] | None = None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            self.model = annotation
        elif annotation not in _NO_ANNOTATION:
            self.adapter = pydantic.TypeAdapter(annotation)

    def parse(self, raw: JsonValue) -> Any:
        """The data argument from ``raw``. No data (``null`` or absent) means the handler's
        default: ``None`` if the annotation takes it (``dict | None``), else what ``{}``
        gives (an empty ``dict``, the model's defaults); the server checks ``null`` the
        same way against the type's schema (:mod:`rota.services.dataschema`)."""
        if self.model is not None:
            return self.model.model_validate({} if raw is None else raw)
        if self.adapter is not None:
            if raw is None:
                try:
                    return self.adapter.validate_python(None)
                except pydantic.ValidationError:
                    return self.adapter.validate_python({})
            return self.adapter.validate_python(raw)
        return {} if raw is None else raw

    def schema(self) -> dict[str, JsonValue] | None:
        if self.model is not None:
            return self.model.model_json_schema()
        if self.adapter is not None:
            return self.adapter.json_schema()
        return None


class JobDefinition(Enqueue, Generic[P, R]):
    """A job type: its handler, name and options. Made by :func:`job`; still callable like the
    handler it wraps (``definition(ctx, data)`` runs the function itself). Its enqueue methods
    (:class:`~rota.sdk.enqueue.Enqueue`: ``now``, ``schedule``, ``after``, ``cron``) create
    jobs of its type through a client, typed from the handler's signature."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str,
        options: JobOptions,
        localns: dict[str, Any] | None = None,
    ) -> None:
        self.func = func
        self._localns = localns
        """Names of the scope a nested handler was defined in, for its annotations."""
        self.name = _check_name(name)
        self.options = options
        self.is_async = inspect.iscoroutinefunction(func)
        self._data_param = _data_parameter(func)
        self.takes_data = self._data_param is not None
        self._spec: _DataSpec | None = None
        functools.update_wrapper(self, func)
        with contextlib.suppress(NameError):  # a forward reference defined later: resolved on use
            self._resolve()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<JobDefinition {self.name!r} {self.func.__module__}.{self.func.__qualname__}>"

    def _resolve(self) -> _DataSpec:
        spec = self._spec
        if spec is None:
            annotation: Any = inspect.Parameter.empty
            if self._data_param is not None:
                hints = typing.get_type_hints(self.func, localns=self._localns)
                annotation = hints.get(self._data_param.name, inspect.Parameter.empty)
            spec = self._spec = _DataSpec(annotation)
            self._localns = None
        return spec

    @property
    def data_type(self) -> Any:
        """The annotation of the handler's data parameter (``inspect.Parameter.empty`` if none)."""
        return self._resolve().annotation

    @property
    def data_model(self) -> type[BaseModel] | None:
        """The pydantic model the handler's data is validated into, if it names one."""
        return self._resolve().model

    def data_schema(self) -> dict[str, JsonValue] | None:
        """The JSON Schema of the job data (``None`` when the handler takes untyped data)."""
        return self._resolve().schema()

    def parse_data(self, raw: JsonValue) -> Any:
        """The handler's data argument from a message's job data; raises
        :class:`~rota.core.errors.ValidationError` (field ``jobData``) when it does not fit."""
        try:
            return self._resolve().parse(raw)
        except pydantic.ValidationError as exc:
            none = (
                " (no data was given: the handler's default, {}, was tried)" if raw is None else ""
            )
            raise ValidationError(
                f"job data does not fit {self.name}{none}: {exc}", field="jobData"
            ) from exc

    def describe(self) -> dict[str, JsonValue]:
        """What a worker registers about this job type (``WorkerInfo.job_types`` values)."""
        o = self.options
        return {
            "schema": self.data_schema(),
            "maxRetries": o.max_retries,
            "retryDelaySeconds": o.retry_delay,
            "retryJitter": o.retry_jitter,
            "maxRetryDelaySeconds": o.max_retry_delay,
            "timeoutSeconds": o.timeout,
            "priority": None if o.priority is None else int(o.priority),
            "cronExpression": o.cron,
            "timeZone": o.time_zone,
            "isAsync": self.is_async,
            "concurrency": o.concurrency,
        }


def job(
    name: str,
    *,
    max_retries: int | None = None,
    retry_delay: float | None = None,
    retry_jitter: float = 0.0,
    max_retry_delay: float | None = None,
    timeout: float | None = None,
    priority: Priority | int | None = None,
    cron: str | None = None,
    time_zone: str = "UTC",
    should_retry: RetryHook | None = None,
    concurrency: int | None = None,
) -> Callable[[Callable[P, R]], JobDefinition[P, R]]:
    """Declare a job type: decorate ``(ctx)`` or ``(ctx, data)`` handlers, sync or async.

    ``max_retries``: attempts after the first (default: the scheduler's); ``retry_delay``: base
    seconds before the first retry, doubled for each further one (default 10): retry ``n``
    waits ``retry_delay × 2^(n − 1)``; ``retry_jitter``: a fraction (0-1) by which each wait
    varies at random, up or down; ``max_retry_delay``: the longest wait (default 30 days).
    A job's own ``maxRetries`` and ``retryDelaySeconds`` win over these defaults.
    ``timeout``: seconds per attempt (a job's ``timeoutSeconds`` wins; without either, the
    worker's default); an attempt over it ends TimedOut and is not retried.
    ``priority``: 0-4; ``cron`` / ``time_zone``: a default schedule.
    ``should_retry(ctx, exc)`` overrides the retry policy: it returns when the next attempt is
    due, or ``None`` for no retry (a :class:`PermanentError` is never retried).
    ``concurrency``: the most handlers of this type one worker process runs at once (within
    its own ``--concurrency``); further messages of the type wait, others pass them.
    """
    _check_name(name)
    options = build_options(
        max_retries=max_retries,
        retry_delay=retry_delay,
        retry_jitter=retry_jitter,
        max_retry_delay=max_retry_delay,
        timeout=timeout,
        priority=priority,
        cron=cron,
        time_zone=time_zone,
        should_retry=should_retry,
        concurrency=concurrency,
    )

    def decorate(func: Callable[P, R]) -> JobDefinition[P, R]:
        localns = None
        if "<locals>" in getattr(func, "__qualname__", ""):
            localns = dict(sys._getframe(1).f_locals)  # annotations may name local classes
        return JobDefinition(func, name=name, options=options, localns=localns)

    return decorate
