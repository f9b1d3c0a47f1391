"""The SQL store's jobs: create, read, list, update (versioned), delete, and the auto-disable
probes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    bindparam,
    case,
    delete,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.autodisable import AutoDisableDefaults, probe_due
from rota.core.dependencies import Dependency
from rota.core.errors import ConflictError, NotFoundError
from rota.core.models import Job, JobSource, JobVersion, utcnow
from rota.core.records import JobQuery, Page, ProbeScan
from rota.core.security import AuditEntry
from rota.stores.schema import job_tags, job_versions, jobs
from rota.stores.sql import filters
from rota.stores.sql.aggregates import AggregateQueries, StatDeltas
from rota.stores.sql.batches import copy_records
from rota.stores.sql.dependencies import write_edges
from rota.stores.sql.engine import _json_dumps
from rota.stores.sql.jobstats import with_run_stats
from rota.stores.sql.rows import (
    JOB_COLUMNS,
    _auto_disable_state,
    _copy_record,
    _decode_cursor,
    _job_definition,
    _job_row,
    _page,
    _snapshot,
    _sqlite_record,
    _to_job,
)
from rota.stores.sql.search import postgresql_search, sqlite_search
from rota.stores.sql.security import insert_audit
from rota.stores.sql.statements import _insert_stmt

_JOB_DATA_AT = JOB_COLUMNS.index("job_data")
"""Where a new job's record holds its job data."""


