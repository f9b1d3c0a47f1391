"""The Python client of Rota's REST API: :class:`Client` (async, on httpx) and a thin
:class:`SyncClient` facade.

::

    async with rota.Client("http://localhost:8000", username="admin", password="…") as client:
        job = await client.create_job(job_type="GenerateReportJob", cron_expression="0 6 * * *")
        async for event in client.events(types=["occurrence.updated"], job_id=job.id):
            print(event.type, event.data["statusName"])

Responses are the API's own models (camelCase on the wire, snake_case attributes). Every error
the API answers is raised as an :class:`ApiError` subclass carrying the problem details.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TypeVar
from uuid import UUID

import httpx
import orjson
from pydantic import BaseModel

from rota.api.schemas.failed import FailedOccurrenceOut, FailedOccurrencePage
from rota.api.schemas.jobs import JobOut, JobPage
from rota.api.schemas.occurrences import LogPage, OccurrenceDetail, OccurrencePage
from rota.api.schemas.stats import Overview, Throughput
from rota.api.schemas.workers import WorkerList
from rota.core.errors import RotaError

API: Final = "/api/v1"
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# --- errors ------------------------------------------------------------------------------------


class ApiError(RotaError):
    """The API answered with an error. ``problem`` is its RFC 9457 body (``type``, ``title``,
    ``status``, ``detail``, ``errors`` with the fields at fault)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = dict(problem)

    @property
    def type(self) -> str:
        return str(self.problem.get("type", "about:blank"))

    @property
    def detail(self) -> str | None:
        detail = self.problem.get("detail")
        return None if detail is None else str(detail)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The fields at fault: ``[{"field": "jobs[17].cronExpression", "message": …}]``."""
        errors = self.problem.get("errors")
        return list(errors) if isinstance(errors, list) else []

    @property
    def fields(self) -> list[str | None]:
        return [error.get("field") for error in self.errors]


class ApiAuthError(ApiError):
    """401 or 403: not signed in (or the session could not be renewed), or not allowed."""


class ApiNotFoundError(ApiError):
    """404."""


class ApiConflictError(ApiError):
    """409 (or 412: the job changed since the ETag sent): a stale change, a trigger refused by
    the Skip policy, an ended occurrence."""


class ApiValidationError(ApiError):
    """422 (or 400): the input was refused; :attr:`fields` names where."""


class ApiPayloadTooLargeError(ApiError):
    """413: the request body is over the server's limit."""


class ApiUnavailableError(ApiError):
    """503: a backend of the server is unreachable; try again later."""


_ERRORS: Final[dict[int, type[ApiError]]] = {
    400: ApiValidationError,
    401: ApiAuthError,
    403: ApiAuthError,
    404: ApiNotFoundError,
    409: ApiConflictError,
    412: ApiConflictError,
    413: ApiPayloadTooLargeError,
    422: ApiValidationError,
    503: ApiUnavailableError,
}


def _error(response: httpx.Response, body: bytes) -> ApiError:
    try:
        problem = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    problem.setdefault("status", response.status_code)
    problem.setdefault("title", response.reason_phrase)
    if "detail" not in problem and body and not problem.get("type"):
        problem["detail"] = body[:500].decode(errors="replace")
    return _ERRORS.get(response.status_code, ApiError)(response.status_code, problem)


