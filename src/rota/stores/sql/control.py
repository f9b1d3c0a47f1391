"""The SQL store's control state: the dispatcher's pause switch, and the job types workers
have ever declared (what the dispatcher's ``no_worker`` rule reads), with the data schema
each group last published for each (what job data is checked against)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from rota.core.models import DispatcherState, utcnow
from rota.core.ports.jobtypes import JobTypeSchemas
from rota.core.records import PublishedSchema
from rota.stores.schema import declared_job_types, scheduler_control
from rota.stores.sql.engine import SqlParts

MAX_NAME = 200
"""The longest job type and worker group name the history keeps (its columns' width)."""
_CHUNK = 500

_DISPATCHER_KEY = "dispatcher"


class ControlQueries(SqlParts, JobTypeSchemas):
    """The dispatcher state and the job type history of the :class:`~rota.core.ports.Store`
    port, and the :class:`~rota.core.ports.JobTypeSchemas` slice."""

    # --- job types ever declared -------------------------------------------------------------

    async def record_job_types(self, declared: Sequence[tuple[str, str]], at: datetime) -> int:
        rows = [
            {"job_type": job_type, "worker_id": worker_id, "first_declared_at": at}
            for job_type, worker_id in sorted(set(declared))
            if 0 < len(job_type) <= MAX_NAME and 0 < len(worker_id) <= MAX_NAME
        ]
        if not rows:
            return 0
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        new = 0
        async with self._write() as conn:
            for start in range(0, len(rows), _CHUNK):
                stmt = (
                    dialect.insert(declared_job_types)
                    .values(rows[start : start + _CHUNK])
                    .on_conflict_do_nothing()
                    .returning(declared_job_types.c.job_type)
                )
                new += len((await conn.execute(stmt)).all())
        return new

    async def declared_job_types(self) -> set[tuple[str, str]]:
        t = declared_job_types.c
        async with self._read() as conn:
            rows = (await conn.execute(select(t.job_type, t.worker_id))).all()
        return {(row.job_type, row.worker_id) for row in rows}

    async def record_schemas(self, published: Sequence[PublishedSchema]) -> None:
        last = {
            (p.job_type, p.worker_id): p
            for p in published
            if 0 < len(p.job_type) <= MAX_NAME and 0 < len(p.worker_id) <= MAX_NAME
        }
        rows = [
            {
                "job_type": p.job_type,
                "worker_id": p.worker_id,
                "first_declared_at": p.published_at,
                "data_schema": p.schema,
                "schema_published_at": p.published_at,
            }
            for _, p in sorted(last.items())
        ]
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        async with self._write() as conn:
            for start in range(0, len(rows), _CHUNK):
                stmt = dialect.insert(declared_job_types).values(rows[start : start + _CHUNK])
                await conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=[
                            declared_job_types.c.job_type,
                            declared_job_types.c.worker_id,
                        ],
                        set_={
                            "data_schema": stmt.excluded.data_schema,
                            "schema_published_at": stmt.excluded.schema_published_at,
                        },
                    )
                )

    async def published_schemas(self) -> list[PublishedSchema]:
        t = declared_job_types.c
        stmt = (
            select(t.job_type, t.worker_id, t.data_schema, t.schema_published_at)
            .where(t.schema_published_at.is_not(None))
            .order_by(t.job_type, t.worker_id)
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            PublishedSchema(row.job_type, row.worker_id, row.data_schema, row.schema_published_at)
            for row in rows
        ]

    # --- control --------------------------------------------------------------------------

    async def dispatcher_state(self) -> DispatcherState:
        stmt = select(scheduler_control.c.value).where(scheduler_control.c.key == _DISPATCHER_KEY)
        async with self._read() as conn:
            value = (await conn.execute(stmt)).scalar_one_or_none()
        if not isinstance(value, dict):
            return DispatcherState()
        changed = value.get("changedAt")
        return DispatcherState(
            paused=bool(value.get("paused")),
            reason=value.get("reason"),
            by=value.get("by"),
            changed_at=None if changed is None else datetime.fromisoformat(changed),
        )

    async def set_dispatcher_state(self, state: DispatcherState) -> None:
        value = {
            "paused": state.paused,
            "reason": state.reason,
            "by": state.by,
            "changedAt": None if state.changed_at is None else state.changed_at.isoformat(),
        }
        now = utcnow()
        async with self._write() as conn:
            done = await conn.execute(
                update(scheduler_control)
                .where(scheduler_control.c.key == _DISPATCHER_KEY)
                .values(value=value, updated_at=now)
            )
            if done.rowcount == 0:
                await conn.execute(
                    insert(scheduler_control).values(
                        key=_DISPATCHER_KEY, value=value, updated_at=now
                    )
                )
