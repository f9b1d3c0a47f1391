"""Typed enqueue from a job's own definition: ``await generate_report.now(client, Report(…))``.

:class:`Enqueue` is the part of :class:`~rota.sdk.job.JobDefinition` that creates jobs of its
type through a client. It imports no client: it takes any object shaped like one
(:class:`AsyncEnqueuer`, which ``rota.Client`` is, or :class:`SyncEnqueuer`, which
``rota.SyncClient`` is) and returns what the client's ``enqueue`` returns — a handle to await
the run's result (:class:`Handle`), or with the sync client the handle itself
(:class:`SyncHandle`).

Type checkers (mypy, pyright) read the data's type from the handler's data parameter and the
result's from its return type::

    @rota.job("GenerateReportJob")
    async def generate_report(ctx: rota.JobContext, data: Report) -> str: ...

    handle = await generate_report.now(client, Report(kind="sales"))  # Handle[…str]
    text = await handle.result(timeout=60)                               # str
    await generate_report.now(client, {"kind": 1})                       # a type error
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict, TypeVar, Unpack, overload
from uuid import UUID

from rota.core.models import Priority

__all__ = [
    "AsyncEnqueuer",
    "Enqueue",
    "EnqueueOptions",
    "Handle",
    "SyncEnqueuer",
    "SyncHandle",
]

D = TypeVar("D")
R = TypeVar("R")
T = TypeVar("T")
D_contra = TypeVar("D_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)

Seconds = timedelta | float
"""A duration: a timedelta, or seconds."""


class EnqueueOptions(TypedDict, total=False):
    """The job's options an enqueue takes as keyword arguments (each optional)."""

    display_name: str
    description: str
    priority: Priority | int
    """0 (VeryLow) … 4 (Critical); default: the job type's, else Medium."""
    max_retries: int
    """Attempts after the first; default: the job type's (``@rota.job(max_retries=…)``)."""
    retry_delay: Seconds
    """Base wait before the first retry, doubled for each further one."""
    timeout: Seconds
    """How long an attempt may run."""
    tags: Sequence[str]
    idempotency_key: str
    """A repeat with the same key within 24 h returns the first call's job, creates nothing."""
    depends_on: Sequence[Any]
    """Upstream jobs: ids, ``(id, rule)`` pairs (rules ``success``, ``completion``,
    ``failure``) or ``{"job_id", "on"}`` mappings."""
    worker_id: str
    """The worker group to run it (default: a live group declaring the type)."""