# --- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent change event (see docs/api.md for the types and payloads), or a
    ``gap`` message (``id`` empty): events between the last one seen and the oldest the
    server keeps may be lost, reload what you show."""

    id: str
    type: str
    data: dict[str, Any] = field(default_factory=dict)


class _SseParser:
    def __init__(self) -> None:
        self._id: str | None = None
        self._type: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> StreamEvent | None:
        if line == "":
            event = None
            if self._type is not None:
                raw = "\n".join(self._data)
                data = orjson.loads(raw) if raw else {}
                event = StreamEvent(self._id or "", self._type, data)
            self._id, self._type, self._data = None, None, []
            return event
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = value
        elif name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        return None


# --- the async client ------------------------------------------------------------------------


def _params(**values: Any) -> dict[str, Any]:
    """Query parameters, leaving out the ones not given; lists joined by commas."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, list | tuple):
            out[key] = ",".join(str(v) for v in value)
        else:
            out[key] = str(value)
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _body(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments (snake_case) as a JSON body (camelCase); UUIDs as text."""
    return {_camel(k): (str(v) if isinstance(v, UUID) else v) for k, v in fields.items()}


class Client:
    """An async client of one Rota server.

    Give either ``token`` (an access token) or ``username`` and ``password``: the client then
    signs in (``POST /auth/login``) on its first request and, when the server answers 401 to
    an expired token, renews it once with the refresh token (``POST /auth/refresh``), signing
    in again if that fails. ``transport`` replaces the network (tests pass an ASGI transport);
    ``timeout`` is per request, in seconds (event streams have no read timeout).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if token is not None and (username is not None or password is not None):
            raise ValueError("give a token, or a username and password, not both")
        if (username is None) != (password is None):
            raise ValueError("give both username and password")
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            transport=transport,
            timeout=timeout,
            headers=dict(headers or {}),
        )
        self._token = token
        self._refresh_token: str | None = None
        self._username = username
        self._password = password
        self._auth_lock = asyncio.Lock()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- authentication ----------------------------------------------------------------------

    @property
    def token(self) -> str | None:
        """The access token in use (``None`` before signing in)."""
        return self._token

    async def login(self) -> None:
        """Sign in with the username and password given (done by itself when needed)."""
        if self._username is None or self._password is None:
            raise ApiAuthError(401, {"title": "Unauthorized", "detail": "no credentials given"})
        credentials = {"username": self._username, "password": self._password}
        response = await self._http.post(f"{API}/auth/login", json=credentials)
        self._take_tokens(response, await response.aread())

    async def _refresh(self) -> bool:
        """Renew the access token; ``False`` if that was not possible."""
        if self._refresh_token is None:
            return False
        body = {"refreshToken": self._refresh_token}
        response = await self._http.post(f"{API}/auth/refresh", json=body)
        if response.status_code != 200:
            self._refresh_token = None
            return False
        self._take_tokens(response, await response.aread())
        return True

    def _take_tokens(self, response: httpx.Response, body: bytes) -> None:
        if response.status_code != 200:
            raise _error(response, body)
        tokens = orjson.loads(body)
        self._token = str(tokens["accessToken"])
        refresh = tokens.get("refreshToken")
        self._refresh_token = None if refresh is None else str(refresh)

    async def _renew(self, stale: str | None) -> bool:
        """After a 401 with token ``stale``: renew (refresh, else sign in again) unless another
        request did already. ``False`` when no renewal is possible."""
        async with self._auth_lock:
            if self._token != stale:
                return True
            if await self._refresh():
                return True
            if self._username is None:
                return False
            await self.login()
            return True

    def _auth_headers(self) -> dict[str, str]:
        return {} if self._token is None else {"Authorization": f"Bearer {self._token}"}

    async def _ensure_signed_in(self) -> None:
        if self._token is None and self._username is not None:
            async with self._auth_lock:
                if self._token is None:
                    await self.login()

    # --- plumbing ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call ``/api/v1{path}``; the decoded JSON body (``None`` for 204), or an
        :class:`ApiError`."""
        await self._ensure_signed_in()
        for attempt in range(2):
            token = self._token
            response = await self._http.request(
                method,
                f"{API}{path}",
                json=json,
                params=params,
                headers=self._auth_headers(),
            )
            body = await response.aread()
            if response.status_code == 401 and attempt == 0 and await self._renew(token):
                continue
            if response.status_code >= 400:
                raise _error(response, body)
            if response.status_code == 204 or not body:
                return None
            return orjson.loads(body)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get(self, model: type[M], path: str, **params: Any) -> M:
        return model.model_validate(await self.request("GET", path, params=_params(**params)))

    # --- jobs --------------------------------------------------------------------------------

    async def create_job(self, **fields: Any) -> JobOut:
        """Create a job: ``job_type`` and one of ``cron_expression`` / ``execute_at``, and any
        other job field (``job_data``, ``tags``, ``priority``, …) in snake_case."""
        return JobOut.model_validate(await self.request("POST", "/jobs", json=_body(fields)))

    async def create_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> list[JobOut]:
        """Create up to 10,000 jobs in one transaction (all or none); a refused batch raises
        :class:`ApiValidationError` naming every bad job (``jobs[17].cronExpression``)."""
        body = {"jobs": [_body(job) for job in jobs]}
        created = await self.request("POST", "/jobs/bulk", json=body)
        return [JobOut.model_validate(job) for job in created["items"]]

    async def get_job(self, job_id: UUID | str) -> JobOut:
        return await self._get(JobOut, f"/jobs/{job_id}")

    async def list_jobs(
        self,
        *,
        search: str | None = None,
        tag: str | None = None,
        job_type: str | None = None,
        is_active: bool | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first (``next_cursor`` gets the next)."""
        return await self._get(
            JobPage,
            "/jobs",
            search=search,
            tag=tag,
            jobType=job_type,
            isActive=is_active,
            limit=limit,
            cursor=cursor,
        )

    async def iter_jobs(self, **filters: Any) -> AsyncIterator[JobOut]:
        """Every job matching the filters of :meth:`list_jobs`, page after page."""
        cursor: str | None = None
        while True:
            page = await self.list_jobs(cursor=cursor, **filters)
            for job in page.items:
                yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def update_job(self, job_id: UUID | str, **changes: Any) -> JobOut:
        """Change some fields (snake_case names; ``None`` clears a nullable one)."""
        body = _body(changes)
        if "concurrencyPolicy" in body:
            body["concurrentExecutionPolicy"] = body.pop("concurrencyPolicy")
        return JobOut.model_validate(await self.request("PATCH", f"/jobs/{job_id}", json=body))

    async def delete_job(self, job_id: UUID | str) -> None:
        await self.request("DELETE", f"/jobs/{job_id}")

    async def trigger(
        self,
        job_id: UUID | str,
        *,
        reason: str | None = None,
        job_data: Any = None,
        force: bool = False,
    ) -> OccurrenceDetail:
        """Run a job now; returns its new (Queued) occurrence."""
        body: dict[str, Any] = {"force": force}
        if reason is not None:
            body["reason"] = reason
        if job_data is not None:
            body["jobData"] = job_data
        answer = await self.request("POST", f"/jobs/{job_id}/trigger", json=body)
        return OccurrenceDetail.model_validate(answer)

    async def tags(self) -> dict[str, int]:
        """Every tag in use -> how many jobs carry it."""
        answer = await self.request("GET", "/tags")
        return {item["tag"]: int(item["jobs"]) for item in answer["items"]}

    # --- occurrences -------------------------------------------------------------------------

    async def list_occurrences(
        self,
        *,
        job_id: UUID | str | None = None,
        status: Sequence[str | int] | str | int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> OccurrencePage:
        """One page of occurrences, newest first; ``status`` by name or code, one or many."""
        statuses = [status] if isinstance(status, str | int) else status
        return await self._get(
            OccurrencePage,
            "/occurrences",
            jobId=job_id,
            status=statuses,
            limit=limit,
            cursor=cursor,
        )

    async def get_occurrence(self, occurrence_id: UUID | str) -> OccurrenceDetail:
        """The occurrence with its status history."""
        return await self._get(OccurrenceDetail, f"/occurrences/{occurrence_id}")

    async def logs(
        self, occurrence_id: UUID | str, *, after: int = 0, limit: int = 1000
    ) -> LogPage:
        """Log lines after sequence ``after`` (pass the page's ``next_after`` to follow)."""
        return await self._get(
            LogPage, f"/occurrences/{occurrence_id}/logs", after=after, limit=limit
        )

    async def cancel(
        self, occurrence_id: UUID | str, *, reason: str | None = None
    ) -> OccurrenceDetail:
        """Cancel a Queued occurrence (at once) or a Running one (through its worker)."""
        body = {} if reason is None else {"reason": reason}
        answer = await self.request("POST", f"/occurrences/{occurrence_id}/cancel", json=body)
        return OccurrenceDetail.model_validate(answer)

    # --- failed occurrences ------------------------------------------------------------------

    async def list_failed(
        self,
        *,
        job_id: UUID | str | None = None,
        failure_type: Sequence[str] | str | None = None,
        resolved: bool | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> FailedOccurrencePage:
        return await self._get(
            FailedOccurrencePage,
            "/failed-occurrences",
            jobId=job_id,
            failureType=failure_type,
            resolved=resolved,
            limit=limit,
            cursor=cursor,
        )

    async def get_failed(self, failed_id: UUID | str) -> FailedOccurrenceOut:
        return await self._get(FailedOccurrenceOut, f"/failed-occurrences/{failed_id}")

    async def resolve_failed(
        self,
        failed_id: UUID | str,
        *,
        note: str | None = None,
        action: str | None = None,
        resolved: bool | None = None,
    ) -> FailedOccurrenceOut:
        """Record a resolution (a note or an action resolves the record unless
        ``resolved=False``)."""
        body = _params(resolutionNote=note, resolutionAction=action)
        if resolved is not None:
            body["resolved"] = resolved
        answer = await self.request("PUT", f"/failed-occurrences/{failed_id}", json=body)
        return FailedOccurrenceOut.model_validate(answer)

    async def retry_failed(self, failed_id: UUID | str) -> OccurrenceDetail:
        """Run the failed occurrence again as a new attempt (resolves the record)."""
        answer = await self.request("POST", f"/failed-occurrences/{failed_id}/retry")
        return OccurrenceDetail.model_validate(answer)

    async def delete_failed(self, failed_id: UUID | str) -> None:
        await self.request("DELETE", f"/failed-occurrences/{failed_id}")

    # --- workers and statistics ------------------------------------------------------------

    async def workers(self) -> WorkerList:
        """Live worker groups with their instances, job types (data schemas), load."""
        return await self._get(WorkerList, "/workers")

    async def overview(self) -> Overview:
        return await self._get(Overview, "/stats/overview")

    async def throughput(self, window: str = "24h", bucket: str | None = None) -> Throughput:
        return await self._get(Throughput, "/stats/throughput", window=window, bucket=bucket)

    # --- events ------------------------------------------------------------------------------

    async def events(
        self,
        *,
        types: Sequence[str] | None = None,
        job_id: UUID | str | None = None,
        occurrence_id: UUID | str | None = None,
        last_event_id: str | None = None,
        reconnect: bool = True,
    ) -> AsyncIterator[StreamEvent]:
        """Change events as they happen (server-sent events), forever. When the connection
        drops it reconnects (after a second) and resumes after the last event it yielded, so
        nothing kept by the server is missed; with ``reconnect=False`` it ends instead."""
        params = _params(types=types, jobId=job_id, occurrenceId=occurrence_id)
        last = last_event_id
        while True:
            try:
                async for event in self._stream(params, last):
                    if event.id:  # a gap message has none: the position stays
                        last = event.id
                    yield event
            except httpx.TransportError:
                if not reconnect:
                    raise
            if not reconnect:
                return
            await asyncio.sleep(1.0)

    async def _stream(
        self, params: Mapping[str, Any], last_event_id: str | None
    ) -> AsyncIterator[StreamEvent]:
        await self._ensure_signed_in()
        for attempt in range(2):
            token = self._token
            headers = self._auth_headers()
            if last_event_id is not None:
                headers["Last-Event-ID"] = last_event_id
            timeout = httpx.Timeout(self._http.timeout.connect, read=None)
            async with self._http.stream(
                "GET", f"{API}/events", params=params, headers=headers, timeout=timeout
            ) as response:
                if response.status_code == 401 and attempt == 0:
                    await response.aread()
                    if await self._renew(token):
                        continue
                if response.status_code >= 400:
                    raise _error(response, await response.aread())
                parser = _SseParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
                return


# --- the sync facade ---------------------------------------------------------------------------


class SyncClient:
    """:class:`Client` for code without an event loop: the same methods, blocking. It runs
    its own event loop in a background thread; use it from one thread at a time."""

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
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

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

    def create_job(self, **fields: Any) -> JobOut:
        return self._run(self._client.create_job(**fields))

    def create_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> list[JobOut]:
        return self._run(self._client.create_jobs(jobs))

    def get_job(self, job_id: UUID | str) -> JobOut:
        return self._run(self._client.get_job(job_id))

    def list_jobs(self, **filters: Any) -> JobPage:
        return self._run(self._client.list_jobs(**filters))

    def update_job(self, job_id: UUID | str, **changes: Any) -> JobOut:
        return self._run(self._client.update_job(job_id, **changes))

    def delete_job(self, job_id: UUID | str) -> None:
        self._run(self._client.delete_job(job_id))

    def trigger(self, job_id: UUID | str, **options: Any) -> OccurrenceDetail:
        return self._run(self._client.trigger(job_id, **options))

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


__all__ = [
    "ApiAuthError",
    "ApiConflictError",
    "ApiError",
    "ApiNotFoundError",
    "ApiPayloadTooLargeError",
    "ApiUnavailableError",
    "ApiValidationError",
    "Client",
    "StreamEvent",
    "SyncClient",
]
