"""The dashboard's pages and the fragments htmx re-fetches when an event says something changed.

Pages read the store and services directly (server-rendered, paged and filtered on the server).
Every change a person makes goes through the REST API from the browser (``static/rota.js``), so
the API's role checks decide; the pages only hide what the user's role may not do.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.templating import Jinja2Templates
from starlette.responses import RedirectResponse, Response

from rota.api.deps import ApiRuntime, get_runtime
from rota.api.paths import app_url
from rota.api.schemas.common import status_name
from rota.api.schemas.jobs import JobOut
from rota.api.security import sees_job_data
from rota.api.strict import QUERY_MAX
from rota.api.views import attention, group_workers, job_out
from rota.core.errors import NotFoundError, RotaError, ValidationError
from rota.core.jobfields import version_snapshot
from rota.core.models import Job, Occurrence, OccurrenceStatus
from rota.core.records import OccurrenceQuery, Page
from rota.core.redact import mask_settings
from rota.core.security import Role
from rota.dashboard import session
from rota.dashboard.display import CHOICES, human
from rota.dashboard.querying import query_field, read_query
from rota.dashboard.session import DashboardUser

router = APIRouter(include_in_schema=False, dependencies=[Depends(session.require_csrf)])
"""Every dashboard route: a change needs the CSRF header (a test walks the routes)."""

User = Annotated[DashboardUser, Depends(session.current_user)]
Runtime = Annotated[ApiRuntime, Depends(get_runtime)]
Cursor = Annotated[str | None, Query(max_length=500)]

PAGE_SIZE = 25
EVENTS_PATH = "/api/v1/events"
POLL_WITH_EVENTS = 30
"""Seconds between safety-net refreshes when the event stream drives the page."""
POLL_WITHOUT_EVENTS = 3
"""Seconds between refreshes when the API has no event stream."""
STILL: dict[str, Any] = {"events": None, "poll": 0}
"""A page with nothing live on it."""
STATUS_NAMES = [status_name(s) for s in OccurrenceStatus]
RESOLUTION_ACTIONS = ("fixed", "retried", "ignored", "wont_fix", "other")


def _templates(request: Request) -> Jinja2Templates:
    templates: Jinja2Templates = request.app.state.dashboard_templates
    return templates


def has_route(request: Request, path: str) -> bool:
    return path in session.api_paths(request)


def live(request: Request, **filters: str) -> dict[str, Any]:
    """How a page stays current: the event stream (with filters, and its ``ready`` event: each
    live part is fetched again once the stream is in place, so nothing that changed between
    the page's render and its subscription is missed) and a polling safety net."""
    if has_route(request, EVENTS_PATH):
        query = "&".join([*(f"{k}={v}" for k, v in filters.items() if v), "ready=true"])
        url = f"{EVENTS_PATH}?{query}"
        return {"events": url, "poll": POLL_WITH_EVENTS}
    return {"events": None, "poll": POLL_WITHOUT_EVENTS}


def render(
    request: Request,
    user: DashboardUser,
    page: str,
    context: dict[str, Any],
    fragments: tuple[str, ...] = (),
    status_code: int = 200,
) -> Response:
    """The page, or with ``?fragment=name`` (one of ``fragments``) only ``_name.html``."""
    fragment = request.query_params.get("fragment")
    name = f"_{fragment}.html" if fragment in fragments else page
    values = {"user": user, "nav": page.removesuffix(".html"), **context}
    values.setdefault("live", STILL)
    response = _templates(request).TemplateResponse(request, name, values, status_code=status_code)
    return page_headers(response)


PAGE_HEADERS: dict[str, str] = {
    # Scripts and styles only from this server (htmx is used without eval), no framing.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'self'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def page_headers(response: Response) -> Response:
    response.headers.update(PAGE_HEADERS)
    return response


def not_found(request: Request, user: DashboardUser, what: str) -> Response:
    return render(request, user, "not_found.html", {"what": what}, status_code=404)


def page_url(request: Request, **changes: str | None) -> str:
    """This page's URL with some query parameters changed (``None`` removes one)."""
    params = {k: v for k, v in request.query_params.items() if k != "fragment"}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    query = urlencode(params)
    return request.url.path + (f"?{query}" if query else "")


def paging(request: Request, cursor: str | None, next_cursor: str | None) -> dict[str, Any]:
    """The links of a paged list: the next page (when there is one) and the first page (when
    this is not it)."""
    return {
        "next_url": page_url(request, cursor=next_cursor) if next_cursor else None,
        "first_url": page_url(request, cursor=None) if cursor else None,
    }


# --- sign-in ----------------------------------------------------------------------------------


@router.get("/login")
async def login_page(
    request: Request, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    return page_headers(
        _templates(request).TemplateResponse(
            request,
            "login.html",
            {
                "next": session.safe_next(next, session.home(request)),
                "error": None,
                "username": "",
            },
        )
    )


REDIRECT_HEADER = "X-Rota-Redirect"
"""Where the page's script goes after a sign-in or sign-out (the form is sent by ``fetch``, to
carry the CSRF header, so a redirect would be followed by ``fetch`` instead of the browser)."""


def go_to(location: str) -> Response:
    return Response(status_code=204, headers={REDIRECT_HEADER: location})


@router.post("/login")
async def login_submit(
    request: Request,
    username: Annotated[str, Form(max_length=200)],
    password: Annotated[str, Form(max_length=1000)],
    next: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    target = session.safe_next(next, session.home(request))
    outcome = await session.login(request, username, password)
    if isinstance(outcome, str):
        return page_headers(
            _templates(request).TemplateResponse(
                request,
                "login.html",
                {"next": target, "error": outcome, "username": username},
                status_code=401,
            )
        )
    response = go_to(target)
    session.set_cookies(request, response, outcome)
    return response


@router.post(f"{session.SESSION_PATH}/logout")
async def logout(request: Request) -> Response:
    await session.logout(request)
    response = go_to(app_url(request, "/login"))
    session.clear_cookies(request, response)
    return response


@router.get(f"{session.SESSION_PATH}/resume")
async def resume_session(
    request: Request, next: Annotated[str, Query(max_length=2000)] = ""
) -> Response:
    """Where a page whose access token expired sends the browser: its script refreshes the
    session (the refresh cookie is sent to this path only) and goes back to ``next``; with
    no refresh cookie, straight to the login page."""
    target = session.safe_next(next, session.home(request))
    if not request.cookies.get(session.REFRESH_COOKIE):
        return RedirectResponse(login_url(request, target), status_code=303)
    context = {"next": target, "login": login_url(request, target)}
    return page_headers(_templates(request).TemplateResponse(request, "resume.html", context))


def login_url(request: Request, target: str) -> str:
    """The login page, coming back to ``target`` (a path as the browser asks for it)."""
    login = app_url(request, "/login")
    if target == session.home(request):
        return login
    return f"{login}?{urlencode({'next': target}, safe='/')}"


@router.post(f"{session.SESSION_PATH}/refresh")
async def refresh_session(request: Request) -> Response:
    """For the page's script: new tokens (204), or another request of this browser is
    renewing them right now (409: try again with the cookies it brings), or the session is
    over (401)."""
    tokens = await session.refresh(request)
    if tokens is session.SUPERSEDED:
        return Response(status_code=409)
    if tokens is None:
        response = Response(status_code=401)
        session.clear_cookies(request, response)
        return response
    response = Response(status_code=204)
    session.set_cookies(request, response, tokens)
    return response


# --- jobs -------------------------------------------------------------------------------------


async def _last_results(runtime: ApiRuntime, jobs: list[Job]) -> dict[UUID, Occurrence]:
    last: dict[UUID, Occurrence] = {}
    for job in jobs:
        page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=1))
        if page.items:
            last[job.id] = page.items[0]
    return last


@router.get("/jobs")
async def jobs_page(
    request: Request,
    user: User,
    runtime: Runtime,
    search: Annotated[str, Query(max_length=200)] = "",
    tag: Annotated[str, Query(max_length=100)] = "",
    state: Annotated[str, Query(max_length=20)] = "",
    q: Annotated[str, Query(max_length=QUERY_MAX)] = "",
    cursor: Cursor = None,
) -> Response:
    is_active = {"active": True, "inactive": False}.get(state)
    auto_disabled = True if state == "auto_disabled" else None
    found, query_error = read_query(q, "jobs", shows_job_data(user, runtime))
    page: Page[Job] = Page([])  # a refused query shows nothing, and why
    try:
        if not query_error:
            page = await runtime.jobs.list_jobs(
                search=search.replace("\x00", "") or None,
                tag=tag.replace("\x00", "") or None,
                is_active=is_active,
                auto_disabled=auto_disabled,
                limit=PAGE_SIZE,
                cursor=cursor or None,
                where=found,
            )
    except ValidationError as exc:  # a data filter while job data is sealed
        query_error = f"Query not applied: {exc.message}."
    tags: list[dict[str, Any]] = []
    if has_route(request, "/api/v1/tags"):
        code, body = await api_get(request, "/api/v1/tags")
        tags = body.get("items", []) if code == 200 and isinstance(body, dict) else []
    context = {
        "jobs": page.items,
        "tags": tags,
        "last": await _last_results(runtime, page.items),
        **paging(request, cursor, page.next_cursor),
        "filters": {"search": search, "tag": tag, "state": state, "q": q},
        "query": query_field("jobs", q, query_error),
        "live": live(request, types="job.created,job.updated,job.deleted,occurrence.updated"),
    }
    return render(request, user, "jobs.html", context, fragments=("jobs_table",))


def _time_zones() -> list[str]:
    from zoneinfo import available_timezones

    return sorted(available_timezones())


async def _job_types(runtime: ApiRuntime) -> dict[str, dict[str, Any]]:
    """Job type -> its description (with ``schema``) from the live workers."""
    types: dict[str, dict[str, Any]] = {}
    for group in group_workers(await runtime.coordination.workers()):
        for name, description in group.job_types.items():
            types.setdefault(name, {**description, "workerId": group.worker_id})
    return types


@router.get("/jobs/new")
async def new_job(request: Request, user: User, runtime: Runtime) -> Response:
    if not user.can_operate:  # a form a Viewer could not send
        return render(request, user, "forbidden.html", {"role": "Operator"}, status_code=403)
    return await _job_form(request, user, runtime, None)


@router.get("/jobs/{job_id}/edit")
async def edit_job(request: Request, user: User, runtime: Runtime, job_id: UUID) -> Response:
    if not user.can_operate:  # the form shows the job's data: Operators and Admins only
        return render(request, user, "forbidden.html", {"role": "Operator"}, status_code=403)
    try:
        job = await runtime.jobs.get_job(job_id)
    except NotFoundError:
        return not_found(request, user, "job")
    return await _job_form(request, user, runtime, job)


async def _job_form(
    request: Request, user: DashboardUser, runtime: ApiRuntime, job: Job | None
) -> Response:
    types = await _job_types(runtime)
    out = JobOut.of(job, runtime.jobs.auto_disable_defaults) if job else None
    deps = await job_dependencies(runtime, job.id) if job else {"upstreams": []}
    upstreams = [{"jobId": str(i), "on": rule} for i, _, rule in deps["upstreams"]]
    context = {
        "depends_on_text": json.dumps(upstreams) if upstreams else "",
        "upstream_names": [f"{name or i} ({rule})" for i, name, rule in deps["upstreams"]],
        "job": out,
        "etag": job.etag if job else None,
        "job_data_text": json.dumps(out.job_data, indent=2) if out and out.job_data else "",
        "job_types": types,
        # Inside <script>: a "</script>" in a worker's schema must not end the element.
        "schemas_json": json.dumps({k: v.get("schema") for k, v in types.items()}).replace(
            "</", "<\\/"
        ),
        "time_zones": _time_zones(),
        "live": STILL,
    }
    return render(request, user, "job_form.html", context)


@router.get("/ui/preview")
async def cron_preview(
    request: Request,
    user: User,
    runtime: Runtime,
    cron: Annotated[str, Query(alias="cronExpression", max_length=200)] = "",
    time_zone: Annotated[str, Query(alias="timeZone", max_length=100)] = "UTC",
    start: Annotated[str, Query(alias="previewFrom", max_length=20)] = "",
    every: Annotated[str, Query(max_length=40)] = "",
    start_at: Annotated[str, Query(alias="startAt", max_length=40)] = "",
) -> Response:
    """The next fires of a cron expression, shown in its own zone and in UTC; from now, or from
    the start of ``previewFrom`` (a date, in the job's zone) to check a DST change. Or of an
    interval (``every``, aligned to ``startAt``), in UTC."""
    fires: list[tuple[datetime, datetime]] = []
    error = None
    if every.strip() and not cron.strip():
        try:
            begin = datetime.fromisoformat(start_at.strip()) if start_at.strip() else None
            shown = runtime.jobs.preview(None, "UTC", None, 8, every=every.strip(), start_at=begin)
            fires = [(fire, fire) for fire in shown]
        except (RotaError, ValueError) as exc:
            error = getattr(exc, "message", None) or str(exc)
    elif cron.strip():
        try:
            zone = ZoneInfo(time_zone or "UTC")
            after = None
            if start.strip():
                day = date.fromisoformat(start.strip())
                after = datetime.combine(day, datetime.min.time(), zone) - timedelta(seconds=1)
            fires = [
                (fire, fire.astimezone(zone))
                for fire in runtime.jobs.preview(cron, time_zone or "UTC", after, 8)
            ]
        except (RotaError, ZoneInfoNotFoundError, ValueError) as exc:
            error = getattr(exc, "message", None) or str(exc) or "invalid time zone"
    context = {"fires": fires, "error": error, "cron": cron}
    return render(request, user, "_preview.html", context)


UPCOMING_FIRES = 8
"""The next fires a job's page lists."""


@router.get("/jobs/{job_id}")
async def job_page(request: Request, user: User, runtime: Runtime, job_id: UUID) -> Response:
    try:
        job = await runtime.jobs.get_job(job_id)
    except NotFoundError:
        return not_found(request, user, "job")
    occurrences = await runtime.store.list_occurrences(
        OccurrenceQuery(job_id=job_id, limit=PAGE_SIZE)
    )
    history = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=200))
    points = [
        (int(o.scheduled_for.timestamp()), o.duration_ms)
        for o in reversed(history.items)
        if o.duration_ms is not None
    ]
    versions = await runtime.jobs.job_versions(job_id)
    counts = await runtime.store.count_occurrences(job_id=job_id)
    upcoming, effective = await runtime.jobs.upcoming(
        job,
        UPCOMING_FIRES,
        default_timeout_seconds=runtime.settings.worker.default_timeout_seconds,
    )
    out = job_out(job, runtime.jobs)
    current = version_snapshot(job)
    snapshots = [dict(v.snapshot) for v in versions] + [current]
    hidden = not shows_job_data(user, runtime)
    diffs = [
        {
            "version": v.version,
            "created_at": v.created_at,
            "changes": _diff(snapshots[i], snapshots[i + 1], hidden),
        }
        for i, v in enumerate(versions)
    ]
    context = {
        "job": out,
        "occurrences": occurrences.items,
        "more_url": f"/executions?jobId={job_id}" if occurrences.next_cursor else None,
        "durations": json.dumps({"x": [p[0] for p in points], "y": [p[1] for p in points]}),
        "counts": {status_name(s): counts.get(s, 0) for s in OccurrenceStatus},
        "upcoming": [(f, f.at.astimezone(ZoneInfo(job.time_zone))) for f in upcoming],
        "effective": effective,
        "diffs": list(reversed(diffs)),
        **await job_dependencies(runtime, job_id),
        "live": live(
            request, types="occurrence.created,occurrence.updated,job.updated", jobId=str(job_id)
        ),
    }
    return render(request, user, "job.html", context, fragments=("job_summary", "job_occurrences"))


