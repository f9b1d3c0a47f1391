"""Job dependencies: the rules of a graph run, pure (no I/O).

A job may run after others (its *upstreams*), each with a rule (:class:`DependencyRule`). A
*graph run* starts when an occurrence of a job that has dependents (its *root*) is reported
on; it covers the root and every job downstream of it. Once every upstream (within the run)
of a dependent has reached a final status, the dependent is resolved: all rules satisfied, it
runs (a Queued occurrence); any not, it is recorded Skipped with the reason, and that Skipped
resolves its own dependents in turn. Only final statuses count: a failure that will be
retried is not final, a dead-lettered one (Failed, TimedOut) is.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final
from uuid import UUID

from rota.core.models import OccurrenceStatus

S = OccurrenceStatus

MAX_UPSTREAMS: Final = 20
"""The most upstreams one job may name."""

FINAL_STATUSES: Final = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.SKIPPED})
"""The statuses an occurrence ends in (Unknown is not one: a zombie is requeued or failed)."""

FAILURE_STATUSES: Final = frozenset({S.FAILED, S.TIMED_OUT})


class DependencyRule(enum.StrEnum):
    """When a dependent may run, given its upstream's final status."""

    SUCCESS = "success"
    """The upstream Completed."""
    COMPLETION = "completion"
    """The upstream ended, whatever its status (Completed, Failed, TimedOut, Cancelled,
    Skipped)."""
    FAILURE = "failure"
    """The upstream failed finally (Failed or TimedOut, retries exhausted: dead-lettered)."""

    def satisfied_by(self, status: OccurrenceStatus) -> bool:
        if self is DependencyRule.SUCCESS:
            return status is S.COMPLETED
        if self is DependencyRule.FAILURE:
            return status in FAILURE_STATUSES
        return status in FINAL_STATUSES


