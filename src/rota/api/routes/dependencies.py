"""Job dependencies (a job's upstreams and dependents) and graph runs (one run of a graph:
its occurrences, their statuses and the edges)."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request

from rota.api.deps import StoreDep, get_runtime
from rota.api.problems import problem_responses
from rota.api.schemas.common import status_name
from rota.api.schemas.dependencies import (
    DependenciesIn,
    DependencyOut,
    GraphEdgeOut,
    GraphNodeOut,
    GraphRunDetail,
    GraphRunOut,
    GraphRunPage,
    JobDependenciesOut,
)
from rota.api.security import OperatorUser, requires
from rota.core.dependencies import GraphRun, GraphRunStatus
from rota.core.models import OccurrenceStatus
from rota.core.security import Role
from rota.services.dependencies import DependencyService, GraphView, JobDependencies
from rota.services.names import job_display_names

router = APIRouter(tags=["dependencies"], dependencies=[requires(Role.VIEWER)])


def get_dependencies(request: Request) -> DependencyService:
    return get_runtime(request).dependencies


Dependencies = Annotated[DependencyService, Depends(get_dependencies)]


def node_status(status: OccurrenceStatus | None) -> str:
    return "Pending" if status is None else status_name(status)


async def dependencies_out(service: DependencyService, deps: JobDependencies) -> JobDependenciesOut:
    names = await service.names_of(
        [e.upstream_id for e in deps.depends_on] + [e.job_id for e in deps.dependents]
    )
    return JobDependenciesOut(
        job_id=deps.job_id,
        depends_on=[
            DependencyOut(job_id=e.upstream_id, on=e.rule, name=names.get(e.upstream_id))
            for e in deps.depends_on
        ],
        dependents=[
            DependencyOut(job_id=e.job_id, on=e.rule, name=names.get(e.job_id))
            for e in deps.dependents
        ],
    )


def graph_out(view: GraphView) -> GraphRunDetail:
    run = view.run
    nodes = []
    for job_id, level in sorted(view.levels.items(), key=lambda item: (item[1], str(item[0]))):
        node = run.node(job_id)
        nodes.append(
            GraphNodeOut(
                job_id=job_id,
                name=view.names.get(job_id),
                level=level,
                occurrence_id=None if node is None else node.occurrence_id,
                status=None if node is None else int(node.status),
                status_name=node_status(None if node is None else node.status),
                reason=None if node is None else node.reason,
            )
        )
    return GraphRunDetail(
        **_run_fields(run, view.names.get(run.root_job_id)),
        nodes=nodes,
        edges=[GraphEdgeOut.of(e) for e in view.edges],
    )


def _run_fields(run: GraphRun, root_name: str | None = None) -> dict[str, Any]:
    return {
        "id": run.id,
        "root_job_id": run.root_job_id,
        "root_job_display_name": root_name,
        "root_occurrence_id": run.root_occurrence_id,
        "status": run.status,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
    }


@router.get(
    "/jobs/{job_id}/dependencies",
    responses=problem_responses(404, 422, 503),
    summary="A job's upstreams and dependents",
)
async def job_dependencies(job_id: UUID, service: Dependencies) -> JobDependenciesOut:
    await service.job_exists(job_id)
    return await dependencies_out(service, await service.dependencies(job_id))


@router.put(
    "/jobs/{job_id}/dependencies",
    responses=problem_responses(404, 413, 422, 503),
    summary="Set the jobs a job runs after (replaces them all)",
)
async def set_job_dependencies(
    job_id: UUID, body: DependenciesIn, service: Dependencies, user: OperatorUser
) -> JobDependenciesOut:
    """422 on ``dependsOn`` for an unknown upstream, the job itself, or a cycle (the
    problem names the job ids along it). The change and its audit entry are one transaction."""
    raw = [{"jobId": d.job_id, "on": d.on} for d in body.depends_on]
    changed = await service.set_dependencies(job_id, raw, actor=user.username)
    return await dependencies_out(service, changed)


@router.get("/graph-runs", responses=problem_responses(422, 503), summary="List graph runs")
async def list_graph_runs(
    service: Dependencies,
    store: StoreDep,
    job_id: Annotated[UUID | None, Query(alias="jobId", description="Rooted at this job.")] = None,
    status: Annotated[GraphRunStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> GraphRunPage:
    running = None if status is None else status is GraphRunStatus.RUNNING
    runs = await service.list_graph_runs(job_id=job_id, running=running, limit=limit)
    names = await job_display_names(store, (r.root_job_id for r in runs))
    return GraphRunPage(
        items=[GraphRunOut(**_run_fields(r, names.get(r.root_job_id))) for r in runs]
    )


@router.get(
    "/graph-runs/{run_id}",
    responses=problem_responses(404, 422, 503),
    summary="A graph run: its occurrences, their statuses and the edges",
)
async def get_graph_run(run_id: UUID, service: Dependencies) -> GraphRunDetail:
    return graph_out(await service.graph_view(run_id))
