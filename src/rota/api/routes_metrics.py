"""``GET /metrics``: the server's Prometheus metrics in the text exposition format.

Outside ``/api/v1`` and the OpenAPI description, and public like ``/openapi.json``:
Prometheus scrapes it without signing in (it tells counts and names of queues and worker
groups, nothing else; keep it on the internal network)."""

from __future__ import annotations

from typing import Protocol, cast

from fastapi import APIRouter, Response

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.metrics import CONTENT_TYPE, RotaMetrics

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
        **problem_responses(503),
    },
)
async def metrics(runtime: Runtime) -> Response:
    wired = cast(_WithMetrics, runtime)
    await wired.refresh_metrics()
    return Response(wired.metrics.exposition(), media_type=CONTENT_TYPE)
