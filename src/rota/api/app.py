"""The FastAPI application over a wired runtime."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from fastapi import FastAPI

from rota.api.deps import ApiRuntime
from rota.api.docs import install_docs
from rota.api.limits import InputLimitMiddleware, InputLimits
from rota.api.problems import (
    document_input_errors,
    install_problem_handlers,
    problem_json_only,
)
from rota.api.routes import (
    admin,
    alerts,
    apikeys,
    audit,
    auth,
    bulk,
    dependencies,
    events,
    failed,
    health,
    ids,
    jobs,
    metrics,
    notifications,
    occurrences,
    stats,
    upcoming,
    users,
    workers,
)
from rota.api.routes import limits as job_limits
from rota.api.security import document_roles
from rota.app.settings import ApiSettings

API_PREFIX = "/api/v1"
OPENAPI_PATH = "/openapi.json"
PUBLIC_PATHS = frozenset(
    f"{API_PREFIX}{path}"
    for path in ("/auth/login", "/auth/refresh", "/health/live", "/health/ready")
)
"""The only routes that answer without an access token. Every other ``/api/v1`` route checks
a role (a test walks the routes). ``/openapi.json``, ``/docs`` and ``/redoc`` are public too: the
API's description holds nothing secret."""


def _version() -> str:
    try:
        return metadata.version("rota")
    except metadata.PackageNotFoundError:
        return "0"


def create_app(runtime: ApiRuntime, *, dashboard: bool = True) -> FastAPI:
    """The REST API (``/api/v1``, OpenAPI at ``/openapi.json``) serving ``runtime``, and the
    dashboard at ``/`` unless ``dashboard`` is false.

    The runtime's life cycle (start, stop) belongs to the caller; the app only uses it.
    """
    app = FastAPI(
        title="Rota",
        version=_version(),
        description="A distributed job scheduler: jobs, occurrences, workers. Sign in with "
        "POST /api/v1/auth/login and send 'Authorization: Bearer <accessToken>'; each "
        "operation names the role it needs (Viewer < Operator < Admin).",
        openapi_url=OPENAPI_PATH,
        docs_url=None,  # served by rota.api.docs from the package, not from a CDN
        redoc_url=None,
    )
    app.state.runtime = runtime
    settings = getattr(runtime, "settings", None)  # None: an app built only for its schema
    limits = InputLimits() if settings is None else input_limits(settings.api)
    app.add_middleware(InputLimitMiddleware, limits=limits)
    install_problem_handlers(app)
    for router in (
        auth.router,
        jobs.router,
        jobs.schedules,
        jobs.tags,
        upcoming.router,
        dependencies.router,
        occurrences.router,
        bulk.runs_router,
        failed.router,
        bulk.failed_router,
        workers.router,
        health.router,
        admin.router,
        alerts.router,
        notifications.router,
        users.router,
        apikeys.router,
        audit.router,
        events.router,
        stats.router,
        job_limits.router,
        ids.router,
    ):
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(metrics.router)
    install_docs(app, OPENAPI_PATH)
    if dashboard:
        from rota.dashboard import install_dashboard

        install_dashboard(app)
    _install_openapi(app)
    return app


def input_limits(api: ApiSettings) -> InputLimits:
    """The input limits of the API settings (``ROTA_API__…``)."""
    return InputLimits(
        max_body_bytes=api.max_body_bytes,
        max_json_depth=api.max_json_depth,
        max_query_bytes=api.max_query_bytes,
        max_header_bytes=api.max_header_bytes,
    )


def _install_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = generate()
            document_roles(app, spec, PUBLIC_PATHS)
            app.openapi_schema = problem_json_only(document_input_errors(spec))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
