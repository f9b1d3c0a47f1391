"""``rota maintenance reencrypt``: every sealed column moved to the current key (or to plain
text when the keys are decrypt-only), in batches, each batch one transaction with its rows
locked (a server writing one of them meanwhile waits, or is waited for: nothing is lost).

A row already as the current key would store it is only read, so a run stopped halfway is
resumed by running it again (or from the last id it printed, ``after``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import Table, and_, or_, select, update

from rota.core.models import JsonValue
from rota.core.sealing import (
    DataSeal,
    SealError,
    failed_data_aad,
    job_data_aad,
    result_aad,
)
from rota.stores.schema import audit_entries, failed_occurrences, job_versions, jobs, occurrences
from rota.stores.sql.engine import SqlParts


@dataclass(frozen=True, slots=True)
class ReencryptBatch:
    """One batch: the table, the rows read and rewritten, the last key read (``None``: the
    table is done), the values that would not open (left as they are)."""

    table: str
    read: int
    rewritten: int
    last: str | None
    unopened: int = 0


def _moved(seal: DataSeal, value: JsonValue, aad: bytes) -> tuple[JsonValue, bool, bool]:
    """The value as the current key stores it, whether it changes, whether it failed to
    open."""
    if not seal.stale(value):
        return value, False, False
    try:
        plain = seal.open(value, aad)
    except SealError:
        return value, False, True
    if seal.current is None:
        return plain, True, False
    return seal.seal(plain, aad), True, False


_STATES = ("snapshot", "before", "after")
"""Columns whose value is an object holding the job data under ``jobData``."""


def _audit_aad(resource_type: str, resource_id: str | None) -> bytes | None:
    if resource_type != "job" or resource_id is None:
        return None
    try:
        return job_data_aad(UUID(resource_id))
    except ValueError:
        return None


class ReencryptQueries(SqlParts):
    """The store's side of ``rota maintenance reencrypt`` (not a port: only the CLI uses it)."""

    async def reencrypt_batch(
        self, seal: DataSeal, table: str, after: str | None, limit: int
    ) -> ReencryptBatch:
        """The next ``limit`` rows of ``table`` after the key ``after`` moved to the current
        key."""
        t = _TABLES[table]
        key = _key_columns(t)
        stmt = select(*key, *_value_columns(t)).order_by(*key).limit(limit).with_for_update()
        if after is not None:
            stmt = stmt.where(_after(t, after))
        read = rewritten = unopened = 0
        last: str | None = None
        async with self._write() as conn:
            rows = (await conn.execute(stmt)).all()
            for row in rows:
                read += 1
                m = row._mapping
                values, bad = _row_values(seal, table, m)
                unopened += bad
                if values:
                    where = [c == m[c.name] for c in key]
                    await conn.execute(update(t).where(*where).values(values))
                    rewritten += 1
            if rows:
                last = _key_text(table, rows[-1]._mapping)
        done = len(rows) < limit
        return ReencryptBatch(table, read, rewritten, None if done else last, unopened)


_TABLES: dict[str, Table] = {
    "jobs": jobs,
    "job_versions": job_versions,
    "occurrences": occurrences,
    "failed_occurrences": failed_occurrences,
    "audit_entries": audit_entries,
}


def _key_columns(t: Table) -> list[Any]:
    if t is job_versions:
        return [t.c.job_id, t.c.version]
    return [t.c.id]


def _value_columns(t: Table) -> list[Any]:
    if t is jobs:
        return [t.c.job_data]
    if t is job_versions:
        return [t.c.snapshot]
    if t is occurrences:
        return [t.c.job_id, t.c.job_data, t.c.result]
    if t is audit_entries:
        return [t.c.resource_type, t.c.resource_id, t.c.before, t.c.after]
    return [t.c.job_id, t.c.job_data]


def _after(t: Table, after: str) -> Any:
    if t is job_versions:
        job_id, _, version = after.partition("/")
        jid, v = UUID(job_id), int(version)
        return or_(t.c.job_id > jid, and_(t.c.job_id == jid, t.c.version > v))
    return t.c.id > UUID(after)


def _key_text(table: str, m: Any) -> str:
    if table == "job_versions":
        return f"{m['job_id']}/{m['version']}"
    return str(m["id"])


def _row_values(seal: DataSeal, table: str, m: Any) -> tuple[dict[str, Any], int]:
    """The columns of one row to rewrite, and how many of its values would not open."""
    out: dict[str, Any] = {}
    bad = 0
    for column, value, aad in _sealed_values(table, m):
        new, changed, failed = _moved(seal, value, aad)
        bad += failed
        if changed:
            if column in _STATES:
                out[column] = {**m[column], "jobData": new}
            else:
                out[column] = new
    return out, bad


def _sealed_values(table: str, m: Any) -> Iterator[tuple[str, JsonValue, bytes]]:
    if table == "jobs":
        yield "job_data", m["job_data"], job_data_aad(m["id"])
    elif table == "job_versions":
        snapshot = m["snapshot"]
        if isinstance(snapshot, dict):
            yield "snapshot", snapshot.get("jobData"), job_data_aad(m["job_id"])
    elif table == "audit_entries":
        aad = _audit_aad(m["resource_type"], m["resource_id"])
        for column in ("before", "after"):
            state = m[column]
            if aad is not None and isinstance(state, dict):
                yield column, state.get("jobData"), aad
    elif table == "occurrences":
        yield "job_data", m["job_data"], job_data_aad(m["job_id"])
        yield "result", m["result"], result_aad(m["id"])
    else:
        job_id = m["job_id"]
        aad = failed_data_aad(m["id"]) if job_id is None else job_data_aad(job_id)
        yield "job_data", m["job_data"], aad
