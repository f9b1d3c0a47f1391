"""``GET /metrics``: the server's Prometheus metrics in the text exposition format.

Outside ``/api/v1`` and the OpenAPI description. Who may read it (``ROTA_METRICS__…``,
docs/operations.md): with a token set, whoever sends ``Authorization: Bearer <token>`` (401
otherwise); with its own port (``ROTA_METRICS__PORT``), nobody here (404: it is served there,
:mod:`rota.app.server`); else anyone only if ``ROTA_METRICS__PUBLIC`` (by default in
development), nobody otherwise (403 saying how to open it)."""

from __future__ import annotations

from typing import Protocol, cast

from fastapi import APIRouter, Request, Response

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.core.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from rota.observability.metrics import CONTENT_TYPE, RotaMetrics, scrape_allowed

router = APIRouter(tags=["monitoring"])


class _WithMetrics(Protocol):
    @property
    def metrics(self) -> RotaMetrics: ...

    async def refresh_metrics(self) -> None: ...


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    include_in_schema=False,
    responses={
        200: {"content": {CONTENT_TYPE: {}}, "description": "The metrics"},
        **problem_responses(401, 403, 404, 503),
    },
)
async def metrics(runtime: Runtime, request: Request) -> Response:
    settings = runtime.settings
    token = settings.metrics_token
    if settings.metrics.port is not None:
        raise NotFoundError("/metrics", "on the API's port (it is on ROTA_METRICS__PORT)")
    if token is None and not settings.metrics_public:
        raise PermissionDeniedError(
            "the metrics are not public: set ROTA_METRICS__TOKEN (then scrape with "
            "'Authorization: Bearer <token>'), ROTA_METRICS__PORT (a port of their own) or "
            "ROTA_METRICS__PUBLIC=true"
        )
    if not scrape_allowed(request.headers.get("authorization"), token):
        raise AuthenticationError(
            "the metrics need 'Authorization: Bearer <token>' (ROTA_METRICS__TOKEN)"
        )
    wired = cast(_WithMetrics, runtime)
    await wired.refresh_metrics()
    return Response(wired.metrics.exposition(), media_type=CONTENT_TYPE)
