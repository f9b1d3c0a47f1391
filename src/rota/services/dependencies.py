"""Job dependencies: setting a job's upstreams (checked: they exist, no cycle) and the engine
that runs graph runs (:mod:`rota.core.dependencies` holds the rules).

The engine hears of every applied status batch (:meth:`DependencyService.status_applied`,
from the status reactions of the tracker, the dead-letter handler and the zombie detector):
an occurrence of a job that takes part in a dependency is noted and the engine's loop kicked.
For each such occurrence it starts the graph run it roots (if it belongs to none and its job
has dependents) and resolves the run's jobs whose upstreams are all final: a Queued
occurrence (published by the dispatcher's pending sweep, which the engine wakes) or a
Skipped one with the reason. The store's key on (run, job) makes each creation happen once,
whichever server and however many times a final status is reported. A periodic sweep
resolves the running graph runs again and starts the runs whose start was lost (a server
that stopped between the status and its reaction), so nothing depends on the reaction."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from rota.core.dependencies import (
    MAX_UPSTREAMS,
    Dependency,
    DependencyRule,
    Graph,
    GraphRun,
    GraphRunStatus,
    find_cycle,
    resolve,
)
from rota.core.errors import BackendUnavailableError, NotFoundError, RotaError, ValidationError
from rota.core.ids import new_id
from rota.core.models import Job, Occurrence, OccurrenceStatus, SkipReason
from rota.core.planning import PlanSettings, new_occurrence, with_type_defaults
from rota.core.ports import DependencyStore, JobStore, Signals
from rota.core.records import StatusResult
from rota.core.security import AuditEntry
from rota.services._loop import run_periodically
from rota.services.events import EventPublisher

log = logging.getLogger(__name__)

FIELD = "dependsOn"
DEPENDENCIES_TOPIC = "dependencies"
"""What :meth:`DependencyService.edges_changed` announces to the other servers."""


class TypeDefaults(Protocol):
    """The part of the worker directory the engine uses (a job type's declared defaults)."""

    async def refresh(self, *, force: bool = False) -> None: ...

    def type_description(
        self, job_type: str, worker_id: str | None = None
    ) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class DependencyConfig:
    sweep_interval_seconds: float = 5.0
    """How often the running graph runs are resolved again, and lost starts caught up."""
    catch_up_seconds: float = 3600.0
    """How far back the sweep looks for occurrences of root jobs that started no run."""
    sweep_limit: int = 200
    keep_finished_seconds: float | None = None
    """How long a finished graph run is kept (``None``: for good); purged by the sweep."""
    purge_interval_seconds: float = 3600.0
    plan: PlanSettings = field(default_factory=PlanSettings)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDependencies:
    """A job's upstreams (with their rules) and its dependents."""

    job_id: UUID
    depends_on: list[Dependency]
    dependents: list[Dependency]


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphView:
    """A graph run as shown: the run, every job of it (resolved or not) by level, the
    edges between them, and the jobs' names."""

    run: GraphRun
    levels: dict[UUID, int]
    edges: list[Dependency]
    names: dict[UUID, str]


def parse_dependencies(job_id: UUID, raw: Sequence[Any]) -> list[Dependency]:
    """``[{"jobId": …, "on": "success"}, …]`` (or ``(job_id, rule)`` pairs) -> edges, checked
    for shape, self-dependency, duplicates and count (``ValidationError`` on ``dependsOn``)."""
    if len(raw) > MAX_UPSTREAMS:
        raise ValidationError(f"at most {MAX_UPSTREAMS} upstreams", field=FIELD)
    edges: list[Dependency] = []
    seen: set[UUID] = set()
    for i, item in enumerate(raw):
        where = f"{FIELD}[{i}]"
        if isinstance(item, Dependency):
            up, rule_raw = item.upstream_id, item.rule.value
        elif isinstance(item, Mapping):
            up, rule_raw = item.get("jobId", item.get("job_id")), item.get("on", "success")
        else:
            up, rule_raw = item, "success"
        try:
            upstream = up if isinstance(up, UUID) else UUID(str(up))
        except ValueError:
            raise ValidationError("jobId must be a job id (UUID)", field=where) from None
        try:
            rule = DependencyRule(str(rule_raw).lower())
        except ValueError:
            raise ValidationError(
                "on must be success, completion or failure", field=f"{where}.on"
            ) from None
        if upstream == job_id:
            raise ValidationError("a job cannot depend on itself", field=where)
        if upstream in seen:
            raise ValidationError(f"upstream {upstream} named twice", field=where)
        seen.add(upstream)
        edges.append(Dependency(job_id, upstream, rule))
    return edges


def upstream_refused(exc: NotFoundError, edges: Sequence[Dependency]) -> ValidationError | None:
    """The ``ValidationError`` on ``dependsOn[i].jobId`` for a store's ``NotFoundError``
    naming one of ``edges``' upstreams (one deleted meanwhile); ``None`` for another."""
    for i, edge in enumerate(edges):
        if exc.kind == "job" and exc.key == edge.upstream_id:
            return ValidationError(f"no job {edge.upstream_id}", field=f"{FIELD}[{i}].jobId")
    return None


async def refuse_cycle(store: DependencyStore, job_id: UUID, edges: Sequence[Dependency]) -> None:
    """``ValidationError`` on ``dependsOn`` if ``job_id`` with the upstreams ``edges`` would
    close a cycle (naming the jobs along it)."""
    cycle = find_cycle(await store.dependency_edges(), job_id, [e.upstream_id for e in edges])
    if cycle is not None:
        path = " -> ".join(str(j) for j in cycle)
        raise ValidationError(f"a cycle: {path}", field=FIELD)


class DependencyService:
    """Dependencies set and shown, and the engine of graph runs."""

    def __init__(
        self,
        store: DependencyStore,
        jobs: JobStore,
        signals: Signals,
        config: DependencyConfig | None = None,
        *,
        events: EventPublisher | None = None,
        workers: TypeDefaults | None = None,
        now: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._signals = signals
        self._config = config or DependencyConfig()
        self._events = events
        self._workers = workers
        self._now = now
        self._involved: frozenset[UUID] = frozenset()
        """Jobs with an upstream or a dependent (the status batches worth a look)."""
        self._roots: frozenset[UUID] = frozenset()
        """Jobs with dependents."""
        self._pending: dict[UUID, UUID] = {}
        """Occurrence id -> job id, heard of and not yet looked at."""
        self._kick = asyncio.Event()
        self._stale = False
        """Another server changed the edges: read them again before the next look."""
        self._stopping = asyncio.Event()
        self._last_sweep = 0.0
        self._last_purge = 0.0
        self.created = 0
        self.skipped = 0

    # --- dependencies of a job ------------------------------------------------------------

    async def set_dependencies(
        self, job_id: UUID, raw: Sequence[Any], *, actor: str | None = None
    ) -> JobDependencies:
        """Replace ``job_id``'s upstreams: ``ValidationError`` on ``dependsOn`` for an unknown
        upstream, itself, or a cycle (naming the jobs along it). With an ``actor``, the
        change's audit entry (``job.dependencies``, the upstreams before and after) is written
        in the same transaction."""
        edges = parse_dependencies(job_id, raw)
        await self._jobs.get_job(job_id)
        for i, edge in enumerate(edges):
            try:
                await self._jobs.get_job(edge.upstream_id)
            except NotFoundError:
                raise ValidationError(
                    f"no job {edge.upstream_id}", field=f"{FIELD}[{i}].jobId"
                ) from None
        await refuse_cycle(self._store, job_id, edges)
        now = self._now()
        audit = []
        if actor is not None:
            before = await self.dependencies(job_id)
            audit.append(
                AuditEntry(
                    id=new_id(),
                    at=now,
                    actor=actor,
                    action="job.dependencies",
                    resource_type="job",
                    resource_id=str(job_id),
                    before={"dependsOn": _upstreams(before.depends_on)},
                    after={"dependsOn": _upstreams(edges)},
                )
            )
        try:
            await self._store.set_dependencies(job_id, edges, now, audit=audit)
        except NotFoundError as exc:  # an upstream deleted meanwhile
            raise (upstream_refused(exc, edges) or exc) from None
        await self.edges_changed()
        return await self.dependencies(job_id)

    async def dependencies(self, job_id: UUID) -> JobDependencies:
        edges = await self._store.dependency_edges([job_id])
        return JobDependencies(
            job_id=job_id,
            depends_on=[e for e in edges if e.job_id == job_id],
            dependents=[e for e in edges if e.upstream_id == job_id],
        )

    async def graph_view(self, run_id: UUID) -> GraphView:
        run = await self._store.get_graph_run(run_id)
        graph = Graph(await self._store.dependency_edges())
        levels = graph.levels(run.root_job_id)
        for node in run.nodes:  # a job since removed from the graph still shows
            levels.setdefault(node.job_id, max(levels.values(), default=0) + 1)
        edges = [
            e for job in levels for e in graph.upstreams.get(job, ()) if e.upstream_id in levels
        ]
        return GraphView(run=run, levels=levels, edges=edges, names=await self._names(levels))

    async def job_exists(self, job_id: UUID) -> None:
        """``NotFoundError`` if there is no such job."""
        await self._jobs.get_job(job_id)

    async def names_of(self, job_ids: Sequence[UUID]) -> dict[UUID, str]:
        return await self._names(job_ids)

    async def list_graph_runs(
        self, *, job_id: UUID | None = None, running: bool | None = None, limit: int = 50
    ) -> list[GraphRun]:
        return await self._store.list_graph_runs(job_id=job_id, running=running, limit=limit)

    async def graph_run_of(self, occurrence_id: UUID) -> UUID | None:
        return (await self._store.graph_runs_of([occurrence_id])).get(occurrence_id)

    async def _names(self, job_ids: Sequence[UUID] | Mapping[UUID, Any]) -> dict[UUID, str]:
        return {job_id: _name(job) for job_id, job in (await self._read_jobs(job_ids)).items()}

    async def _read_jobs(self, job_ids: Sequence[UUID] | Mapping[UUID, Any]) -> dict[UUID, Job]:
        """The jobs that exist among ``job_ids`` (a graph is small: one read each)."""
        found: dict[UUID, Job] = {}
        for job_id in job_ids:
            try:
                found[job_id] = await self._jobs.get_job(job_id)
            except NotFoundError:
                continue
        return found

    # --- the engine -----------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read which jobs take part in a dependency (the batches worth a look)."""
        edges = await self._store.dependency_edges()
        self._roots = frozenset(e.upstream_id for e in edges)
        self._involved = self._roots | frozenset(e.job_id for e in edges)

    async def edges_changed(self) -> None:
        """The edges were changed through this server: read them again, and tell the other
        servers to (:meth:`heard_change`), so that a graph run started on any of them at once
        has every level released at once. If they cannot be told, their sweep reads them."""
        await self.refresh()
        try:
            await self._signals.announce(DEPENDENCIES_TOPIC)
        except BackendUnavailableError as exc:
            log.warning("other servers not told of changed job dependencies: %s", exc)

    def heard_change(self) -> None:
        """Another server changed the edges: they are read again before the next look."""
        self._stale = True
        self._kick.set()

    def status_applied(self, result: StatusResult) -> None:
        """The status reactions' hook: note the occurrences of involved jobs (of every job
        while the edges are being read again after another server changed them); never
        blocks."""
        involved, stale = self._involved, self._stale
        if not involved and not stale:
            return
        noted = False
        for change in result.applied:
            if stale or change.job_id in involved:
                self._pending[change.occurrence_id] = change.job_id
                noted = True
        if noted:
            self._kick.set()

    async def run(self) -> None:
        """The engine's loop, until :meth:`stop`."""
        self._stopping.clear()
        await run_periodically(
            "dependency engine",
            self.step,
            self._config.sweep_interval_seconds,
            self._stopping,
            self._kick,
            log=log,
            expected=(RotaError, OSError),
        )

    def stop(self) -> None:
        self._stopping.set()

    async def step(self) -> None:
        """Look at the occurrences heard of; sweep when the interval has passed."""
        if self._stale:
            try:
                await self.refresh()
            except BaseException:
                self._kick.set()  # read again on the next pass
                raise
            self._stale = False
            involved = self._involved  # what was noted meanwhile, cut down to what counts
            self._pending = {o: j for o, j in self._pending.items() if j in involved}
        if time.monotonic() - self._last_sweep >= self._config.sweep_interval_seconds:
            await self.sweep()
        pending, self._pending = self._pending, {}
        try:
            await self.advance(pending)
        except BaseException:
            self._pending.update(pending)  # looked at again on the next pass
            raise

    async def advance(self, occurrences: Mapping[UUID, UUID]) -> None:
        """Start the runs these occurrences (id -> job id) root and resolve their runs."""
        if not occurrences:
            return
        runs = await self._store.graph_runs_of(list(occurrences))
        todo = set(runs.values())
        for occurrence_id, job_id in occurrences.items():
            if occurrence_id not in runs and job_id in self._roots:
                started = await self._store.start_graph_run(
                    new_id(), occurrence_id, job_id, self._now()
                )
                todo.add(started)
        for run_id in sorted(todo):
            await self.resolve_run(run_id)

    async def sweep(self) -> None:
        """Resolve every running graph run; start those whose start was lost."""
        self._last_sweep = time.monotonic()
        await self.refresh()
        since = self._now() - timedelta(seconds=self._config.catch_up_seconds)
        lost = await self._store.unrooted_occurrences(since, self._config.sweep_limit)
        for occurrence in lost:
            await self._store.start_graph_run(
                new_id(), occurrence.id, occurrence.job_id, self._now()
            )
        running = await self._store.list_graph_runs(running=True, limit=self._config.sweep_limit)
        for run in running:
            await self.resolve_run(run.id)
        keep = self._config.keep_finished_seconds
        if keep is not None and (
            time.monotonic() - self._last_purge >= self._config.purge_interval_seconds
        ):
            self._last_purge = time.monotonic()
            before = self._now() - timedelta(seconds=keep)
            while await self._store.purge_graph_runs(before, 1000) == 1000:
                pass

    async def resolve_run(self, run_id: UUID) -> None:
        """Resolve the jobs of ``run_id`` whose upstreams are all final (see the module),
        again while a pass records skips (a disabled job's skip resolves its dependents)."""
        for _ in range(1000):
            if not await self._resolve_once(run_id):
                return

    async def _resolve_once(self, run_id: UUID) -> bool:
        run = await self._store.get_graph_run(run_id)
        if run.status is GraphRunStatus.FINISHED:
            return False
        graph = Graph(await self._store.dependency_edges())
        statuses = {n.job_id: n.status for n in run.nodes}
        jobs = await self._read_jobs(graph.downstream(run.root_job_id))
        names = {job_id: _name(job) for job_id, job in jobs.items()}
        decisions = resolve(run.root_job_id, graph, statuses, names)
        now = self._now()
        created: list[Occurrence] = []
        for job_id, reason in decisions.run:
            job = jobs.get(job_id)
            if job is None:
                continue
            if not job.is_active:
                created.append(self._skipped(job, now, "job is disabled"))
                continue
            occurrence = new_occurrence(
                await self._with_defaults(job),
                now,
                now,
                self._config.plan,
                trigger_reason=f"{reason} (graph run {run_id})",
            )
            created.append(occurrence)
        for job_id, reason in decisions.skip:
            job = jobs.get(job_id)
            if job is not None:
                created.append(self._skipped(job, now, reason))
        if created:
            inserted = set(await self._store.add_graph_nodes(run_id, created))
            new = [o for o in created if o.id in inserted]
            self.created += sum(1 for o in new if o.status is OccurrenceStatus.QUEUED)
            self.skipped += sum(1 for o in new if o.status is OccurrenceStatus.SKIPPED)
            if self._events is not None and new:
                self._events.occurrences_created(new)
            if any(o.status is OccurrenceStatus.QUEUED for o in new):
                try:
                    await self._signals.wake(now.timestamp())
                except BackendUnavailableError as exc:  # the sweep publishes them anyway
                    log.debug("wake-up not sent: %s", exc)
            return any(o.status is OccurrenceStatus.SKIPPED for o in new)
        if decisions.finished:  # every job resolved and final
            await self._store.finish_graph_run(run_id, now)
        return False

    def _skipped(self, job: Job, now: datetime, reason: str) -> Occurrence:
        return new_occurrence(
            job, now, now, self._config.plan, skip_reason=SkipReason.UPSTREAM, trigger_reason=reason
        )

    async def _with_defaults(self, job: Job) -> Job:
        if self._workers is None:
            return job
        try:
            await self._workers.refresh()
        except BackendUnavailableError:
            return job
        return with_type_defaults(job, self._workers.type_description(job.job_type, job.worker_id))


def _upstreams(edges: Sequence[Dependency]) -> list[dict[str, str]]:
    """Upstreams as an audit entry shows them (as the API writes ``dependsOn``)."""
    return [{"jobId": str(e.upstream_id), "on": e.rule.value} for e in edges]


def _name(job: Job) -> str:
    return job.display_name or job.job_type