async def job_dependencies(runtime: ApiRuntime, job_id: UUID) -> dict[str, Any]:
    """What the job page shows: upstreams and dependents (with names) and recent runs."""
    deps = await runtime.dependencies.dependencies(job_id)
    ids = [e.upstream_id for e in deps.depends_on] + [e.job_id for e in deps.dependents]
    names = await runtime.dependencies.names_of(ids)
    runs = (
        await runtime.dependencies.list_graph_runs(job_id=job_id, limit=10)
        if deps.dependents
        else []
    )
    return {
        "upstreams": [
            (e.upstream_id, names.get(e.upstream_id, ""), e.rule.value) for e in deps.depends_on
        ],
        "dependents": [(e.job_id, names.get(e.job_id, ""), e.rule.value) for e in deps.dependents],
        "graph_runs": runs,
    }


def shows_job_data(user: DashboardUser, runtime: ApiRuntime) -> bool:
    """The API's rule (:func:`rota.api.security.sees_job_data`) for a dashboard user."""
    return sees_job_data(Role.parse(user.role.label), runtime.settings.api.viewer_job_data)


HIDDEN = "(hidden from Viewers)"
"""What a user who may not see job data is shown in its place."""


def _diff(
    before: dict[str, Any], after: dict[str, Any], hidden: bool = False
) -> list[tuple[str, str, str]]:
    def text(value: Any) -> str:
        if isinstance(value, str) and value[:4].isdigit():
            with contextlib.suppress(ValueError):  # snapshots keep times as text
                value = datetime.fromisoformat(value)
        if isinstance(value, datetime):
            return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return json.dumps(value, default=str, sort_keys=True)

    changes = []
    # a snapshot made before a field was versioned does not know its value then: not a change
    for key in (k for k in after if k in before):
        old, new = text(before.get(key)), text(after.get(key))
        if old != new:
            kind = CHOICES.get(key)
            if kind is not None:  # an enum's value in words
                old, new = human(before.get(key), kind), human(after.get(key), kind)
            if hidden and key == "jobData":  # that it changed, not what it holds
                old = new = HIDDEN
            changes.append((key, old, new))
    return changes