class Handle(Protocol[R_co]):
    """A created job's run, to wait for (``rota.Client``'s handles are of this shape).
    ``R_co`` is the handler's return type (a coroutine's for an ``async def``:
    :meth:`result` unwraps it)."""

    @property
    def job_id(self) -> UUID: ...

    @property
    def occurrence_id(self) -> UUID | None:
        """The run waited for, when known (a trigger's); else the job's first run to end."""

    async def wait(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """The run's occurrence once it has ended, whatever its status."""

    # ``timeout=`` as asyncio.wait_for's: the handle bounds its own wait.
    @overload
    async def result(
        self: Handle[Coroutine[Any, Any, T]],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> T: ...
    @overload
    async def result(self: Handle[T], timeout: float | None = None) -> T: ...  # noqa: ASYNC109


class SyncHandle(Protocol[R_co]):
    """:class:`Handle` for code without an event loop (``rota.SyncClient``'s): blocking."""

    @property
    def job_id(self) -> UUID: ...

    @property
    def occurrence_id(self) -> UUID | None: ...

    def wait(self, timeout: float | None = None) -> Any: ...

    @overload
    def result(self: SyncHandle[Coroutine[Any, Any, T]], timeout: float | None = None) -> T: ...
    @overload
    def result(self: SyncHandle[T], timeout: float | None = None) -> T: ...


class _WithJobId(Protocol):
    @property
    def job_id(self) -> UUID: ...


class AsyncEnqueuer(Protocol):
    """What the definition needs of an async client (``rota.Client``)."""

    def enqueue(
        self,
        job_type: str,
        data: Any = None,
        *,
        at: datetime | None = None,
        delay: Seconds | None = None,
        cron: str | None = None,
        time_zone: str | None = None,
        display_name: str | None = None,
        description: str | None = None,
        priority: Priority | int | None = None,
        max_retries: int | None = None,
        retry_delay: Seconds | None = None,
        timeout: Seconds | None = None,
        tags: Sequence[str] | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[Any] | None = None,
        worker_id: str | None = None,
        result_type: Any = None,
    ) -> Awaitable[object]: ...

    def handle(
        self,
        job_id: UUID | str,
        occurrence_id: UUID | str | None = None,
        *,
        result_type: Any = None,
    ) -> object: ...


class SyncEnqueuer(Protocol):
    """What the definition needs of a blocking client (``rota.SyncClient``)."""

    def enqueue(
        self,
        job_type: str,
        data: Any = None,
        *,
        at: datetime | None = None,
        delay: Seconds | None = None,
        cron: str | None = None,
        time_zone: str | None = None,
        display_name: str | None = None,
        description: str | None = None,
        priority: Priority | int | None = None,
        max_retries: int | None = None,
        retry_delay: Seconds | None = None,
        timeout: Seconds | None = None,
        tags: Sequence[str] | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[Any] | None = None,
        worker_id: str | None = None,
        result_type: Any = None,
    ) -> _WithJobId: ...

    def handle(
        self,
        job_id: UUID | str,
        occurrence_id: UUID | str | None = None,
        *,
        result_type: Any = None,
    ) -> object: ...


class _Takes(Protocol[D_contra, R_co]):
    """A ``(ctx, data)`` handler's shape: what binds the data and result types."""

    def __call__(self, ctx: Any, data: D_contra, /) -> R_co: ...


class _Returns(Protocol[R_co]):
    """Any handler's shape, for its return type."""

    def __call__(self, *args: Any, **kwargs: Any) -> R_co: ...


class _TakesNothing(Protocol[R_co]):
    """A ``(ctx)`` handler's shape."""

    def __call__(self, ctx: Any, /) -> R_co: ...


_NO_TYPE = (None, Any, object)


class Enqueue:
    """Enqueue methods of a job definition (mixed into
    :class:`~rota.sdk.job.JobDefinition`): each creates a job of this type and returns a
    handle on its run. The data is the handler's data type (``rota.JobData`` models, or any
    JSON-able value); a ``(ctx)`` handler takes none."""

    name: str

    def result_type(self) -> Any:
        """The handler's declared return type (``None``: not declared or ``Any``): what a
        handle's ``result()`` validates the run's result into."""
        handler = getattr(self, "__wrapped__", None)  # the function (functools.update_wrapper)
        try:
            hints = typing.get_type_hints(handler)
        except (NameError, TypeError):  # a name defined in a function's scope: left untyped
            return None
        declared = hints.get("return", Any)
        return None if declared in _NO_TYPE else declared

    def _send(self, client: Any, data: Any, plan: dict[str, Any], options: Any) -> Any:
        return client.enqueue(self.name, data, **plan, **options, result_type=self.result_type())

    # --- now -------------------------------------------------------------------------------

    @overload
    def now(
        self: _Takes[D, R], client: SyncEnqueuer, data: D, **options: Unpack[EnqueueOptions]
    ) -> SyncHandle[R]: ...
    @overload
    def now(
        self: _Takes[D, R], client: AsyncEnqueuer, data: D, **options: Unpack[EnqueueOptions]
    ) -> Awaitable[Handle[R]]: ...
    @overload
    def now(
        self: _TakesNothing[R], client: SyncEnqueuer, **options: Unpack[EnqueueOptions]
    ) -> SyncHandle[R]: ...
    @overload
    def now(
        self: _TakesNothing[R], client: AsyncEnqueuer, **options: Unpack[EnqueueOptions]
    ) -> Awaitable[Handle[R]]: ...
    def now(self, client: Any, data: Any = None, **options: Any) -> Any:
        """Run once, as soon as a worker is free."""
        return self._send(client, data, {}, options)

    # --- at a time -------------------------------------------------------------------------

    @overload
    def schedule(
        self: _Takes[D, R],
        client: SyncEnqueuer,
        data: D,
        *,
        at: datetime,
        **options: Unpack[EnqueueOptions],
    ) -> SyncHandle[R]: ...
    @overload
    def schedule(
        self: _Takes[D, R],
        client: AsyncEnqueuer,
        data: D,
        *,
        at: datetime,
        **options: Unpack[EnqueueOptions],
    ) -> Awaitable[Handle[R]]: ...
    @overload
    def schedule(
        self: _TakesNothing[R],
        client: SyncEnqueuer,
        *,
        at: datetime,
        **options: Unpack[EnqueueOptions],
    ) -> SyncHandle[R]: ...
    @overload
    def schedule(
        self: _TakesNothing[R],
        client: AsyncEnqueuer,
        *,
        at: datetime,
        **options: Unpack[EnqueueOptions],
    ) -> Awaitable[Handle[R]]: ...
    def schedule(
        self, client: Any, data: Any = None, *, at: datetime | None = None, **options: Any
    ) -> Any:
        """Run once at ``at`` (an aware datetime; a naive one is refused)."""
        if at is None:
            raise TypeError("schedule() needs at=: an aware datetime")
        return self._send(client, data, {"at": at}, options)

    # --- after a delay ---------------------------------------------------------------------

    @overload
    def after(
        self: _Takes[D, R],
        client: SyncEnqueuer,
        data: D,
        *,
        delay: Seconds,
        **options: Unpack[EnqueueOptions],
    ) -> SyncHandle[R]: ...
    @overload
    def after(
        self: _Takes[D, R],
        client: AsyncEnqueuer,
        data: D,
        *,
        delay: Seconds,
        **options: Unpack[EnqueueOptions],
    ) -> Awaitable[Handle[R]]: ...
    @overload
    def after(
        self: _TakesNothing[R],
        client: SyncEnqueuer,
        *,
        delay: Seconds,
        **options: Unpack[EnqueueOptions],
    ) -> SyncHandle[R]: ...
    @overload
    def after(
        self: _TakesNothing[R],
        client: AsyncEnqueuer,
        *,
        delay: Seconds,
        **options: Unpack[EnqueueOptions],
    ) -> Awaitable[Handle[R]]: ...
    def after(
        self, client: Any, data: Any = None, *, delay: Seconds | None = None, **options: Any
    ) -> Any:
        """Run once, ``delay`` (a timedelta, or seconds) from now."""
        if delay is None:
            raise TypeError("after() needs delay=: a timedelta or seconds")
        return self._send(client, data, {"delay": delay}, options)

    # --- on a cron schedule ----------------------------------------------------------------

    @overload
    def cron(
        self: _Takes[D, R],
        client: SyncEnqueuer,
        data: D,
        expression: str,
        *,
        time_zone: str | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> SyncHandle[R]: ...
    @overload
    def cron(
        self: _Takes[D, R],
        client: AsyncEnqueuer,
        data: D,
        expression: str,
        *,
        time_zone: str | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Awaitable[Handle[R]]: ...
    @overload
    def cron(
        self: _TakesNothing[R],
        client: SyncEnqueuer,
        *,
        expression: str,
        time_zone: str | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> SyncHandle[R]: ...
    @overload
    def cron(
        self: _TakesNothing[R],
        client: AsyncEnqueuer,
        *,
        expression: str,
        time_zone: str | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Awaitable[Handle[R]]: ...
    def cron(
        self,
        client: Any,
        data: Any = None,
        expression: str | None = None,
        *,
        time_zone: str | None = None,
        **options: Any,
    ) -> Any:
        """A recurring job on ``expression`` (5 or 6 fields, ``@daily`` …) in ``time_zone``
        (default: the job type's, ``@rota.job(time_zone=…)``, else UTC); its handle waits for
        the first run to end. A ``(ctx)`` handler names it:
        ``cleanup.cron(client, expression="@daily")``."""
        if expression is None:
            raise TypeError("cron() needs a cron expression")
        if time_zone is None:
            options_of_type = getattr(self, "options", None)
            time_zone = getattr(options_of_type, "time_zone", None) or "UTC"
        return self._send(client, data, {"cron": expression, "time_zone": time_zone}, options)

    # --- a run created otherwise -----------------------------------------------------------

    @overload
    def handle(
        self: _Returns[R],
        client: SyncEnqueuer,
        job_id: UUID | str,
        occurrence_id: UUID | str | None = None,
    ) -> SyncHandle[R]: ...
    @overload
    def handle(
        self: _Returns[R],
        client: AsyncEnqueuer,
        job_id: UUID | str,
        occurrence_id: UUID | str | None = None,
    ) -> Handle[R]: ...
    def handle(
        self, client: Any, job_id: UUID | str, occurrence_id: UUID | str | None = None
    ) -> Any:
        """A typed handle on a run of a job of this type made another way (a trigger, the
        dashboard, ``create_job``): ``occurrence_id``'s, else the job's first run to end."""
        return client.handle(job_id, occurrence_id, result_type=self.result_type())
