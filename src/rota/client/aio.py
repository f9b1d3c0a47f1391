"""The async client of Rota's REST API, on httpx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Final, TypeVar
from urllib.parse import quote
from uuid import UUID

import httpx
import orjson
from pydantic import BaseModel

from rota.api.schemas.apikeys import ApiKeyCreated, ApiKeyList, ApiKeyOut
from rota.api.schemas.dependencies import GraphRunDetail, GraphRunPage, JobDependenciesOut
from rota.api.schemas.failed import FailedOccurrenceOut, FailedOccurrencePage
from rota.api.schemas.jobs import BackfillOut, JobOut, JobPage
from rota.api.schemas.limits import LimitsOut
from rota.api.schemas.occurrences import LogPage, OccurrenceDetail, OccurrencePage
from rota.api.schemas.stats import Overview, Throughput
from rota.api.schemas.workers import WorkerList
from rota.client.encoding import aware, encode_json
from rota.client.errors import ApiAuthError, error_from_response
from rota.client.events import SseParser, StreamEvent
from rota.client.handles import JobHandle

API: Final = "/api/v1"
CONNECTED: Final = "connected"
"""The server's first comment on an event stream: the subscription is in place."""
M = TypeVar("M", bound=BaseModel)


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
    """Keyword arguments (snake_case) as a JSON body (camelCase); the values as given (the
    encoding step writes Python's types)."""
    body = {_camel(k): v for k, v in fields.items()}
    if body.get("dependsOn") is not None:
        body["dependsOn"] = upstreams(body["dependsOn"])
    return body


def upstreams(depends_on: Sequence[Any]) -> list[dict[str, str]]:
    """``depends_on`` as the API takes it: each item a job id (runs after its success), a
    ``(job id, rule)`` pair, or a mapping with ``job_id``/``jobId`` and ``on``; the rules are
    ``success``, ``completion`` and ``failure``."""
    out: list[dict[str, str]] = []
    for item in depends_on:
        if isinstance(item, Mapping):
            job_id, rule = item.get("job_id", item.get("jobId")), item.get("on", "success")
        elif isinstance(item, (tuple, list)):
            job_id, rule = item
        else:
            job_id, rule = item, "success"
        out.append({"jobId": str(job_id), "on": str(rule)})
    return out


