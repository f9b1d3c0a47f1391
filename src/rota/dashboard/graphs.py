"""The dashboard's job dependency pages: graph runs (the list, and one run drawn as a graph:
an inline SVG laid out by levels, its nodes coloured by status and linked to their
executions) and what the job page shows of a job's upstreams, dependents and runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from rota.api.schemas.common import status_name
from rota.core.dependencies import DependencyRule, GraphRunStatus
from rota.core.errors import NotFoundError
from rota.dashboard import session
from rota.dashboard.pages import Runtime, User, live, not_found, render
from rota.services.dependencies import GraphView

router = APIRouter(include_in_schema=False, dependencies=[Depends(session.require_csrf)])

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 190, 52, 70, 22, 12
FILLS = {
    "Completed": ("#c6f6d5", "#276749"),
    "Failed": ("#fed7d7", "#9b2c2c"),
    "TimedOut": ("#fed7d7", "#9b2c2c"),
    "Running": ("#bee3f8", "#2c5282"),
    "Queued": ("#e9d8fd", "#553c9a"),
    "Unknown": ("#feebc8", "#975a16"),
    "Cancelled": ("#edf2f7", "#4a5568"),
    "Skipped": ("#edf2f7", "#4a5568"),
    "Pending": ("#ffffff", "#718096"),
}
EDGE_COLOURS = {
    DependencyRule.SUCCESS: "#2f855a",
    DependencyRule.FAILURE: "#c53030",
    DependencyRule.COMPLETION: "#718096",
}


@dataclass(frozen=True, slots=True)
class Box:
    job_id: UUID
    name: str
    level: int
    status: str
    occurrence_id: UUID | None
    reason: str | None
    x: int
    y: int
    fill: str
    stroke: str


@dataclass(frozen=True, slots=True)
class Line:
    path: str
    colour: str
    rule: str
    dashed: bool
    label_x: int
    label_y: int


def layout(view: GraphView) -> dict[str, Any]:
    """Boxes by level (columns, left to right) and the edges between them as curves."""
    columns: dict[int, list[UUID]] = {}
    for job_id, level in sorted(
        view.levels.items(), key=lambda i: (i[1], view.names.get(i[0], ""))
    ):
        columns.setdefault(level, []).append(job_id)
    boxes: dict[UUID, Box] = {}
    for level, jobs in columns.items():
        for row, job_id in enumerate(jobs):
            node = view.run.node(job_id)
            status = "Pending" if node is None else status_name(node.status)
            fill, stroke = FILLS.get(status, FILLS["Pending"])
            boxes[job_id] = Box(
                job_id=job_id,
                name=view.names.get(job_id, str(job_id)[:8]),
                level=level,
                status=status,
                occurrence_id=None if node is None else node.occurrence_id,
                reason=None if node is None else node.reason,
                x=PAD + level * (NODE_W + GAP_X),
                y=PAD + row * (NODE_H + GAP_Y),
                fill=fill,
                stroke=stroke,
            )
    lines = []
    for edge in view.edges:
        up, down = boxes.get(edge.upstream_id), boxes.get(edge.job_id)
        if up is None or down is None:
            continue
        x1, y1 = up.x + NODE_W, up.y + NODE_H // 2
        x2, y2 = down.x, down.y + NODE_H // 2
        mid = (x1 + x2) // 2
        lines.append(
            Line(
                path=f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 6},{y2}",
                colour=EDGE_COLOURS[edge.rule],
                rule=edge.rule.value,
                dashed=edge.rule is not DependencyRule.SUCCESS,
                label_x=mid,
                label_y=(y1 + y2) // 2 - 4,
            )
        )
    width = PAD * 2 + max(columns, default=0) * (NODE_W + GAP_X) + NODE_W
    tallest = max((len(jobs) for jobs in columns.values()), default=1)
    height = PAD * 2 + tallest * (NODE_H + GAP_Y) - GAP_Y
    return {"boxes": list(boxes.values()), "lines": lines, "width": width, "height": height}


@router.get("/graph-runs")
async def graph_runs_page(
    request: Request,
    user: User,
    runtime: Runtime,
    job_id: Annotated[UUID | None, Query(alias="jobId")] = None,
) -> Response:
    runs = await runtime.dependencies.list_graph_runs(job_id=job_id, limit=100)
    names = await runtime.dependencies.names_of(sorted({r.root_job_id for r in runs}, key=str))
    context = {
        "runs": runs,
        "names": names,
        "job_id": job_id,
        "live": live(request, types="occurrence.created,occurrence.updated"),
    }
    return render(request, user, "graph_runs.html", context, fragments=("graph_runs_table",))


@router.get("/graph-runs/{run_id}")
async def graph_run_page(request: Request, user: User, runtime: Runtime, run_id: UUID) -> Response:
    try:
        view = await runtime.dependencies.graph_view(run_id)
    except NotFoundError:
        return not_found(request, user, "graph run")
    context = {
        "run": view.run,
        "root_name": view.names.get(view.run.root_job_id, str(view.run.root_job_id)),
        "graph": layout(view),
        "node_w": NODE_W,
        "node_h": NODE_H,
        "finished": view.run.status is GraphRunStatus.FINISHED,
        "live": live(request, types="occurrence.created,occurrence.updated"),
    }
    return render(request, user, "graph_run.html", context, fragments=("graph_run_body",))