# --- workers, admin, users --------------------------------------------------------------------


@router.get("/workers")
async def workers_page(request: Request, user: User, runtime: Runtime) -> Response:
    groups = group_workers(await runtime.coordination.workers())
    now = datetime.now(UTC)
    context = {
        "groups": groups,
        "now": now,
        "live": live(request, types="worker.changed"),
    }
    return render(request, user, "workers.html", context, fragments=("workers_table",))


def redact(value: Any, key: str = "") -> Any:
    """Settings as shown to an Admin: secrets hidden, URLs masked (passwords and secret
    query parameters: :func:`rota.core.redact.mask_settings`)."""
    return mask_settings(value, key)


@router.get("/admin")
async def admin_page(request: Request, user: User, runtime: Runtime) -> Response:
    from rota.services.buckets import bucket_overview

    buckets = await bucket_overview(
        runtime.coordination, runtime.index, runtime.settings.scheduler.bucket_count
    )
    try:
        depths: dict[str, int] | None = await runtime.broker.queue_depths()
    except Exception:
        depths = None
    config = redact(runtime.settings.model_dump(mode="json")) if user.is_admin else None
    dispatcher = None
    if has_route(request, "/api/v1/admin/dispatcher"):
        status, body = await api_get(request, "/api/v1/admin/dispatcher")
        dispatcher = body if status == 200 and isinstance(body, dict) else None
    limits = None
    if has_route(request, "/api/v1/limits"):
        status, body = await api_get(request, "/api/v1/limits")
        limits = body if status == 200 and isinstance(body, dict) else None
    context = {
        "alerts": (await attention(runtime)).alerts,
        "limits": limits,
        "buckets": buckets,
        "depths": depths,
        "config": json.dumps(config, indent=2) if config is not None else None,
        "dispatcher": dispatcher,
        "control": has_route(request, "/api/v1/admin/dispatcher/stop")
        and has_route(request, "/api/v1/admin/dispatcher/resume"),
    }
    return render(request, user, "admin.html", context)