class Client:
    """An async client of one Rota server.

    Give ``api_key`` (an API key, ``rota_…``: sent as a bearer token on every request, nothing
    to renew), ``token`` (an access token) or ``username`` and ``password``: the client then
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
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if api_key is not None and (token is not None or username is not None):
            raise ValueError("give an API key, a token, or a username and password: one")
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
        self._token = token if api_key is None else api_key
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
            raise error_from_response(response, body)
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
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Call ``/api/v1{path}`` (with ``headers`` besides the sign-in's); the decoded JSON
        body (``None`` for 204), or an :class:`~rota.client.errors.ApiError`. ``json`` may hold
        Python's types (:func:`~rota.client.encoding.encode_json`): aware datetimes, UUIDs,
        timedeltas, enums, pydantic models, at any depth."""
        content = None if json is None else encode_json(json)
        sent = {} if content is None else {"Content-Type": "application/json"}
        await self._ensure_signed_in()
        for attempt in range(2):
            token = self._token
            response = await self._http.request(
                method,
                f"{API}{path}",
                content=content,
                params=params,
                headers={**self._auth_headers(), **sent, **(headers or {})},
            )
            body = await response.aread()
            if response.status_code == 401 and attempt == 0 and await self._renew(token):
                continue
            if response.status_code >= 400:
                raise error_from_response(response, body)
            if response.status_code == 204 or not body:
                return None
            return orjson.loads(body)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get(self, model: type[M], path: str, **params: Any) -> M:
        return model.model_validate(await self.request("GET", path, params=_params(**params)))

    # --- jobs --------------------------------------------------------------------------------

    async def create_job(self, *, idempotency_key: str | None = None, **fields: Any) -> JobOut:
        """Create a job: ``job_type`` and one of ``cron_expression``, ``every`` (an interval:
        ``"90m"``, ``"1h30m"``) or ``execute_at`` (once), and any other job field
        (``job_data``, ``tags``, ``priority``, ``start_at``, ``end_at``, ``max_runs``,
        ``jitter_seconds``, ``misfire_window_seconds``, …) in snake_case. With
        ``idempotency_key`` (e.g. a UUID kept with the request), a repeat within 24 h
        returns the job the first call created."""
        answer = await self.request(
            "POST", "/jobs", json=_body(fields), headers=_idempotency(idempotency_key)
        )
        return JobOut.model_validate(answer)

    async def create_jobs(
        self, jobs: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[JobOut]:
        """Create up to 10,000 jobs in one transaction (all or none); a refused batch raises
        :class:`~rota.client.errors.ApiValidationError` naming every bad job
        (``jobs[17].cronExpression``). ``idempotency_key``: as for :meth:`create_job`."""
        body = {"jobs": [_body(job) for job in jobs]}
        created = await self.request(
            "POST", "/jobs/bulk", json=body, headers=_idempotency(idempotency_key)
        )
        return [JobOut.model_validate(job) for job in created["items"]]

    async def create_jobs_minimal(
        self, jobs: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[UUID]:
        """As :meth:`create_jobs`, answered with the new jobs' ids only, in order
        (``Prefer: return=minimal``): for large loads, the server does a fifth less per job
        and the answer is a fraction of the size."""
        body = {"jobs": [_body(job) for job in jobs]}
        headers = {"Prefer": "return=minimal", **_idempotency(idempotency_key)}
        created = await self.request("POST", "/jobs/bulk", json=body, headers=headers)
        return [UUID(job_id) for job_id in created["ids"]]

    async def enqueue(
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
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (the job's, not this call's)
        tags: Sequence[str] | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[Any] | None = None,
        worker_id: str | None = None,
        result_type: Any = None,
    ) -> JobHandle[Any]:
        """Create a job of ``job_type`` with ``data`` (any JSON-able value or pydantic model)
        and return a handle on its run (``await handle.result(timeout=…)``).

        When: ``at`` (an aware datetime), ``delay`` (a timedelta or seconds from now), or
        neither (now); ``cron`` (with ``time_zone``, default UTC) makes a recurring job whose
        handle waits for its first run. The options are the job's: ``display_name``,
        ``description``, ``priority`` (0-4), ``max_retries``, ``retry_delay`` and ``timeout``
        (timedeltas or seconds), ``tags``, ``depends_on``, ``worker_id``; the job type's own
        defaults (``@rota.job(…)``) apply to what is not given. ``idempotency_key``: a repeat
        within 24 h returns the first call's job. ``result_type``: what the handle's
        ``result()`` validates the run's result into (a job definition passes its handler's
        return type). A job definition does the same typed: ``await my_job.now(client, …)``.
        """
        if at is not None and delay is not None:
            raise ValueError("give at= or delay=, not both")
        fields: dict[str, Any] = {"job_type": job_type}
        if data is not None:
            fields["job_data"] = data
        if cron is not None:
            fields["cron_expression"] = cron
            fields["time_zone"] = time_zone or "UTC"
        elif time_zone is not None:
            raise ValueError("time_zone= goes with cron=")
        if delay is not None:
            step = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
            at = datetime.now(UTC) + step
        if at is not None:
            fields["execute_at"] = aware(at, "at")
        elif cron is None:
            fields["execute_at"] = datetime.now(UTC)
        options = {
            "display_name": display_name,
            "description": description,
            "priority": priority,
            "max_retries": max_retries,
            "retry_delay_seconds": retry_delay,
            "timeout_seconds": timeout,
            "tags": None if tags is None else list(tags),
            "depends_on": depends_on,
            "worker_id": worker_id,
        }
        fields.update((k, v) for k, v in options.items() if v is not None)
        job = await self.create_job(idempotency_key=idempotency_key, **fields)
        return JobHandle(self, job.id, job=job, result_type=result_type)

    def handle(
        self,
        job_id: UUID | str,
        occurrence_id: UUID | str | None = None,
        *,
        result_type: Any = None,
    ) -> JobHandle[Any]:
        """A handle on a job's run: ``occurrence_id`` (e.g. what :meth:`trigger` returned),
        or the job's first run to end. ``await handle.result(timeout=…)``."""
        run = None if occurrence_id is None else UUID(str(occurrence_id))
        return JobHandle(self, UUID(str(job_id)), occurrence_id=run, result_type=result_type)

    async def get_job(self, job_id: UUID | str) -> JobOut:
        return await self._get(JobOut, f"/jobs/{job_id}")

    async def list_jobs(
        self,
        *,
        search: str | None = None,
        tag: str | None = None,
        job_type: str | None = None,
        is_active: bool | None = None,
        query: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first (``next_cursor`` gets the next); ``query`` is the
        query filter (``type:report worker:reports``, docs/api.md)."""
        return await self._get(
            JobPage,
            "/jobs",
            search=search,
            tag=tag,
            jobType=job_type,
            isActive=is_active,
            q=query,
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

    async def dependencies(self, job_id: UUID | str) -> JobDependenciesOut:
        """The jobs ``job_id`` runs after (``depends_on``) and the jobs that run after it."""
        return await self._get(JobDependenciesOut, f"/jobs/{job_id}/dependencies")

    async def set_dependencies(
        self, job_id: UUID | str, depends_on: Sequence[Any]
    ) -> JobDependenciesOut:
        """Replace the jobs ``job_id`` runs after (see :func:`upstreams` for the items; ``[]``:
        none). A cycle or an unknown job raises ``ApiValidationError`` on ``dependsOn``."""
        body = {"dependsOn": upstreams(depends_on)}
        answer = await self.request("PUT", f"/jobs/{job_id}/dependencies", json=body)
        return JobDependenciesOut.model_validate(answer)

    async def list_graph_runs(
        self, *, job_id: UUID | str | None = None, status: str | None = None, limit: int = 50
    ) -> GraphRunPage:
        """Graph runs newest first: rooted at ``job_id``, ``running`` or ``finished``."""
        return await self._get(
            GraphRunPage,
            "/graph-runs",
            jobId=None if job_id is None else str(job_id),
            status=status,
            limit=limit,
        )

    async def get_graph_run(self, run_id: UUID | str) -> GraphRunDetail:
        """A graph run: its jobs (level, occurrence, status, reason) and the edges."""
        return await self._get(GraphRunDetail, f"/graph-runs/{run_id}")

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

    async def backfill(
        self,
        job_id: UUID | str,
        start: datetime | str,
        end: datetime | str,
        *,
        reason: str | None = None,
    ) -> BackfillOut:
        """Run a recurring job for the fires of the past window ``[start, end]`` that have no
        run yet (at most 1,000; one after another, oldest first)."""
        body: dict[str, Any] = {"from": _iso(start, "start"), "to": _iso(end, "end")}
        if reason is not None:
            body["reason"] = reason
        answer = await self.request("POST", f"/jobs/{job_id}/backfill", json=body)
        return BackfillOut.model_validate(answer)

    async def pause(
        self,
        job_id: UUID | str,
        *,
        note: str | None = None,
        until: datetime | str | None = None,
    ) -> JobOut:
        """Pause a job: its fires are recorded Skipped (``paused``, with the note) instead of
        running, until :meth:`resume` or ``until`` (then it resumes by itself). Apart from
        ``is_active`` and auto-disable."""
        body: dict[str, Any] = {}
        if note is not None:
            body["note"] = note
        if until is not None:
            body["until"] = _iso(until, "until")
        return JobOut.model_validate(await self.request("POST", f"/jobs/{job_id}/pause", json=body))

    async def resume(self, job_id: UUID | str) -> JobOut:
        """End a job's pause (a job not paused: :class:`ApiError` 409)."""
        return JobOut.model_validate(await self.request("POST", f"/jobs/{job_id}/resume"))

    async def skip(self, job_id: UUID | str, count: int, *, note: str | None = None) -> JobOut:
        """Record the job's next ``count`` fires (1..1000) Skipped (``skip_next``, with the
        note) instead of running them; 0 clears the count (``skip_next`` on the job)."""
        body: dict[str, Any] = {"count": count}
        if note is not None:
            body["note"] = note
        return JobOut.model_validate(await self.request("POST", f"/jobs/{job_id}/skip", json=body))

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
        query: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> OccurrencePage:
        """One page of occurrences, newest first; ``status`` by name or code, one or many;
        ``query`` is the query filter (``type:report attempt:>1``, docs/api.md)."""
        statuses = [status] if isinstance(status, str | int) else status
        return await self._get(
            OccurrencePage,
            "/occurrences",
            jobId=job_id,
            status=statuses,
            q=query,
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
        query: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> FailedOccurrencePage:
        """One page of failed occurrences, newest first; ``query`` is the query filter
        (``type:report failure:timed_out``, docs/api.md)."""
        return await self._get(
            FailedOccurrencePage,
            "/failed-occurrences",
            jobId=job_id,
            failureType=failure_type,
            resolved=resolved,
            q=query,
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

    # --- limits -------------------------------------------------------------------------------

    async def limits(self) -> LimitsOut:
        """The cluster-wide limits of job types, the slots held and the occurrences waiting."""
        return await self._get(LimitsOut, "/limits")

    async def set_limits(self, limits: Sequence[Mapping[str, Any]]) -> LimitsOut:
        """Replace every limit (Admin): items like ``{"type": "sync", "max": 2, "key":
        "customerId"}`` or ``{"type": "mail", "ratePerSecond": 5}``."""
        answer = await self.request("PUT", "/limits", json={"limits": list(limits)})
        return LimitsOut.model_validate(answer)

    async def set_limit(
        self,
        job_type: str,
        *,
        max: int | None = None,
        key: str | None = None,
        rate_per_second: float | None = None,
    ) -> LimitsOut:
        """Set the limits of one job type (Admin); the others are kept."""
        body = {"max": max, "key": key, "ratePerSecond": rate_per_second}
        answer = await self.request("PUT", f"/limits/{_segment(job_type)}", json=body)
        return LimitsOut.model_validate(answer)

    async def delete_limit(self, job_type: str) -> None:
        """Lift the limits of one job type (Admin)."""
        await self.request("DELETE", f"/limits/{_segment(job_type)}")

    # --- workers and statistics ------------------------------------------------------------

    async def workers(self) -> WorkerList:
        """Live worker groups with their instances, job types (data schemas), load."""
        return await self._get(WorkerList, "/workers")

    async def overview(self) -> Overview:
        return await self._get(Overview, "/stats/overview")

    async def throughput(self, window: str = "24h", bucket: str | None = None) -> Throughput:
        return await self._get(Throughput, "/stats/throughput", window=window, bucket=bucket)

    # --- API keys (Admin) --------------------------------------------------------------------

    async def create_api_key(
        self,
        name: str,
        role: str,
        *,
        job_types: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        expires_at: datetime | str | None = None,
    ) -> ApiKeyCreated:
        """A new API key; its ``key`` is shown this once."""
        body: dict[str, Any] = {"name": name, "role": role}
        if job_types:
            body["jobTypes"] = list(job_types)
        if tags:
            body["tags"] = list(tags)
        if expires_at is not None:
            body["expiresAt"] = _iso(expires_at, "expires_at")
        return ApiKeyCreated.model_validate(await self.request("POST", "/api-keys", json=body))

    async def list_api_keys(self) -> list[ApiKeyOut]:
        return ApiKeyList.model_validate(await self.request("GET", "/api-keys")).items

    async def revoke_api_key(self, key_id: UUID | str) -> ApiKeyOut:
        answer = await self.request("DELETE", f"/api-keys/{_segment(str(key_id))}")
        return ApiKeyOut.model_validate(answer)

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
        self, params: Mapping[str, Any], last_event_id: str | None, *, announce: bool = False
    ) -> AsyncGenerator[StreamEvent, None]:
        """The events of one connection; with ``announce``, first a ``connected`` event (no
        id) once the server says the subscription is in place (its ``: connected`` comment):
        what happens from then on is in the stream."""
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
                    raise error_from_response(response, await response.aread())
                parser = SseParser()
                async for line in response.aiter_lines():
                    if announce and line.startswith(":") and line[1:].strip() == CONNECTED:
                        yield StreamEvent("", CONNECTED)
                        continue
                    event = parser.feed(line)
                    if event is not None:
                        yield event
                return


def _segment(value: str) -> str:
    return quote(value, safe="")


def _idempotency(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Idempotency-Key": key}


def _iso(moment: datetime | str, name: str) -> str:
    """A date-time parameter as ISO text; a naive datetime is refused, naming ``name``."""
    return moment if isinstance(moment, str) else aware(moment, name).isoformat()
