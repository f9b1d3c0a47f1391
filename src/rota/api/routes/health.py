"""Liveness (the process answers) and readiness (every backend answers)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response

from rota.api.deps import Runtime
from rota.api.schemas.health import Liveness, Readiness

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/health", tags=["health"])


@router.get("/live", summary="The process is up")
async def live() -> Liveness:
    return Liveness(status="ok")


@router.get(
    "/ready",
    summary="Every backend answers",
    responses={503: {"model": Readiness, "description": "A component is not ready"}},
)
async def ready(runtime: Runtime, response: Response) -> Readiness:
    try:
        components = await runtime.health()
    except Exception as exc:
        logger.warning("health check failed", exc_info=True)
        components = {"runtime": f"{type(exc).__name__}: {exc}"}
    ok = all(state == "ok" for state in components.values())
    if not ok:
        response.status_code = 503
    return Readiness(status="ok" if ok else "unavailable", components=components)
