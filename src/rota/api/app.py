"""The FastAPI application over a wired runtime."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from fastapi import FastAPI

from rota.api import (
    routes_admin,
    routes_failed,
    routes_health,
    routes_jobs,
    routes_occurrences,
    routes_workers,
)
from rota.api.deps import ApiRuntime
from rota.api.problems import install_problem_handlers, problem_json_only

API_PREFIX = "/api/v1"


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
        description="A distributed job scheduler: jobs, occurrences, workers.",
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.runtime = runtime
    install_problem_handlers(app)
    for router in (
        routes_jobs.router,
        routes_jobs.schedules,
        routes_occurrences.router,
        routes_failed.router,
        routes_workers.router,
        routes_health.router,
        routes_admin.router,
    ):
        app.include_router(router, prefix=API_PREFIX)
    if dashboard:
        from rota.dashboard import install_dashboard

        install_dashboard(app)
    _install_openapi(app)
    return app


def _install_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = problem_json_only(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
