"""The record of what a dispatcher committed and has not yet published (``dispatch_batches``,
migration 0030): one row per fired batch, so that a fire costs its occurrence one insert
(inserted dispatched) instead of an insert and a mark.

- ``dispatch_due`` with a claim inserts the batch's sent occurrences with ``dispatched_at``
  set and one row naming them (:func:`insert_batch`), in its transaction;
- ``mark_dispatched`` with the batch deletes that row (:func:`end_batch`): published;
- a sweep first takes the rows whose claim has run out (the dispatcher died, or its publish
  failed) and clears ``dispatched_at`` of their occurrences still Queued as the batch left
  them (same attempt, same dispatch time), so the sweep's own query finds and claims them
  (:func:`release_expired`); an occurrence that moved on (started, retried, swept and
  published) is left alone, so nothing is sent twice by the sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from msgspec.structs import replace
from sqlalchemy import ColumnElement, Integer, Row, Uuid, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from rota.core.ids import new_id
from rota.core.models import Occurrence, OccurrenceStatus
from rota.stores.schema import UtcDateTime, dispatch_batches, occurrences
from rota.stores.sql.engine import SqlParts
from rota.stores.sql.rows import _chunks, _to_occurrence
from rota.stores.sql.statements import (
    _MARK_DISPATCHED_PG,
    _mark_dispatched_stmt,
    _undispatched_stmt,
    status_in,
)

Member = Callable[[ColumnElement[Any], Sequence[UUID]], ColumnElement[bool]]
"""``SqlParts._member``: ``column IN ids``, as the dialect writes it best."""

_b = dispatch_batches.c
_o = occurrences.c


async def insert_batch(
    conn: AsyncConnection, sent: Sequence[UUID], claim_until: datetime, at: datetime
) -> UUID:
    """The record of a batch whose occurrences (the ids ``sent``, inserted dispatched at
    ``at``) the caller publishes before ``claim_until``; returns its id."""
    batch_id = new_id()
    await conn.execute(
        insert(dispatch_batches).values(
            id=batch_id,
            claim_until=claim_until,
            dispatched_at=at,
            occurrence_ids=[i.hex for i in sent],
        )
    )
    return batch_id


async def end_batch(conn: AsyncConnection, batch_id: UUID) -> None:
    """Its occurrences were published: the record goes."""
    await conn.execute(delete(dispatch_batches).where(_b.id == batch_id))


def _stranded(member: Member, row: Row[Any], ids: Sequence[UUID]) -> list[ColumnElement[bool]]:
    """The occurrences of batch ``row`` (among ``ids``) still as it left them: Queued in
    the attempt it inserted (never requeued: that clears the mark), marked at its time."""
    return [
        member(_o.id, ids),
        status_in(_o.status, [OccurrenceStatus.QUEUED]),
        _o.dispatched_at == row.dispatched_at,
    ]


def _ids(row: Row[Any]) -> list[UUID]:
    return [UUID(hex=h) for h in row.occurrence_ids]


async def release_expired(conn: AsyncConnection, member: Member, due_before: datetime) -> int:
    """Take the batches whose claim ran out by ``due_before`` (locked rows are another
    sweep's: passed over) and hand their unpublished occurrences to the sweep (their mark
    cleared); returns how many occurrences."""
    stmt = (
        select(_b.id, _b.dispatched_at, _b.occurrence_ids)
        .where(_b.claim_until <= due_before)
        .order_by(_b.claim_until)
        .with_for_update(skip_locked=True)
    )
    rows = (await conn.execute(stmt)).all()
    released = 0
    for row in rows:
        for chunk in _chunks(sorted(_ids(row))):
            result = await conn.execute(
                update(occurrences).where(*_stranded(member, row, chunk)).values(dispatched_at=None)
            )
            released += int(result.rowcount or 0)
    if rows:
        await conn.execute(delete(dispatch_batches).where(_b.id.in_([r.id for r in rows])))
    return released


async def expired_occurrences(
    conn: AsyncConnection, member: Member, due_before: datetime
) -> list[Occurrence]:
    """What :func:`release_expired` would hand to the sweep by ``due_before``, each with the
    time its batch's claim runs out as its ``due_at`` and no dispatch time (as a claimed
    fire's row showed it before there were batches)."""
    rows = (
        await conn.execute(
            select(_b.claim_until, _b.dispatched_at, _b.occurrence_ids).where(
                _b.claim_until <= due_before
            )
        )
    ).all()
    found: list[Occurrence] = []
    for row in rows:
        for chunk in _chunks(sorted(_ids(row))):
            stmt = select(occurrences).where(*_stranded(member, row, chunk))
            found.extend(
                replace(
                    _to_occurrence(o), due_at=max(o.due_at, row.claim_until), dispatched_at=None
                )
                for o in (await conn.execute(stmt)).all()
            )
    return found


