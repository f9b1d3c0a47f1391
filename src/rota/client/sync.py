"""The blocking facade of the client: :class:`SyncClient`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

from rota.api.schemas.apikeys import ApiKeyCreated, ApiKeyOut
from rota.api.schemas.dependencies import GraphRunDetail, GraphRunPage, JobDependenciesOut
from rota.api.schemas.failed import FailedOccurrenceOut, FailedOccurrencePage
from rota.api.schemas.jobs import BackfillOut, JobOut, JobPage
from rota.api.schemas.limits import LimitsOut
from rota.api.schemas.occurrences import LogPage, OccurrenceDetail, OccurrencePage
from rota.api.schemas.stats import Overview, Throughput
from rota.api.schemas.workers import WorkerList
from rota.client.aio import Client
from rota.client.events import StreamEvent
from rota.client.handles import SyncJobHandle

T = TypeVar("T")


class SyncClient:
    """:class:`Client` for code without an event loop: the same methods, blocking. It runs
    its own event loop in a background thread, and every call is handed to that loop: one
    connection pool and one sign-in, shared safely by any number of threads (a web app's
    request threads, a thread pool). Close it once, when the last thread is done with it."""

    def __init__(self, url: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rota-sync-client", daemon=True
        )
        self._thread.start()
        self._client: Client = self._run(self._make(url, options))

    @staticmethod
    async def _make(url: str, options: Mapping[str, Any]) -> Client:
        return Client(url, **options)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the loop. Calls still running in other threads (a
        handle's ``result()`` waiting) end with ``concurrent.futures.CancelledError``."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            self._run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _shutdown(self) -> None:
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self._client.aclose()

    @property
    def client(self) -> Client:
        """The async client underneath (runs on this facade's own loop)."""
        return self._client

    def call(self, awaitable: Awaitable[T]) -> T:
        """Run any coroutine of :attr:`client` and wait for it."""

        async def wrap() -> T:
            return await awaitable

        return self._run(wrap())

    def login(self) -> None:
        self._run(self._client.login())

    def create_api_key(self, name: str, role: str, **options: Any) -> ApiKeyCreated:
        return self._run(self._client.create_api_key(name, role, **options))

    def list_api_keys(self) -> list[ApiKeyOut]:
        return self._run(self._client.list_api_keys())

    def revoke_api_key(self, key_id: UUID | str) -> ApiKeyOut:
        return self._run(self._client.revoke_api_key(key_id))

    def create_job(self, *, idempotency_key: str | None = None, **fields: Any) -> JobOut:
        return self._run(self._client.create_job(idempotency_key=idempotency_key, **fields))

    def create_jobs(
        self, jobs: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[JobOut]:
        return self._run(self._client.create_jobs(jobs, idempotency_key=idempotency_key))

    def create_jobs_minimal(
        self, jobs: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[UUID]:
        return self._run(self._client.create_jobs_minimal(jobs, idempotency_key=idempotency_key))

    def enqueue(
        self,
        job_type: str,
        data: Any = None,
        *,
        at: datetime | None = None,
        delay: timedelta | float | None = None,
        cron: str | None = None,
        time_zone: str | None = None,
        display_name: str | None = None,
        description: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        retry_delay: timedelta | float | None = None,
        timeout: timedelta | float | None = None,
        tags: Sequence[str] | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[Any] | None = None,
        worker_id: str | None = None,
        result_type: Any = None,
    ) -> SyncJobHandle[Any]:
        """See :meth:`Client.enqueue`; the handle's ``result()`` blocks."""
        handle = self._run(
            self._client.enqueue(
                job_type,
                data,
                at=at,
                delay=delay,
                cron=cron,
                time_zone=time_zone,
                display_name=display_name,
                description=description,
                priority=priority,
                max_retries=max_retries,
                retry_delay=retry_delay,
                timeout=timeout,
                tags=tags,
                idempotency_key=idempotency_key,
                depends_on=depends_on,
                worker_id=worker_id,
                result_type=result_type,
            )
        )
        return SyncJobHandle(handle, self._run)

    def handle(
        self,
        job_id: UUID | str,
        occurrence_id: UUID | str | None = None,
        *,
        result_type: Any = None,
    ) -> SyncJobHandle[Any]:
        """See :meth:`Client.handle`."""
        handle = self._client.handle(job_id, occurrence_id, result_type=result_type)
        return SyncJobHandle(handle, self._run)

    def get_job(self, job_id: UUID | str) -> JobOut:
        return self._run(self._client.get_job(job_id))

    def list_jobs(self, **filters: Any) -> JobPage:
        return self._run(self._client.list_jobs(**filters))

    def update_job(self, job_id: UUID | str, **changes: Any) -> JobOut:
        return self._run(self._client.update_job(job_id, **changes))

    def delete_job(self, job_id: UUID | str) -> None:
        self._run(self._client.delete_job(job_id))

    def dependencies(self, job_id: UUID | str) -> JobDependenciesOut:
        return self._run(self._client.dependencies(job_id))

    def set_dependencies(self, job_id: UUID | str, depends_on: Sequence[Any]) -> JobDependenciesOut:
        return self._run(self._client.set_dependencies(job_id, depends_on))

    def list_graph_runs(self, **filters: Any) -> GraphRunPage:
        return self._run(self._client.list_graph_runs(**filters))

    def get_graph_run(self, run_id: UUID | str) -> GraphRunDetail:
        return self._run(self._client.get_graph_run(run_id))

    def trigger(self, job_id: UUID | str, **options: Any) -> OccurrenceDetail:
        return self._run(self._client.trigger(job_id, **options))

    def backfill(
        self, job_id: UUID | str, start: datetime | str, end: datetime | str, **options: Any
    ) -> BackfillOut:
        return self._run(self._client.backfill(job_id, start, end, **options))

    def pause(self, job_id: UUID | str, **options: Any) -> JobOut:
        return self._run(self._client.pause(job_id, **options))

    def resume(self, job_id: UUID | str) -> JobOut:
        return self._run(self._client.resume(job_id))

    def skip(self, job_id: UUID | str, count: int, **options: Any) -> JobOut:
        return self._run(self._client.skip(job_id, count, **options))

    def tags(self) -> dict[str, int]:
        return self._run(self._client.tags())

    def list_occurrences(self, **filters: Any) -> OccurrencePage:
        return self._run(self._client.list_occurrences(**filters))

    def get_occurrence(self, occurrence_id: UUID | str) -> OccurrenceDetail:
        return self._run(self._client.get_occurrence(occurrence_id))

    def logs(self, occurrence_id: UUID | str, **options: Any) -> LogPage:
        return self._run(self._client.logs(occurrence_id, **options))

    def cancel(self, occurrence_id: UUID | str, reason: str | None = None) -> OccurrenceDetail:
        return self._run(self._client.cancel(occurrence_id, reason=reason))

    def list_failed(self, **filters: Any) -> FailedOccurrencePage:
        return self._run(self._client.list_failed(**filters))

    def get_failed(self, failed_id: UUID | str) -> FailedOccurrenceOut:
        return self._run(self._client.get_failed(failed_id))

    def resolve_failed(self, failed_id: UUID | str, **options: Any) -> FailedOccurrenceOut:
        return self._run(self._client.resolve_failed(failed_id, **options))

    def retry_failed(self, failed_id: UUID | str) -> OccurrenceDetail:
        return self._run(self._client.retry_failed(failed_id))

    def delete_failed(self, failed_id: UUID | str) -> None:
        self._run(self._client.delete_failed(failed_id))

    def limits(self) -> LimitsOut:
        return self._run(self._client.limits())

    def set_limits(self, limits: Sequence[Mapping[str, Any]]) -> LimitsOut:
        return self._run(self._client.set_limits(limits))

    def set_limit(self, job_type: str, **options: Any) -> LimitsOut:
        return self._run(self._client.set_limit(job_type, **options))

    def delete_limit(self, job_type: str) -> None:
        self._run(self._client.delete_limit(job_type))

    def workers(self) -> WorkerList:
        return self._run(self._client.workers())

    def overview(self) -> Overview:
        return self._run(self._client.overview())

    def throughput(self, window: str = "24h", bucket: str | None = None) -> Throughput:
        return self._run(self._client.throughput(window, bucket))

    def events(self, **options: Any) -> Iterator[StreamEvent]:
        """Change events as they happen (see :meth:`Client.events`); blocks between them.
        Closing the generator ends the stream."""
        stream = self._client.events(**options)
        try:
            while True:
                try:
                    yield self._run(_next(stream))
                except StopAsyncIteration:
                    return
        finally:
            with contextlib.suppress(RuntimeError):
                self._run(_close(stream))


async def _next(stream: AsyncIterator[StreamEvent]) -> StreamEvent:
    return await anext(stream)


async def _close(stream: AsyncIterator[StreamEvent]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
