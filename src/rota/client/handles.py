"""Handles on runs: what ``enqueue``, a job definition's ``now``/``schedule``/``after``/``cron``
and :meth:`Client.handle <rota.client.Client.handle>` return.

``await handle.result(timeout=…)`` waits for the run to end and returns the handler's result
(validated into the handler's declared return type when known), or raises
:class:`~rota.client.errors.RunFailedError` with the run. Waiting is built on the event stream,
not on polling: the handle subscribes first, and once the server says the subscription is in
place it reads the run's state once — so a run that ended before it subscribed is found by
that read, and one that ends after by its event. Nothing is read again until an event says
the run ended (or the stream reconnects, or reports a gap).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar
from uuid import UUID

import httpx
import pydantic

from rota.api.schemas.occurrences import OccurrenceDetail
from rota.client.errors import RunFailedError
from rota.core.models import OccurrenceStatus

if TYPE_CHECKING:
    from rota.api.schemas.jobs import JobOut
    from rota.client.aio import Client

R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")

S = OccurrenceStatus
ENDED: Final = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.SKIPPED})
"""A run in one of these has ended for good (``Unknown`` has not: it may get a new attempt)."""
_TYPES: Final = "occurrence.created,occurrence.updated"
_RECONNECT_SECONDS: Final = 1.0


class JobHandle(Generic[R_co]):
    """A job's run to wait for: the run ``occurrence_id`` when given, else the job's first
    run to end. ``job`` is the created job when the handle came from an enqueue."""

    def __init__(
        self,
        client: Client,
        job_id: UUID,
        *,
        occurrence_id: UUID | None = None,
        job: JobOut | None = None,
        result_type: Any = None,
    ) -> None:
        self._client = client
        self._job_id = job_id
        self._occurrence_id = occurrence_id
        self.job = job
        self._result_type = result_type

    def __repr__(self) -> str:
        run = "" if self._occurrence_id is None else f" run {self._occurrence_id}"
        return f"<JobHandle job {self._job_id}{run}>"

    @property
    def job_id(self) -> UUID:
        return self._job_id

    @property
    def occurrence_id(self) -> UUID | None:
        """The run waited for, if known."""
        return self._occurrence_id

    async def wait(self, timeout: float | None = None) -> OccurrenceDetail:  # noqa: ASYNC109
        """The run once it has ended (any final status, with its result or exception);
        :class:`TimeoutError` after ``timeout`` seconds (``None``: no limit)."""
        async with asyncio.timeout(timeout):
            return await self._wait()

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """The handler's result once the run Completed; :class:`RunFailedError` (with the
        run: status, exception) if it ended otherwise; :class:`TimeoutError` after
        ``timeout`` seconds. A result is validated into the handler's declared return type
        (a ``rota.JobData`` model, a dataclass, …) when the handle knows it."""
        occurrence = await self.wait(timeout)
        if occurrence.status != S.COMPLETED:
            raise RunFailedError(occurrence)
        if self._result_type is None:
            return occurrence.result
        return pydantic.TypeAdapter(self._result_type).validate_python(occurrence.result)

    async def _wait(self) -> OccurrenceDetail:
        params: dict[str, str] = {"types": _TYPES, "jobId": str(self._job_id)}
        if self._occurrence_id is not None:
            params["occurrenceId"] = str(self._occurrence_id)
        last: str | None = None
        while True:
            with contextlib.suppress(httpx.TransportError):
                stream = self._client._stream(params, last, announce=True)
                async with contextlib.aclosing(stream):
                    async for event in stream:
                        if event.id:
                            last = event.id
                        found = await self._ended(event.data if event.id else None)
                        if found is not None:
                            return found
            await asyncio.sleep(_RECONNECT_SECONDS)  # the stream ended: reconnect, resume

    async def _ended(self, event: dict[str, Any] | None) -> OccurrenceDetail | None:
        """The ended run an event names, or (``None``: connected, a gap) the state read."""
        if event is None:
            return await self._read_state()
        status = event.get("status")
        if status not in ENDED:
            return None
        found = UUID(str(event["occurrenceId"]))
        if self._occurrence_id is not None and found != self._occurrence_id:
            return None
        return await self._client.get_occurrence(found)

    async def _read_state(self) -> OccurrenceDetail | None:
        if self._occurrence_id is not None:
            occurrence = await self._client.get_occurrence(self._occurrence_id)
            return occurrence if occurrence.status in ENDED else None
        page = await self._client.list_occurrences(
            job_id=self._job_id, status=[int(s) for s in ENDED], limit=100
        )
        if not page.items:
            return None
        first = min(page.items, key=lambda o: (o.end_time or o.created_at, o.created_at))
        return await self._client.get_occurrence(first.id)


Runner = Callable[[Coroutine[Any, Any, Any]], Any]
"""Runs a coroutine on the sync client's loop and waits for it."""


class SyncJobHandle(Generic[R_co]):
    """:class:`JobHandle` for ``rota.SyncClient``: the same, blocking."""

    def __init__(self, handle: JobHandle[R_co], run: Runner) -> None:
        self._handle = handle
        self._run = run

    def __repr__(self) -> str:
        return repr(self._handle).replace("<JobHandle", "<SyncJobHandle", 1)

    @property
    def handle(self) -> JobHandle[R_co]:
        """The async handle underneath (on the sync client's own loop)."""
        return self._handle

    @property
    def job(self) -> JobOut | None:
        return self._handle.job

    @property
    def job_id(self) -> UUID:
        return self._handle.job_id

    @property
    def occurrence_id(self) -> UUID | None:
        return self._handle.occurrence_id

    def wait(self, timeout: float | None = None) -> OccurrenceDetail:
        """See :meth:`JobHandle.wait`."""
        detail: OccurrenceDetail = self._run(self._handle.wait(timeout))
        return detail

    def result(self, timeout: float | None = None) -> Any:
        """See :meth:`JobHandle.result`."""
        return self._run(self._handle.result(timeout))