class SendingQueries(SqlParts):
    """Handing occurrences to the broker, of the :class:`~rota.core.ports.DispatchStore`
    slice: the marks, the pending sweep and its claims, the embedded restart's reset."""

    async def mark_dispatched(
        self, published: Sequence[Occurrence], at: datetime, *, batch: UUID | None = None
    ) -> None:
        if batch is not None:
            async with self._write() as conn:
                await end_batch(conn, batch)
        if not published:
            return
        # Only the attempt that was published, and only while it is still undispatched: a
        # mark that arrives after the attempt failed and was requeued as the next one (its
        # ``dispatched_at`` cleared for the sweeper) must not hide that retry. In id order,
        # as the status tracker locks them (a worker may report on them meanwhile).
        first: dict[UUID, tuple[datetime, int, datetime]] = {}
        for o in published:
            first.setdefault(o.id, (o.scheduled_for, o.attempt, o.due_at))
        marks = sorted(first.items())
        async with self._write() as conn:
            if self._dialect == "postgresql":  # one statement for the batch, not one each
                ids, keys = zip(*marks, strict=True)
                columns = [list(ids), *map(list, zip(*keys, strict=True))]
                await conn.exec_driver_sql(_MARK_DISPATCHED_PG, (at, *columns))
                return
            stmt = _mark_dispatched_stmt(at)
            params = [
                {"b_id": oid, "b_key_at": key_at, "b_attempt": attempt, "b_due": due}
                for oid, (key_at, attempt, due) in marks
            ]
            await conn.execute(stmt, params)

    async def undispatched(self, due_before: datetime, limit: int) -> list[Occurrence]:
        stmt = _undispatched_stmt(due_before, limit)
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
            stranded = await expired_occurrences(conn, self._member, due_before)
        found = sorted([*map(_to_occurrence, rows), *stranded], key=lambda o: (o.due_at, o.id))
        return [self._open_occurrence(o) for o in found[: max(0, limit)]]

    async def claim_undispatched(
        self, due_before: datetime, limit: int, *, claim_until: datetime
    ) -> list[Occurrence]:
        # PostgreSQL: the rows are locked (others skip them) until the claim commits, and a row
        # claimed meanwhile fails the re-checked ``due_at``. SQLite: its writer lock serializes.
        stmt = _undispatched_stmt(due_before, limit).with_for_update(
            skip_locked=True, of=occurrences
        )
        async with self._write() as conn:
            await release_expired(conn, self._member, due_before)  # a batch never published
            rows = (await conn.execute(stmt)).all()
            ids = [r.id for r in rows]
            for chunk in _chunks(ids):
                await conn.execute(
                    update(occurrences)
                    .where(occurrences.c.id.in_(chunk))
                    .values(due_at=claim_until)
                )
        return [self._open_occurrence(_to_occurrence(r)) for r in rows]

    async def finish_claim(
        self,
        claimed: Sequence[Occurrence],
        claim_until: datetime,
        *,
        dispatched_at: datetime | None,
    ) -> None:
        if not claimed:
            return
        c = occurrences.c
        stmt = (
            update(occurrences)
            .where(
                c.id == bindparam("b_id", type_=Uuid()),
                c.attempt == bindparam("b_attempt", type_=Integer()),
                c.due_at == claim_until,
                c.dispatched_at.is_(None),
            )
            .values(due_at=bindparam("b_due", type_=UtcDateTime()), dispatched_at=dispatched_at)
        )
        params = [{"b_id": o.id, "b_attempt": o.attempt, "b_due": o.due_at} for o in claimed]
        async with self._write() as conn:
            await conn.execute(stmt, params)

    async def reset_dispatch(self, statuses: Sequence[OccurrenceStatus]) -> int:
        if not statuses:
            return 0
        stmt = (
            update(occurrences)
            .where(
                status_in(occurrences.c.status, statuses),
                occurrences.c.dispatched_at.is_not(None),
            )
            .values(dispatched_at=None)
        )
        async with self._write() as conn:
            result = await conn.execute(stmt)
        return int(result.rowcount)
