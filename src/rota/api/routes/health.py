"""Liveness (the process answers) and readiness (every backend answers; what needs an
operator's attention named, without making the server unavailable)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response

from rota.api.deps import Runtime
from rota.api.schemas.health import Liveness, Readiness
from rota.api.views import attention

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
    warnings: list[str] = []
    if ok:  # names only: this answer is for anyone who can reach it
        try:
            warnings = sorted(await _warning_names(runtime))
        except Exception:
            logger.warning("reading what needs attention failed", exc_info=True)
    return Readiness(status="ok" if ok else "unavailable", components=components, warnings=warnings)


async def _warning_names(runtime: Runtime) -> list[str]:
    names = {"dispatching": "dispatching stopped", "silence": "silence alerts open"}
    return [names[key] for key in (await attention(runtime)).warnings()]
