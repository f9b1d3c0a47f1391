"""The store's slice for job dependencies: the edges between jobs and the graph runs
(:mod:`rota.core.dependencies`, :mod:`rota.services.dependencies`), and jobs written with their
edges and their audit entry in one transaction."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from rota.core.dependencies import Dependency, GraphRun
from rota.core.models import Job, Occurrence
from rota.core.ports.apikeys import ApiKeyStore
from rota.core.ports.lookup import IdLookup
from rota.core.ports.routing import RoutedDispatchStore
from rota.core.ports.sessions import AccountStore
from rota.core.ports.store import Store
from rota.core.security import AuditEntry


class DependencyStore(abc.ABC):
    """Dependencies (``job_id`` runs after ``upstream_id``) and graph runs: one record per
    run of a graph, linking its occurrences (at most one per job: a unique key on the run and
    the job makes a dependent's creation happen once, however many servers resolve it)."""

    @abc.abstractmethod
    async def set_dependencies(
        self,
        job_id: UUID,
        edges: Sequence[Dependency],
        at: datetime,
        *,
        audit: Sequence[AuditEntry] = (),
    ) -> None:
        """Replace the upstreams of ``job_id`` with ``edges`` (their ``job_id`` is
        ``job_id``; they exist from ``at``) and write the ``audit`` entries, in one
        transaction. The service has checked them (upstreams exist, no cycle). Deleting a
        job deletes its edges, both ways."""

    @abc.abstractmethod
    async def create_linked_jobs(
        self, jobs: Sequence[Job], edges: Sequence[Dependency], audit: Sequence[AuditEntry]
    ) -> None:
        """Insert ``jobs`` (as :meth:`~rota.core.ports.JobStore.create_jobs` does), the
        dependency ``edges`` of those new jobs, and the ``audit`` entries, in one transaction:
        all or nothing. An upstream that does not exist as the transaction runs (deleted
        meanwhile) raises ``NotFoundError("job", upstream_id)`` and nothing is written; an
        upstream seen there cannot be deleted before the commit."""

    @abc.abstractmethod
    async def update_linked_job(
        self,
        job: Job,
        *,
        expected_version: int,
        with_state: bool = False,
        edges: Sequence[Dependency] | None,
        audit: Sequence[AuditEntry],
    ) -> Job:
        """:meth:`~rota.core.ports.JobStore.update_job`, with the job's upstreams replaced by
        ``edges`` (``None``: left as they are; checked as :meth:`create_linked_jobs` checks
        them; the service has checked them for cycles) and the ``audit`` entries written, in
        the same transaction: a refused change writes none of them."""

    @abc.abstractmethod
    async def dependency_edges(self, job_ids: Sequence[UUID] | None = None) -> list[Dependency]:
        """The edges touching ``job_ids`` (as dependent or as upstream), or every edge
        (``None``), in (job, upstream) order."""

    @abc.abstractmethod
    async def start_graph_run(
        self, run_id: UUID, occurrence_id: UUID, job_id: UUID, at: datetime
    ) -> UUID:
        """The graph run rooted at occurrence ``occurrence_id`` (of ``job_id``): created (id
        ``run_id``, the root its first node) unless one is already rooted there or the
        occurrence is a node of another run; returns the id of the run it belongs to."""

    @abc.abstractmethod
    async def add_graph_nodes(self, run_id: UUID, occurrences: Sequence[Occurrence]) -> list[UUID]:
        """Insert ``occurrences`` (Queued or Skipped, with their creation status change) as
        nodes of ``run_id``, in one transaction, each only if the run has no node of its job
        yet. Returns the ids of those inserted (the others were there already)."""

    @abc.abstractmethod
    async def graph_runs_of(self, occurrence_ids: Sequence[UUID]) -> dict[UUID, UUID]:
        """The graph run of each of these occurrences that is a node of one."""

    @abc.abstractmethod
    async def get_graph_run(self, run_id: UUID) -> GraphRun:
        """The run with its nodes (each with its occurrence's current status), oldest node
        first; ``NotFoundError`` if there is none."""

    @abc.abstractmethod
    async def list_graph_runs(
        self, *, job_id: UUID | None = None, running: bool | None = None, limit: int = 50
    ) -> list[GraphRun]:
        """Runs newest first, without their nodes: those rooted at ``job_id`` (if given),
        only running ones or only finished ones (``running``), at most ``limit``."""

    @abc.abstractmethod
    async def finish_graph_run(self, run_id: UUID, at: datetime) -> None:
        """Mark the run finished at ``at`` (every job of it resolved and final)."""

    @abc.abstractmethod
    async def purge_graph_runs(self, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` finished graph runs (with their nodes; the occurrences
        stay, under their own retention) that finished before ``before``; how many."""

    @abc.abstractmethod
    async def unrooted_occurrences(self, since: datetime, limit: int) -> list[Occurrence]:
        """Occurrences of jobs with dependents, created since ``since`` and since the job's
        first dependent was added, not Skipped, that belong to no graph run (the sweep's
        catch-up of runs whose start was lost), oldest first."""


class DependencyAwareStore(
    Store, DependencyStore, RoutedDispatchStore, AccountStore, ApiKeyStore, IdLookup, abc.ABC
):
    """The store with its dependency, routing, account, key and look-up slices: what a store
    adapter implements (kept apart from :class:`~rota.core.ports.Store`, whose module is at
    its length cap)."""
