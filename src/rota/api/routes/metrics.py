"""``GET /metrics``: the server's Prometheus metrics in the text exposition format.

Outside ``/api/v1`` and the OpenAPI description. Open by default, for Prometheus on a private
network (it tells counts and names of queues and worker groups, nothing else); with
``ROTA_API__METRICS_TOKEN`` set it needs ``Authorization: Bearer <token>`` (401 otherwise)."""

from __future__ import annotations

from typing import Protocol, cast

from fastapi import APIRouter, Request, Response

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.core.errors import AuthenticationError
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
        **problem_responses(401, 503),
    },
)
async def metrics(runtime: Runtime, request: Request) -> Response:
    token = runtime.settings.api.metrics_token
    secret = token.get_secret_value() if token is not None else None
    if not scrape_allowed(request.headers.get("authorization"), secret):
        raise AuthenticationError(
            "the metrics need 'Authorization: Bearer <token>' (ROTA_API__METRICS_TOKEN)"
        )
    wired = cast(_WithMetrics, runtime)
    await wired.refresh_metrics()
    return Response(wired.metrics.exposition(), media_type=CONTENT_TYPE)
