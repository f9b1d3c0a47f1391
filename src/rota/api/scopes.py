"""What a scoped API key may call (docs/security.md#scopes).

A key with a scope (job types and/or tags, :class:`~rota.core.apikeys.KeyScope`) may call only
the routes of the jobs and occurrences in its scope; every other route is 403 for it:

- ``GET /jobs`` lists only the jobs in the scope (a page may hold fewer than ``limit`` jobs:
  follow ``nextCursor``); a ``jobType`` filter outside the scope is 403 naming it;
- ``POST /jobs`` and ``POST /jobs/bulk`` create only jobs in the scope (else 403 naming
  ``jobType`` or ``tags``; ``dependsOn`` is refused);
- ``/jobs/{job_id}…`` (read, change, delete, trigger, pause, resume, skip, backfill,
  versions) and ``/occurrences/{occurrence_id}…`` (read, logs, cancel) answer 404 for a job
  outside the scope, as if it did not exist; a change may not move a job out of it;
- ``GET /schedules/preview`` (no data).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from uuid import UUID

from fastapi import Request

from rota.api.deps import get_runtime
from rota.core.apikeys import KeyScope, ScopeDeniedError
from rota.core.errors import NotFoundError, PermissionDeniedError
from rota.core.security import Principal

_P: Final = "/api/v1"
SCOPED_ROUTES: Final = frozenset(
    {
        ("GET", f"{_P}/jobs"),
        ("POST", f"{_P}/jobs"),
        ("POST", f"{_P}/jobs/bulk"),
        ("GET", f"{_P}/jobs/{{job_id}}"),
        ("PATCH", f"{_P}/jobs/{{job_id}}"),
        ("DELETE", f"{_P}/jobs/{{job_id}}"),
        ("POST", f"{_P}/jobs/{{job_id}}/backfill"),
        ("POST", f"{_P}/jobs/{{job_id}}/pause"),
        ("POST", f"{_P}/jobs/{{job_id}}/resume"),
        ("POST", f"{_P}/jobs/{{job_id}}/skip"),
        ("POST", f"{_P}/jobs/{{job_id}}/trigger"),
        ("GET", f"{_P}/jobs/{{job_id}}/versions"),
        ("GET", f"{_P}/occurrences/{{occurrence_id}}"),
        ("GET", f"{_P}/occurrences/{{occurrence_id}}/logs"),
        ("POST", f"{_P}/occurrences/{{occurrence_id}}/cancel"),
        ("GET", f"{_P}/schedules/preview"),
    }
)
"""(method, path) of the routes a scoped key may call."""
_CHECKED: Final = "rota_scope_checked"


def _route_path(request: Request) -> str | None:
    """The served path (``/api/v1/jobs/{job_id}``) of the request's endpoint."""
    paths: dict[Any, str] | None = getattr(request.app.state, "rota_endpoint_paths", None)
    if paths is None:
        from rota.api.security import api_routes  # a cycle at import

        paths = {route.endpoint: route.path_format for route in api_routes(request.app)}
        request.app.state.rota_endpoint_paths = paths
    return paths.get(request.scope.get("endpoint"))


async def check_scope(request: Request, principal: Principal) -> None:
    """Refuse an API key the session routes (``/auth/…``: a key is no user, so it cannot
    sign in to the dashboard either), a scoped key a route it may not call (403), or a job
    outside its scope (404). The scope is checked once per request."""
    if not principal.is_key:
        return
    path = _route_path(request)
    if path is not None and path.startswith(f"{_P}/auth/"):
        raise PermissionDeniedError(
            "an API key is not a signed-in user: it has no session, password or profile"
        )
    scope = principal.scope
    if scope is None or not scope.scoped or getattr(request.state, _CHECKED, False):
        return
    if (request.method, path) not in SCOPED_ROUTES:
        raise PermissionDeniedError(
            "a scoped API key may only use the routes of the jobs and occurrences in its "
            "scope (see docs/security.md#scopes)"
        )
    runtime = get_runtime(request)
    params = request.path_params
    try:
        if "job_id" in params:
            job_id = UUID(str(params["job_id"]))
            job = await runtime.jobs.get_job(job_id)
            in_scope = scope.allows(job.job_type, job.tags)
            kind, key = "job", job_id
        elif "occurrence_id" in params:
            key = UUID(str(params["occurrence_id"]))
            occurrence = await runtime.store.get_occurrence(key)
            kind = "occurrence"
            job = await runtime.jobs.get_job(occurrence.job_id)
            in_scope = scope.allows(job.job_type, job.tags)
        else:
            in_scope = True
    except (ValueError, NotFoundError):
        in_scope = True  # the route answers (422 for a bad id, 404 for none)
    if not in_scope:
        raise NotFoundError(kind, key)
    request.state.rota_scope_checked = True


def check_new_job(
    principal: Principal,
    job_type: str | None,
    tags: Iterable[str] | None,
    *,
    depends_on: object = None,
    prefix: str = "",
) -> None:
    """A job created by a scoped key must be in its scope (403 naming the field)."""
    scope = principal.scope
    if scope is None or not scope.scoped:
        return
    if depends_on:
        raise ScopeDeniedError(
            "a scoped API key cannot set dependencies", field=f"{prefix}dependsOn"
        )
    scope.check(job_type or "", list(tags or ()), prefix=prefix)


def check_new_jobs(principal: Principal, items: Sequence[Mapping[str, Any]]) -> None:
    """Each job of a bulk create (its items as given: snake_case or camelCase keys)."""
    if principal.scope is None or not principal.scope.scoped:
        return
    for i, item in enumerate(items):
        job_type = item.get("job_type", item.get("jobType"))
        tags = item.get("tags")
        if isinstance(tags, str):
            tags = [t.strip() for t in tags.split(",")]
        check_new_job(
            principal,
            job_type if isinstance(job_type, str) else None,
            tags if isinstance(tags, list) else None,
            prefix=f"jobs[{i}].",
        )


def check_change(
    principal: Principal, job: Any, job_type: str | None, tags: Iterable[str] | None
) -> None:
    """A change by a scoped key may not move ``job`` out of its scope (403 naming the
    field): the job as changed (``None``: that field unchanged) must stay in it."""
    scope = principal.scope
    if scope is None or not scope.scoped:
        return
    scope.check(
        job.job_type if job_type is None else job_type, list(job.tags if tags is None else tags)
    )


def check_list_filter(principal: Principal, job_type: str | None) -> str | None:
    """The ``jobType`` filter a scoped key's list uses: its one job type when it names none;
    403 naming ``jobType`` for one outside its scope."""
    scope = principal.scope
    if scope is None or not scope.job_types:
        return job_type
    if job_type is None:
        return scope.job_types[0] if len(scope.job_types) == 1 else None
    if job_type not in scope.job_types:
        raise ScopeDeniedError(
            f"job type {job_type!r} is outside this API key's scope", field="jobType"
        )
    return job_type


def visible(principal: Principal, items: Sequence[Any]) -> list[Any]:
    """The jobs of a page a scoped key may see."""
    scope: KeyScope | None = principal.scope
    if scope is None or not scope.scoped:
        return list(items)
    return [job for job in items if scope.allows(job.job_type, job.tags)]
