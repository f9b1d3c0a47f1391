"""The SQL store's job dependencies and graph runs (:class:`~rota.core.ports.DependencyStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import delete, exists, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.dependencies import Dependency, DependencyRule, GraphNode, GraphRun, GraphRunStatus
from rota.core.errors import NotFoundError
from rota.core.models import ConcurrencyPolicy, Occurrence, OccurrenceStatus
from rota.core.security import AuditEntry
from rota.stores.schema import (
    graph_run_nodes,
    graph_runs,
    job_dependencies,
    jobs,
    occurrences,
)
from rota.stores.sql.aggregates import AggregateQueries, StatDeltas
from rota.stores.sql.rows import _chunks, _occurrence_row, _to_occurrence
from rota.stores.sql.security import insert_audit

_d = job_dependencies.c
_r = graph_runs.c
_n = graph_run_nodes.c


def _run(row: Any, nodes: tuple[GraphNode, ...] = ()) -> GraphRun:
    return GraphRun(
        id=row.id,
        root_job_id=row.root_job_id,
        root_occurrence_id=row.root_occurrence_id,
        status=GraphRunStatus(row.status),
        created_at=row.created_at,
        finished_at=row.finished_at,
        nodes=nodes,
    )


async def write_edges(
    conn: AsyncConnection,
    dialect: str,
    job_id: UUID,
    edges: Sequence[Dependency],
    at: datetime,
    *,
    replace: bool,
) -> None:
    """Give ``job_id`` the upstreams ``edges`` in the caller's transaction (``replace``: in
    place of those it has). Every upstream must exist: a missing one (deleted meanwhile) is a
    ``NotFoundError`` naming it. On PostgreSQL the upstreams found are locked (``FOR KEY
    SHARE``) until the commit, so none is deleted between this look and the edge's insert;
    SQLite's one writer serializes the same."""
    upstreams = [e.upstream_id for e in edges]
    if upstreams:
        stmt = select(jobs.c.id).where(jobs.c.id.in_(upstreams))
        if dialect == "postgresql":
            stmt = stmt.with_for_update(key_share=True)
        found = set((await conn.execute(stmt)).scalars())
        for upstream in upstreams:
            if upstream not in found:
                raise NotFoundError("job", upstream)
    if replace:
        await conn.execute(delete(job_dependencies).where(_d.job_id == job_id))
    rows = [
        {"job_id": job_id, "upstream_id": e.upstream_id, "rule": e.rule.value, "created_at": at}
        for e in edges
    ]
    if rows:
        await conn.execute(insert(job_dependencies), rows)


