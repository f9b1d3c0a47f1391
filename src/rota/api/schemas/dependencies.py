"""Job dependencies and graph runs: request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field

from rota.api.schemas.common import ApiModel, InputModel
from rota.core.dependencies import MAX_UPSTREAMS, Dependency, DependencyRule, GraphRunStatus


class DependencyIn(InputModel):
    job_id: UUID = Field(description="The upstream job.")
    on: DependencyRule = Field(
        DependencyRule.SUCCESS,
        description="success: after it Completed; completion: after it ended, whatever "
        "its status; failure: after it failed finally (Failed or TimedOut, retries spent).",
    )


DependsOn = Annotated[list[DependencyIn], Field(max_length=MAX_UPSTREAMS)]


class DependenciesIn(InputModel):
    depends_on: DependsOn = Field(description="The job's upstreams (replaces them all).")


class DependencyOut(ApiModel):
    job_id: UUID
    on: DependencyRule
    name: str | None = Field(None, description="The job's display name (if it still exists).")


class JobDependenciesOut(ApiModel):
    job_id: UUID
    depends_on: list[DependencyOut] = Field(description="The jobs this one runs after.")
    dependents: list[DependencyOut] = Field(description="The jobs that run after this one.")


class GraphEdgeOut(ApiModel):
    upstream_id: UUID
    job_id: UUID
    on: DependencyRule

    @classmethod
    def of(cls, edge: Dependency) -> GraphEdgeOut:
        return cls(upstream_id=edge.upstream_id, job_id=edge.job_id, on=edge.rule)


class GraphNodeOut(ApiModel):
    job_id: UUID
    name: str | None = None
    level: int = Field(description="Its depth below the root (the longest path).")
    occurrence_id: UUID | None = Field(None, description="null: not resolved yet (pending).")
    status: int | None = Field(None, description="The occurrence's status code.")
    status_name: str = Field(description="Its status name, or Pending.")
    reason: str | None = Field(None, description="Why it ran or was skipped.")


class GraphRunOut(ApiModel):
    id: UUID
    root_job_id: UUID
    root_job_display_name: str | None = Field(
        None, description="The root job's display name; null when it was deleted."
    )
    root_occurrence_id: UUID
    status: GraphRunStatus
    created_at: datetime
    finished_at: datetime | None = None


class GraphRunDetail(GraphRunOut):
    nodes: list[GraphNodeOut]
    edges: list[GraphEdgeOut]


class GraphRunPage(ApiModel):
    items: list[GraphRunOut]
