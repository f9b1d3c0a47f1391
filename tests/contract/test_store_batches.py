"""The store's hot batch writes (``rota.stores.sql.batches``): on PostgreSQL a batch runs as
one execution of its statement's ``unnest`` form, except an UPDATE whose key repeats in the
batch, which runs row by row (``UPDATE … FROM`` would apply one of the rows only); on SQLite
every batch is an ``executemany``. Either way the rows written are the same."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from unittest.mock import patch
from uuid import uuid4

import pytest
from sqlalchemy import event, select

from rota.core.models import Job
from rota.stores.schema import jobs, occurrence_logs
from rota.stores.sql import SqlStore, driver
from rota.stores.sql.batches import _FastBatches
from rota.stores.sql.statements import ADVANCE_KEYS, _advance_jobs_stmt, _insert_logs_stmt

_T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)


HOT = "/* hot writer */ "
"""What :func:`writes` puts before each statement of a hot writer's transaction."""


@contextmanager
def writes(store: SqlStore) -> Iterator[list[str]]:
    """The statements the store's writer runs meanwhile: through SQLAlchemy, SQLite's hot
    statements straight to its driver (``rota.stores.sql.driver``), one entry per call, and
    on SQLite those of the hot writer's transactions (``rota.stores.sql.hotwriter``; as SQLite
    traces them, with their parameters, one entry per step of an ``executemany``, each
    marked :data:`HOT`)."""
    statements: list[str] = []

    def tracing(transaction: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def traced(work: Callable[[sqlite3.Connection], Any]) -> Any:
            def run(db: sqlite3.Connection) -> Any:
                db.set_trace_callback(lambda sql: statements.append(HOT + sql.strip()))
                try:
                    return work(db)
                finally:
                    db.set_trace_callback(None)

            return await transaction(run)

        return traced

    def grab(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    def watching(call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def watched(conn: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
            statements.append(sql.strip())
            return await call(conn, sql, *args, **kwargs)

        return watched

    engine = store._writer.sync_engine  # type: ignore[union-attr]
    event.listen(engine, "before_cursor_execute", grab)
    try:
        with (
            patch.object(driver, "run", watching(driver.run)),
            (
                patch.object(store._hot, "transaction", tracing(store._hot.transaction))
                if store._hot is not None
                else nullcontext()
            ),
        ):
            yield statements
    finally:
        event.remove(engine, "before_cursor_execute", grab)


@contextmanager
def written(store: SqlStore, statement: str) -> Iterator[list[Any]]:
    """The parameters of each run of ``statement`` (its exact text) by the store's writer
    meanwhile (through SQLAlchemy: PostgreSQL's statements)."""
    runs: list[Any] = []

    def grab(conn: Any, cursor: Any, text: str, params: Any, *_: Any) -> None:
        if text == statement:
            runs.append(params)

    engine = store._writer.sync_engine  # type: ignore[union-attr]
    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield runs
    finally:
        event.remove(engine, "before_cursor_execute", grab)


async def pg_plan(store: SqlStore, statement: str, params: Any) -> str:
    """PostgreSQL's plan of ``statement`` with ``params`` (``EXPLAIN``, not run)."""
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        return "\n".join(r[0] for r in await driver.fetch(f"EXPLAIN {statement}", *params))


async def _jobs(store: SqlStore, n: int) -> list[Job]:
    created = [Job(id=uuid4(), job_type="x", created_at=_T0, updated_at=_T0) for _ in range(n)]
    await store.create_jobs(created)
    return created


def _advance(job: Job, runs: int) -> dict[str, Any]:
    return {
        "b_id": job.id,
        "b_next": _T0 + timedelta(minutes=runs),
        "b_active": True,
        "b_runs": runs,
    }


async def _run_counts(store: SqlStore) -> dict[Any, tuple[int, datetime]]:
    async with store._write() as conn:
        rows = (await conn.execute(select(jobs.c.id, jobs.c.run_count, jobs.c.next_run_at))).all()
    return {r.id: (r.run_count, r.next_run_at.replace(tzinfo=UTC)) for r in rows}


async def test_a_batch_update_writes_every_row(store: SqlStore, store_kind: str) -> None:
    created = await _jobs(store, 3)
    rows = [_advance(job, i + 1) for i, job in enumerate(created)]
    with writes(store) as statements:
        async with store._write() as conn:
            count = await store._fast.execute(
                conn, "advance_jobs", _advance_jobs_stmt, rows, keys=ADVANCE_KEYS
            )
    assert count == 3
    expected = {job.id: (i + 1, _T0 + timedelta(minutes=i + 1)) for i, job in enumerate(created)}
    assert await _run_counts(store) == expected
    updates = [s for s in statements if s.startswith("UPDATE jobs")]
    assert len(updates) == 1
    assert ("unnest(" in updates[0]) == (store_kind == "postgres")


async def test_a_batch_update_whose_key_repeats_runs_row_by_row(
    store: SqlStore, store_kind: str
) -> None:
    (job,) = await _jobs(store, 1)
    rows = [_advance(job, 1), _advance(job, 2), _advance(job, 3)]  # the last one wins
    with writes(store) as statements:
        async with store._write() as conn:
            await store._fast.execute(
                conn, "advance_jobs", _advance_jobs_stmt, rows, keys=ADVANCE_KEYS
            )
    assert await _run_counts(store) == {job.id: (3, _T0 + timedelta(minutes=3))}
    updates = [s for s in statements if s.startswith("UPDATE jobs")]
    assert updates
    assert not any("unnest(" in s for s in updates)


async def test_a_hot_update_must_name_its_keys(store: SqlStore, store_kind: str) -> None:
    if store_kind != "postgres":
        pytest.skip("only PostgreSQL has a batch form to guard")
    created = await _jobs(store, 2)
    fast = _FastBatches("postgresql")
    with pytest.raises(TypeError, match="key parameters"):
        async with store._write() as conn:
            await fast.execute(
                conn, "advance", _advance_jobs_stmt, [_advance(j, 1) for j in created]
            )


async def test_a_batch_insert_refuses_a_value_too_long_for_its_column(
    store: SqlStore, store_kind: str
) -> None:
    """The batch form casts no string to its column's length (which would cut it short)."""
    if store_kind != "postgres":
        pytest.skip("SQLite does not hold a string to its declared length")
    lines = [
        {
            "occurrence_id": uuid4(),
            "timestamp": _T0,
            "level": level,
            "message": "m",
            "data": None,
            "category": "c",
            "attempt": 1,
            "line": i,
        }
        for i, level in enumerate(["INFO", "L" * 30])  # the column holds 20
    ]
    make = partial(_insert_logs_stmt, store._dialect)
    with writes(store) as statements, pytest.raises(Exception, match="too long"):
        async with store._write() as conn:
            await store._fast.execute(conn, "insert_logs", make, lines)
    assert any("unnest(" in s for s in statements if s.startswith("INSERT INTO occurrence_logs"))
    async with store._write() as conn:
        assert (await conn.execute(select(occurrence_logs.c.seq))).all() == []