class DependencyQueries(AggregateQueries):
    """The :class:`~rota.core.ports.DependencyStore` slice of the store."""

    def _insert(self, table: Any) -> Any:
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        return dialect.insert(table)

    async def set_dependencies(
        self,
        job_id: UUID,
        edges: Sequence[Dependency],
        at: datetime,
        *,
        audit: Sequence[AuditEntry] = (),
    ) -> None:
        async with self._write() as conn:
            found = (await conn.execute(select(jobs.c.id).where(jobs.c.id == job_id))).first()
            if found is None:
                raise NotFoundError("job", job_id)
            await write_edges(conn, self._dialect, job_id, edges, at, replace=True)
            await insert_audit(conn, audit)

    async def dependency_edges(self, job_ids: Sequence[UUID] | None = None) -> list[Dependency]:
        stmt = select(_d.job_id, _d.upstream_id, _d.rule).order_by(_d.job_id, _d.upstream_id)
        if job_ids is not None:
            ids = list(job_ids)
            if not ids:
                return []
            stmt = stmt.where(or_(_d.job_id.in_(ids), _d.upstream_id.in_(ids)))
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Dependency(r.job_id, r.upstream_id, DependencyRule(r.rule)) for r in rows]

    async def start_graph_run(
        self, run_id: UUID, occurrence_id: UUID, job_id: UUID, at: datetime
    ) -> UUID:
        async with self._write() as conn:
            found = (
                await conn.execute(select(_n.run_id).where(_n.occurrence_id == occurrence_id))
            ).first()
            if found is not None:
                return found.run_id  # type: ignore[no-any-return]
            stmt = self._insert(graph_runs).values(
                id=run_id,
                root_job_id=job_id,
                root_occurrence_id=occurrence_id,
                status=GraphRunStatus.RUNNING.value,
                created_at=at,
            )
            stmt = stmt.on_conflict_do_nothing(index_elements=[_r.root_occurrence_id])
            inserted = (await conn.execute(stmt.returning(_r.id))).first()
            if inserted is None:  # another server started it meanwhile
                row = (
                    await conn.execute(select(_r.id).where(_r.root_occurrence_id == occurrence_id))
                ).one()
                return row.id  # type: ignore[no-any-return]
            await conn.execute(
                insert(graph_run_nodes).values(
                    run_id=run_id, job_id=job_id, occurrence_id=occurrence_id, created_at=at
                )
            )
        return run_id

    async def add_graph_nodes(self, run_id: UUID, occurrences_: Sequence[Occurrence]) -> list[UUID]:
        if not occurrences_:
            return []
        by_job = {o.job_id: o for o in occurrences_}
        rows = [
            {
                "run_id": run_id,
                "job_id": o.job_id,
                "occurrence_id": o.id,
                "reason": o.trigger_reason,
                "created_at": o.created_at,
            }
            for o in by_job.values()
        ]
        async with self._write() as conn:
            stmt = self._insert(graph_run_nodes).values(rows)
            stmt = stmt.on_conflict_do_nothing(index_elements=[_n.run_id, _n.job_id])
            taken = {r.job_id for r in (await conn.execute(stmt.returning(_n.job_id))).all()}
            if not taken:
                return []
            new = [o for o in by_job.values() if o.job_id in taken]
            policies = {
                r.id: ConcurrencyPolicy(r.concurrency_policy)
                for r in (
                    await conn.execute(
                        select(jobs.c.id, jobs.c.concurrency_policy).where(jobs.c.id.in_(taken))
                    )
                ).all()
            }
            inserted = [
                _occurrence_row(o, policies.get(o.job_id, ConcurrencyPolicy.ALLOW_ALL)) for o in new
            ]
            await conn.execute(insert(occurrences), self._seal_rows(inserted))
            deltas = StatDeltas()
            deltas.add_rows(inserted)
            await self._write_aggregates(conn, deltas)
        return [o.id for o in new]

    async def graph_runs_of(self, occurrence_ids: Sequence[UUID]) -> dict[UUID, UUID]:
        ids = list(occurrence_ids)
        if not ids:
            return {}
        found: dict[UUID, UUID] = {}
        async with self._read() as conn:
            for start in range(0, len(ids), 500):
                stmt = select(_n.occurrence_id, _n.run_id).where(
                    _n.occurrence_id.in_(ids[start : start + 500])
                )
                found.update({r.occurrence_id: r.run_id for r in (await conn.execute(stmt))})
        return found

    async def get_graph_run(self, run_id: UUID) -> GraphRun:
        async with self._read() as conn:
            row = (await conn.execute(select(graph_runs).where(_r.id == run_id))).first()
            if row is None:
                raise NotFoundError("graph run", run_id)
            stmt = (
                select(_n.job_id, _n.occurrence_id, _n.reason, _n.created_at, occurrences.c.status)
                .select_from(
                    graph_run_nodes.outerjoin(occurrences, occurrences.c.id == _n.occurrence_id)
                )
                .where(_n.run_id == run_id)
                .order_by(_n.created_at, _n.job_id)
            )
            nodes = tuple(
                GraphNode(
                    job_id=n.job_id,
                    occurrence_id=n.occurrence_id,
                    # An occurrence purged by retention ended long ago: count it as ended.
                    status=OccurrenceStatus.COMPLETED
                    if n.status is None
                    else OccurrenceStatus(n.status),
                    reason=n.reason,
                    created_at=n.created_at,
                )
                for n in (await conn.execute(stmt)).all()
            )
        return _run(row, nodes)

    async def list_graph_runs(
        self, *, job_id: UUID | None = None, running: bool | None = None, limit: int = 50
    ) -> list[GraphRun]:
        stmt = select(graph_runs).order_by(_r.created_at.desc(), _r.id.desc()).limit(limit)
        if job_id is not None:
            stmt = stmt.where(_r.root_job_id == job_id)
        if running is not None:
            status = GraphRunStatus.RUNNING if running else GraphRunStatus.FINISHED
            stmt = stmt.where(_r.status == status.value)
        async with self._read() as conn:
            return [_run(r) for r in (await conn.execute(stmt)).all()]

    async def finish_graph_run(self, run_id: UUID, at: datetime) -> None:
        stmt = (
            update(graph_runs)
            .where(_r.id == run_id, _r.status == GraphRunStatus.RUNNING.value)
            .values(status=GraphRunStatus.FINISHED.value, finished_at=at)
        )
        async with self._write() as conn:
            await conn.execute(stmt)

    async def purge_graph_runs(self, before: datetime, limit: int) -> int:
        ids = (
            select(_r.id)
            .where(_r.status == GraphRunStatus.FINISHED.value, _r.finished_at < before)
            .limit(limit)
        )
        async with self._write() as conn:
            doomed = [r.id for r in (await conn.execute(ids)).all()]
            if not doomed:
                return 0
            await conn.execute(delete(graph_run_nodes).where(_n.run_id.in_(doomed)))
            await conn.execute(delete(graph_runs).where(_r.id.in_(doomed)))
        return len(doomed)

    async def unrooted_occurrences(self, since: datetime, limit: int) -> list[Occurrence]:
        occ = occurrences
        # A job's runs from before it had a dependent start no run (they were no root).
        first_edge = (
            select(func.min(_d.created_at)).where(_d.upstream_id == occ.c.job_id).scalar_subquery()
        )
        found: list[Occurrence] = []
        async with self._read() as conn:
            # The root jobs first (a small table): the occurrences are then read by job, from
            # the (job_id, id) index. Asked as a subquery, the planner may scan every
            # occurrence, and does when it believes the dependencies many (an empty table
            # never analyzed): a full scan on each sweep whether a dependency exists or not.
            roots = list((await conn.execute(select(_d.upstream_id).distinct())).scalars())
            for chunk in _chunks(sorted(roots)):
                stmt = (
                    select(occ)
                    .where(
                        self._member(occ.c.job_id, chunk),
                        occ.c.created_at >= since,
                        occ.c.created_at >= first_edge,
                        occ.c.status != int(OccurrenceStatus.SKIPPED),
                        ~exists().where(_n.occurrence_id == occ.c.id),
                    )
                    .order_by(occ.c.created_at)
                    .limit(max(0, limit))
                )
                found += [
                    self._open_occurrence(_to_occurrence(r))
                    for r in (await conn.execute(stmt)).all()
                ]
        found.sort(key=lambda o: o.created_at)
        return found[: max(0, limit)]
