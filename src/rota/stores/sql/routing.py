"""The SQL store's routing slice (``RoutingStore``): occurrences handed back to the dispatcher,
because no group could be sent them, or because the group they were sent to declined them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Integer, Uuid, bindparam, select, update
from sqlalchemy.sql.dml import Update

from rota.core.models import Occurrence, OccurrenceStatus, utcnow
from rota.core.records import DeclinedResult
from rota.stores.schema import UtcDateTime, occurrences
from rota.stores.sql.engine import SqlParts
from rota.stores.sql.rows import _chunks

_o = occurrences.c
_QUEUED = int(OccurrenceStatus.QUEUED)


def _undispatch_stmt(due: datetime | None) -> Update:
    """Clear the mark of one attempt still Queued and dispatched (``due``: due again then)."""
    values: dict[str, Any] = {"dispatched_at": None}
    if due is not None:
        values["due_at"] = due
    return (
        update(occurrences)
        .where(
            _o.id == bindparam("b_id", type_=Uuid()),
            _o.scheduled_for == bindparam("b_key_at", type_=UtcDateTime()),
            _o.attempt == bindparam("b_attempt", type_=Integer()),
            _o.status == _QUEUED,
            _o.dispatched_at.is_not(None),
        )
        .values(**values)
    )


class RoutingQueries(SqlParts):
    """The :class:`~rota.core.ports.RoutingStore` slice."""

    async def undispatch(self, occurrences: Sequence[Occurrence]) -> None:
        if not occurrences:
            return
        params = [
            {"b_id": o.id, "b_key_at": o.scheduled_for, "b_attempt": o.attempt}
            for o in sorted(occurrences, key=lambda o: o.id)
        ]
        async with self._write() as conn:
            await conn.execute(_undispatch_stmt(None), params)

    async def return_declined(
        self,
        declined: Sequence[tuple[UUID, int]],
        serves: Callable[[str, str | None], bool],
    ) -> DeclinedResult:
        wanted = dict(declined)
        if not wanted:
            return DeclinedResult()
        returned: list[dict[str, Any]] = []
        result = DeclinedResult()
        async with self._write() as conn:
            for chunk in _chunks(sorted(wanted)):
                stmt = (
                    select(
                        _o.id,
                        _o.scheduled_for,
                        _o.attempt,
                        _o.job_type,
                        _o.worker_id,
                        _o.status,
                        _o.dispatched_at,
                    )
                    .where(_o.id.in_(chunk))
                    .order_by(_o.id)
                    .with_for_update(of=occurrences)
                )
                for row in (await conn.execute(stmt)).all():
                    if (
                        row.attempt != wanted[row.id]
                        or row.status != _QUEUED
                        or row.dispatched_at is None
                    ):
                        continue  # moved on, or handed back already: a stale decline
                    if serves(row.job_type, row.worker_id):
                        result.returned.append(row.id)
                        returned.append(
                            {
                                "b_id": row.id,
                                "b_key_at": row.scheduled_for,
                                "b_attempt": row.attempt,
                            }
                        )
                    else:
                        result.unserved.append(row.id)
            if returned:
                await conn.execute(_undispatch_stmt(utcnow()), returned)
        return result
