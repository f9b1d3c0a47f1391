"""Workers: the live worker instances by group, with the job types they declare and their load.

Read from the coordination registry (Redis in the distributed mode): an instance is listed while
its heartbeat keeps its registration alive.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas.workers import WorkerGroupOut, WorkerList
from rota.api.security import requires
from rota.api.views import group_workers
from rota.core.errors import NotFoundError
from rota.core.security import Role

router = APIRouter(prefix="/workers", tags=["workers"], dependencies=[requires(Role.VIEWER)])


@router.get("", responses=problem_responses(503), summary="Live worker groups and instances")
async def list_workers(runtime: Runtime) -> WorkerList:
    return WorkerList(items=group_workers(await runtime.coordination.workers()))


@router.get(
    "/{worker_id}",
    responses=problem_responses(404, 422, 503),
    summary="One live worker group: its instances, job types (data schemas) and load",
)
async def get_worker_group(
    worker_id: Annotated[str, Path(max_length=200)], runtime: Runtime
) -> WorkerGroupOut:
    groups = group_workers(
        [w for w in await runtime.coordination.workers() if w.worker_id == worker_id]
    )
    if not groups:
        raise NotFoundError("worker group", worker_id)
    return groups[0]
