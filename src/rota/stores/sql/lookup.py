"""Reads by name or by part of an id (:class:`~rota.core.ports.lookup.IdLookup`): the job of
each occurrence, the jobs with a name, the ids a shown fragment may stand for."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final
from uuid import UUID

from sqlalchemy import String, Table, cast, func, or_, select

from rota.core.errors import ValidationError
from rota.core.ports.lookup import ID_WINDOW, IdKind
from rota.stores.schema import failed_occurrences, graph_runs, jobs, occurrences
from rota.stores.sql.engine import SqlParts

_TABLES: Final[dict[IdKind, Table]] = {
    IdKind.JOB: jobs,
    IdKind.OCCURRENCE: occurrences,
    IdKind.FAILED: failed_occurrences,
    IdKind.GRAPH_RUN: graph_runs,
}
_HEX: Final = re.compile(r"[0-9a-f]{1,32}")


class LookupQueries(SqlParts):
    async def occurrence_jobs(self, occurrence_ids: Sequence[UUID]) -> dict[UUID, UUID]:
        wanted = list(dict.fromkeys(occurrence_ids))
        if not wanted:
            return {}
        o = occurrences.c
        stmt = select(o.id, o.job_id).where(self._member(o.id, wanted))
        async with self._read() as conn:
            return {row.id: row.job_id for row in await conn.execute(stmt)}

    async def jobs_named(self, name: str, limit: int = 10) -> list[UUID]:
        j = jobs.c
        stmt = (
            select(j.id)
            .where(func.lower(j.display_name) == name.lower())
            .order_by(j.id.desc())
            .limit(max(1, limit))
        )
        async with self._read() as conn:
            return [row.id for row in await conn.execute(stmt)]

    async def match_ids(
        self, kind: IdKind, fragment: str, *, window: int = ID_WINDOW, limit: int = 10
    ) -> list[UUID]:
        if not _HEX.fullmatch(fragment):
            raise ValidationError("an id fragment is 1 to 32 hex digits", field="fragment")
        table = _TABLES[kind]
        newest = (
            select(table.c.id.label("id"))
            .order_by(table.c.id.desc())
            .limit(max(1, window))
            .subquery()
        )
        # SQLite keeps a UUID as 32 hex digits, PostgreSQL shows it with hyphens
        digits = func.lower(func.replace(cast(newest.c.id, String), "-", ""))
        stmt = (
            select(newest.c.id)
            .where(or_(digits.like(f"{fragment}%"), digits.like(f"%{fragment}")))
            .order_by(newest.c.id.desc())
            .limit(max(1, limit))
        )
        async with self._read() as conn:
            return [row.id for row in await conn.execute(stmt)]