class GraphRunStatus(enum.StrEnum):
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class Dependency:
    """One edge: ``job_id`` runs after ``upstream_id`` by ``rule``."""

    job_id: UUID
    upstream_id: UUID
    rule: DependencyRule = DependencyRule.SUCCESS


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphNode:
    """A job resolved in a graph run: its occurrence (Queued then onwards, or Skipped)."""

    job_id: UUID
    occurrence_id: UUID
    status: OccurrenceStatus
    reason: str | None = None
    """Why it runs or was skipped (``None`` for the root)."""
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphRun:
    """One run of a dependency graph: its root occurrence and the occurrences created for
    it, one per job at most."""

    id: UUID
    root_job_id: UUID
    root_occurrence_id: UUID
    status: GraphRunStatus
    created_at: datetime
    finished_at: datetime | None = None
    nodes: tuple[GraphNode, ...] = ()

    def node(self, job_id: UUID) -> GraphNode | None:
        return next((n for n in self.nodes if n.job_id == job_id), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decisions:
    """What :func:`resolve` decided for the jobs of a run not resolved yet."""

    run: list[tuple[UUID, str]] = field(default_factory=list)
    """Jobs to run now, each with the reason (the upstreams that let it)."""
    skip: list[tuple[UUID, str]] = field(default_factory=list)
    """Jobs to record Skipped, each with the reason naming the upstream and its status."""
    finished: bool = False
    """Every job of the run is resolved and final, counting these skips."""


class Graph:
    """The dependency edges, by dependent and by upstream."""

    def __init__(self, edges: Iterable[Dependency]) -> None:
        self.upstreams: dict[UUID, list[Dependency]] = {}
        self.dependents: dict[UUID, list[Dependency]] = {}
        for edge in edges:
            self.upstreams.setdefault(edge.job_id, []).append(edge)
            self.dependents.setdefault(edge.upstream_id, []).append(edge)

    def downstream(self, root: UUID) -> list[UUID]:
        """``root`` and every job reachable from it along the edges, by levels (breadth
        first: an upstream comes before its dependents within one level's order)."""
        order = [root]
        seen = {root}
        for job in order:
            for edge in self.dependents.get(job, ()):
                if edge.job_id not in seen:
                    seen.add(edge.job_id)
                    order.append(edge.job_id)
        return order

    def levels(self, root: UUID) -> dict[UUID, int]:
        """Each job downstream of ``root`` and its level: the longest path from the root (so
        a fan-in sits below all of its upstreams)."""
        reach = set(self.downstream(root))
        level = {root: 0}
        for _ in range(len(reach)):
            changed = False
            for job in reach:
                for edge in self.upstreams.get(job, ()):
                    if edge.upstream_id in level and edge.upstream_id in reach:
                        want = level[edge.upstream_id] + 1
                        if level.get(job, -1) < want:
                            level[job] = want
                            changed = True
            if not changed:
                break
        return level


def find_cycle(
    edges: Iterable[Dependency], job_id: UUID, upstreams: Sequence[UUID]
) -> list[UUID] | None:
    """The cycle ``job_id`` would close if its upstreams were ``upstreams`` (its other edges
    as in ``edges``), as the job ids along it from ``job_id`` back to it; ``None`` if none."""
    graph = Graph(e for e in edges if e.job_id != job_id)
    # Walk up from each new upstream: reaching job_id means job_id is upstream of itself.
    parent: dict[UUID, UUID] = {}
    stack = list(upstreams)
    for up in upstreams:
        parent.setdefault(up, job_id)
    seen: set[UUID] = set()
    while stack:
        current = stack.pop()
        if current == job_id:
            chain = []
            step = parent[job_id]
            while step != job_id:
                chain.append(step)
                step = parent[step]
            return [job_id, *reversed(chain), job_id]
        if current in seen:
            continue
        seen.add(current)
        for edge in graph.upstreams.get(current, ()):
            if edge.upstream_id not in seen:
                parent.setdefault(edge.upstream_id, current)
                stack.append(edge.upstream_id)
    return None


def describe(name: str, status: OccurrenceStatus) -> str:
    return f"{name} {status.name.replace('_', '').title().replace('Timedout', 'TimedOut')}"


def resolve(
    root: UUID,
    graph: Graph,
    nodes: Mapping[UUID, OccurrenceStatus],
    names: Mapping[UUID, str] | None = None,
) -> Decisions:
    """Decide the jobs of the run rooted at ``root`` whose upstreams (within the run) are all
    final, given the statuses of the jobs resolved so far (``nodes``, the root among them).
    A job to skip counts as Skipped for its own dependents at once (the propagation)."""
    names = names or {}
    statuses = dict(nodes)
    order = graph.downstream(root)
    reach = set(order)
    decisions = Decisions()
    progress = True
    while progress:
        progress = False
        for job in order:
            if job in statuses:
                continue
            ups = [e for e in graph.upstreams.get(job, ()) if e.upstream_id in reach]
            if not ups or not all(statuses.get(e.upstream_id) in FINAL_STATUSES for e in ups):
                continue
            unmet = [e for e in ups if not e.rule.satisfied_by(statuses[e.upstream_id])]
            if unmet:
                edge = unmet[0]
                name = names.get(edge.upstream_id, str(edge.upstream_id))
                status = statuses[edge.upstream_id]
                reason = f"upstream {describe(name, status)}; needs {edge.rule.value}"
                decisions.skip.append((job, reason))
                statuses[job] = S.SKIPPED
                progress = True
            else:
                after = ", ".join(
                    describe(names.get(e.upstream_id, str(e.upstream_id)), statuses[e.upstream_id])
                    for e in ups
                )
                decisions.run.append((job, f"after {after}"))
                statuses[job] = S.QUEUED
    return Decisions(
        run=decisions.run,
        skip=decisions.skip,
        finished=all(statuses.get(job) in FINAL_STATUSES for job in order),
    )