class JobQueries(AggregateQueries):
    """Jobs, versions and auto-disable probes of the :class:`~rota.core.ports.Store` port."""

    # --- jobs -----------------------------------------------------------------------------

    async def create_jobs(self, jobs_: Sequence[Job]) -> None:
        if not jobs_:
            return
        async with self._write() as conn:
            await self._insert_jobs(conn, jobs_)

    async def create_linked_jobs(
        self, jobs_: Sequence[Job], edges: Sequence[Dependency], audit: Sequence[AuditEntry]
    ) -> None:
        """The :class:`~rota.core.ports.DependencyStore` slice's create: the jobs, their
        upstreams and their audit entries in one transaction."""
        if not jobs_:
            return
        async with self._write() as conn:
            await self._insert_jobs(conn, jobs_)
            at = jobs_[0].created_at
            for job_id, linked in _by_job(edges).items():
                await write_edges(conn, self._dialect, job_id, linked, at, replace=False)
            await insert_audit(conn, self._sealed_audit(audit))

    async def _insert_jobs(self, conn: AsyncConnection, jobs_: Sequence[Job]) -> None:
        postgresql = self._dialect == "postgresql"  # its shared values as NULL (0024)
        tags = self._tag_rows(jobs_)
        if len(jobs_) == 1:
            row = _job_row(jobs_[0], compact=postgresql)
            row["job_data"] = self._sealed_job_data(jobs_[0].id, row["job_data"])
            await conn.execute(insert(jobs), [row])
        elif postgresql:  # a bulk create: COPY, the only write here
            records = self._sealed_records(jobs_, [_copy_record(j) for j in jobs_])
            await copy_records(conn, jobs, records)
        else:  # a bulk create: driver-level parameters, one executemany
            await self._fast.execute_records(
                conn,
                "insert_jobs",
                partial(_insert_stmt, jobs),
                JOB_COLUMNS,
                self._sealed_records(jobs_, [_sqlite_record(j) for j in jobs_]),
            )
        if tags:
            await self._fast.execute(conn, "insert_job_tags", partial(_insert_stmt, job_tags), tags)
        added = StatDeltas.of_jobs((j.job_type, j.is_active, j.tags) for j in jobs_)
        await self._write_aggregates(conn, added)

    def _sealed_records(
        self, jobs_: Sequence[Job], records: list[tuple[Any, ...]]
    ) -> list[tuple[Any, ...]]:
        """A bulk create's records (their JSON columns as text) with the job data sealed."""
        if self._seal is None:
            return records
        at = _JOB_DATA_AT
        for n, job in enumerate(jobs_):
            if job.job_data is not None:
                record = list(records[n])
                record[at] = _json_dumps(self._sealed_job_data(job.id, job.job_data))
                records[n] = tuple(record)
        return records

    def _tag_rows(self, jobs_: Sequence[Job]) -> list[dict[str, Any]]:
        """SQLite's ``job_tags`` rows of the jobs (PostgreSQL reads the GIN-indexed column)."""
        if self._dialect == "postgresql":
            return []
        return [{"tag": t, "job_id": j.id} for j in jobs_ for t in dict.fromkeys(j.tags)]

    def _tagged(self, tag: str) -> ColumnElement[bool]:
        """The jobs holding ``tag``."""
        return filters.tagged(self._dialect, [tag])

    async def get_job(self, job_id: UUID) -> Job:
        async with self._read() as conn:
            row = (await conn.execute(select(jobs).where(jobs.c.id == job_id))).first()
            if row is None:
                raise NotFoundError("job", job_id)
            [job] = await with_run_stats(conn, [self._open_job(_to_job(row))])
        return job

    async def list_jobs(self, query: JobQuery) -> Page[Job]:
        limit = max(1, query.limit)
        # Newest first: by the tag's index when a tag is asked for (a join walked in the
        # order of (tag, job_id)), else by the jobs' own key or a (filter, id) index.
        key = jobs.c.id
        stmt = select(jobs)
        if query.tag is not None:
            if self._dialect == "postgresql":  # the tags column's GIN index
                stmt = stmt.where(self._tagged(query.tag))
            else:
                key = job_tags.c.job_id
                stmt = stmt.join(job_tags, key == jobs.c.id).where(job_tags.c.tag == query.tag)
        order = [key.desc()]
        if query.job_type is not None:
            # One type as a range of the (job_type, id) index (``>= t AND <= t``: the same
            # jobs as ``= t``), ordered by (job_type, id): the same order, which only that
            # index gives. Given ``= t`` and ``ORDER BY id``, PostgreSQL's planner walks the
            # primary key for a type many jobs have, assuming its jobs spread over time,
            # and reads every newer job first when they do not (a type of last year's: half
            # a second at 2 M jobs); ``= t`` would also make it drop the type from the order.
            t = jobs.c.job_type
            stmt = stmt.where(t >= query.job_type, t <= query.job_type)
            if query.tag is None:
                order.insert(0, t.desc())
        stmt = stmt.order_by(*order).limit(limit + 1)
        if query.is_active is not None:
            stmt = stmt.where(jobs.c.is_active == self._seen(query.is_active))
        if query.ids:
            stmt = stmt.where(jobs.c.id.in_(query.ids))
        if query.auto_disabled is not None:
            reason = jobs.c.disabled_reason
            stmt = stmt.where(reason.is_not(None) if query.auto_disabled else reason.is_(None))
        stmt = stmt.where(*self._job_filters(query))
        if query.cursor is not None:
            stmt = stmt.where(key < _decode_cursor(query.cursor))
        async with self._read() as conn:
            if query.search and self._dialect == "postgresql":
                stmt = stmt.where(await postgresql_search(conn, query.search))
            elif query.search:
                stmt = stmt.where(await sqlite_search(conn, query.search))
            rows = (await conn.execute(stmt)).all()
            found = await with_run_stats(conn, [self._open_job(_to_job(r)) for r in rows])
        return _page(found, limit, lambda j: j.id)

    def _job_filters(self, query: JobQuery) -> list[ColumnElement[bool]]:
        """The query filter's conditions (:mod:`rota.stores.sql.filters`)."""
        j, d = jobs.c, self._dialect
        found: list[ColumnElement[bool]] = []
        if query.job_types:
            found.append(j.job_type.in_(query.job_types))
        if query.worker_ids:
            found.append(j.worker_id.in_(query.worker_ids))
        if query.job_refs:
            found.append(filters.named_jobs(query.job_refs))
        if query.tags:
            found.append(filters.tagged(d, query.tags))
        if query.states:
            states = {
                "active": j.is_active == self._seen(True),
                "inactive": j.is_active == self._seen(False),
                "paused": j.paused_at.is_not(None),
                "auto-disabled": j.disabled_reason.is_not(None),
            }
            found.append(or_(*(states[s] for s in query.states)))
        if query.created_after is not None:
            found.append(j.created_at >= query.created_after)
        if query.created_before is not None:
            found.append(j.created_at < query.created_before)
        sealed = self._seal is not None
        return found + filters.data_conditions(d, j.job_data, query.data, sealed=sealed)

    def _seen(self, value: Any) -> Any:
        """A filter's value as the planner must see it. PostgreSQL keeps the jobs of each
        state in a partial index (migration 0024), which a statement can use only when its
        condition is known: a prepared statement's generic plan, made for any value of a
        parameter, could not; so it is written into the statement (as a literal)."""
        if self._dialect == "postgresql":
            return bindparam(None, value, literal_execute=True)
        return value

    async def update_job(self, job: Job, *, expected_version: int, with_state: bool = False) -> Job:
        async with self._write() as conn:
            return await self._update_job(conn, job, expected_version, with_state)

    async def update_linked_job(
        self,
        job: Job,
        *,
        expected_version: int,
        with_state: bool = False,
        edges: Sequence[Dependency] | None,
        audit: Sequence[AuditEntry],
    ) -> Job:
        """The :class:`~rota.core.ports.DependencyStore` slice's update: the job, its
        upstreams and the audit entries in one transaction."""
        async with self._write() as conn:
            stored = await self._update_job(conn, job, expected_version, with_state)
            if edges is not None:
                at = job.updated_at or utcnow()
                await write_edges(conn, self._dialect, job.id, edges, at, replace=True)
            await insert_audit(conn, self._sealed_audit(audit))
        return stored

    async def _update_job(
        self, conn: AsyncConnection, job: Job, expected_version: int, with_state: bool
    ) -> Job:
        stmt = select(jobs).where(jobs.c.id == job.id).with_for_update()
        row = (await conn.execute(stmt)).first()
        if row is None:
            raise NotFoundError("job", job.id)
        stored = self._open_job(_to_job(row))
        if stored.version != expected_version:
            raise ConflictError(
                f"job {job.id} is at version {stored.version}, not {expected_version}"
            )
        if job.version > expected_version:
            await conn.execute(
                insert(job_versions).values(
                    job_id=job.id,
                    version=stored.version,
                    snapshot=self._seal_snapshot(job.id, _snapshot(stored)),
                    created_at=utcnow(),
                )
            )
        values = _job_definition(job)
        values["job_data"] = self._sealed_job_data(job.id, values["job_data"])
        if with_state:
            values.update(_auto_disable_state(job))
        await conn.execute(update(jobs).where(jobs.c.id == job.id).values(values))
        if set(job.tags) != set(stored.tags):
            await self._replace_tags(conn, job, stored.tags)
        row = (await conn.execute(select(jobs).where(jobs.c.id == job.id))).one()
        deltas = StatDeltas()
        deltas.activation(stored.is_active, row.is_active)
        deltas.retag(stored.tags, row.tags or ())
        deltas.retype(stored.job_type, row.job_type)
        await self._write_aggregates(conn, deltas)
        [updated] = await with_run_stats(conn, [self._open_job(_to_job(row))])
        return updated

    async def _delete_tags(self, conn: AsyncConnection, job_id: UUID, tags: Sequence[str]) -> None:
        """SQLite: the job's tag rows, by their key (tag, job): no index on the job."""
        if self._dialect != "postgresql" and tags:
            t = job_tags.c
            await conn.execute(delete(job_tags).where(t.tag.in_(list(tags)), t.job_id == job_id))

    async def _replace_tags(self, conn: AsyncConnection, job: Job, old: Sequence[str]) -> None:
        await self._delete_tags(conn, job.id, old)
        tags = self._tag_rows([job])
        if tags:
            await conn.execute(insert(job_tags), tags)

    async def delete_job(self, job_id: UUID) -> None:
        async with self._write() as conn:
            # Versions go by ON DELETE CASCADE too; deleted explicitly so a database whose
            # foreign keys are off (SQLite) is not left with orphans. Tags have no foreign key:
            # their rows go by their keys, the tags the job holds.
            tags = (await conn.execute(select(jobs.c.tags).where(jobs.c.id == job_id))).first()
            if tags is None:
                raise NotFoundError("job", job_id)
            await conn.execute(delete(job_versions).where(job_versions.c.job_id == job_id))
            await self._delete_tags(conn, job_id, tags[0] or ())
            # whether it was active, and its tags, as it is deleted (for the counts)
            stmt = delete(jobs).where(jobs.c.id == job_id)
            found = stmt.returning(jobs.c.job_type, jobs.c.is_active, jobs.c.tags)
            gone = (await conn.execute(found)).all()
            deleted = StatDeltas.of_jobs(((r.job_type, r.is_active, r.tags) for r in gone), -1)
            await self._write_aggregates(conn, deleted)

    async def code_jobs(self) -> list[Job]:
        stmt = select(jobs).where(jobs.c.source == JobSource.CODE.value).order_by(jobs.c.job_type)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._open_job(_to_job(r)) for r in rows]

    async def job_versions(self, job_id: UUID) -> list[JobVersion]:
        stmt = (
            select(job_versions)
            .where(job_versions.c.job_id == job_id)
            .order_by(job_versions.c.version)
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            JobVersion(
                job_id=r.job_id,
                version=r.version,
                snapshot=self._open_snapshot(r.job_id, r.version, r.snapshot),
                created_at=r.created_at,
            )
            for r in rows
        ]

    # --- auto-disable probes ---------------------------------------------------------------

    async def due_probes(
        self,
        now: datetime,
        defaults: AutoDisableDefaults,
        *,
        after: UUID | None = None,
        limit: int = 500,
    ) -> ProbeScan:
        j = jobs.c
        limit = max(1, limit)
        stmt = (
            select(jobs)
            .where(
                j.disabled_reason.is_not(None),
                j.disabled_at.is_not(None),
                j.is_active.is_(False),
                j.probing.is_(False),
                or_(j.cron_expression.is_not(None), j.interval_seconds.is_not(None)),
            )
            .order_by(j.id)
            .limit(limit)
        )
        if defaults.cooldown_seconds is None:  # only jobs with a cooldown of their own
            stmt = stmt.where(j.auto_disable_cooldown_seconds.is_not(None))
        if after is not None:
            stmt = stmt.where(j.id > after)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        candidates = [self._open_job(_to_job(r)) for r in rows]
        # The cooldown is per job (or the default): compared here rather than with interval
        # arithmetic that differs between SQLite and PostgreSQL.
        due = [job for job in candidates if probe_due(job, defaults, now)]
        return ProbeScan(due=due, after=candidates[-1].id if len(candidates) == limit else None)

    async def release_probe(
        self,
        job_id: UUID,
        *,
        seen_disabled_at: datetime,
        seen_version: int,
        next_run_at: datetime | None,
        at: datetime,
    ) -> Job | None:
        j = jobs.c
        stmt = (
            update(jobs)
            .where(
                j.id == job_id,
                j.is_active.is_(False),
                j.probing.is_(False),
                j.disabled_reason.is_not(None),
                j.disabled_at == seen_disabled_at,
                j.version == seen_version,
            )
            .values(
                is_active=True,
                probing=True,
                next_run_at=next_run_at,
                updated_at=at,
                # a compact row never changed (no updated_at) reads its creator as its editor
                updated_by=case((j.updated_at.is_(None), j.created_by), else_=j.updated_by),
            )
        )
        async with self._write() as conn:
            if (await conn.execute(stmt)).rowcount != 1:
                return None
            row = (await conn.execute(select(jobs).where(j.id == job_id))).one()
            deltas = StatDeltas()
            deltas.activation(False, True)
            await self._write_aggregates(conn, deltas)
            [released] = await with_run_stats(conn, [self._open_job(_to_job(row))])
        return released


def _by_job(edges: Sequence[Dependency]) -> dict[UUID, list[Dependency]]:
    found: dict[UUID, list[Dependency]] = {}
    for edge in edges:
        found.setdefault(edge.job_id, []).append(edge)
    return found
