"""Workers: the live worker instances by group, with the job types they declare and their load.

Read from the coordination registry (Redis in the distributed mode): an instance is listed while
its heartbeat keeps its registration alive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Path

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas import WorkerGroupOut, WorkerInstanceOut, WorkerList
from rota.api.security import requires
from rota.core.errors import NotFoundError
from rota.core.models import WorkerInfo
from rota.core.security import Role

router = APIRouter(prefix="/workers", tags=["workers"], dependencies=[requires(Role.VIEWER)])


def _instance(info: WorkerInfo) -> WorkerInstanceOut:
    return WorkerInstanceOut(
        instance_id=info.instance_id,
        host=info.host,
        pid=info.pid,
        version=info.version,
        concurrency=info.concurrency,
        current_load=info.current_load,
        started_at=info.started_at,
        last_heartbeat=info.last_heartbeat,
        job_types=sorted(info.job_types),
    )


def group_workers(workers: list[WorkerInfo]) -> list[WorkerGroupOut]:
    """Instances grouped by worker group, groups and instances sorted by id."""
    groups: dict[str, list[WorkerInfo]] = {}
    for info in workers:
        groups.setdefault(info.worker_id, []).append(info)
    out: list[WorkerGroupOut] = []
    for worker_id in sorted(groups):
        members = sorted(groups[worker_id], key=lambda w: w.instance_id)
        types: dict[str, Mapping[str, Any]] = {}
        for info in members:
            for name, description in info.job_types.items():
                types.setdefault(name, description)
        out.append(
            WorkerGroupOut(
                worker_id=worker_id,
                instances=[_instance(w) for w in members],
                capacity=sum(w.concurrency for w in members),
                load=sum(w.current_load for w in members),
                job_types={name: dict(types[name]) for name in sorted(types)},
            )
        )
    return out


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