async def api_get(request: Request, path: str) -> tuple[int, Any]:
    """``GET`` an API path in process, as the signed-in user: status and JSON body."""
    headers = {}
    access = session.access_token(request)
    if access:
        headers["Authorization"] = f"Bearer {access}"
    async with session.internal_client(request) as api:
        answer = await api.get(path, headers=headers)
    try:
        body = answer.json()
    except ValueError:
        body = None
    return answer.status_code, body


@router.get("/users")
async def users_page(request: Request, user: User) -> Response:
    available = has_route(request, "/api/v1/users")
    users: list[dict[str, Any]] = []
    error = None
    if available and user.is_admin:
        status, body = await api_get(request, "/api/v1/users?limit=1000")
        if status == 200 and isinstance(body, dict):
            users = body.get("items", [])
        else:
            error = f"The API answered {status}."
    keys: list[dict[str, Any]] = []
    if available and user.is_admin and has_route(request, "/api/v1/api-keys"):
        status, body = await api_get(request, "/api/v1/api-keys")
        if status == 200 and isinstance(body, dict):
            keys = body.get("items", [])
        else:
            error = f"The API answered {status}."
    context = {"users": users, "keys": keys, "available": available, "error": error}
    return render(request, user, "users.html", context)


NOTIFICATIONS = "/api/v1/notifications/subscriptions"
EVENT_NAMES = ("occurrence.failed", "occurrence.timed_out", "job.auto_disabled",
               "deadletters.over_threshold", "silence.alert")  # fmt: skip


@router.get("/notifications")
async def notifications_page(request: Request, user: User) -> Response:
    """Admins: the subscriptions, each with its last delivery attempts, and a new one."""
    available = has_route(request, NOTIFICATIONS)
    subscriptions: list[dict[str, Any]] = []
    attempts: dict[str, list[dict[str, Any]]] = {}
    error = None
    if available and user.is_admin:
        status, body = await api_get(request, NOTIFICATIONS)
        if status == 200 and isinstance(body, dict):
            subscriptions = body.get("items", [])
        else:
            error = f"The API answered {status}."
        for sub in subscriptions:
            status, log = await api_get(request, f"{NOTIFICATIONS}/{sub['id']}/deliveries?limit=10")
            attempts[sub["id"]] = log.get("attempts", []) if isinstance(log, dict) else []
    context = {"subscriptions": subscriptions, "attempts": attempts, "available": available,
               "error": error, "event_names": EVENT_NAMES}  # fmt: skip
    return render(request, user, "notifications.html", context)
