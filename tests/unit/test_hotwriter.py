"""SQLite's hot writer (``rota.stores.sql.hotwriter``): a transaction is one call to its
thread, committed or rolled back whole; transactions run in the order they were queued; a
turn held for another connection's write keeps the ones queued after it waiting, and a turn
given up before it came frees the thread."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.stores.sql.engine import sqlite_pragmas
from rota.stores.sql.hotwriter import HotWriter


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[HotWriter]:
    path = tmp_path / "hot.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (n INTEGER)")
    hot = HotWriter(path, sqlite_pragmas(writer=True, foreign_keys=True, busy_ms=1000))
    await hot.open()
    yield hot
    await hot.close()


def rows(path: Path) -> list[int]:
    with sqlite3.connect(path) as db:
        return [n for (n,) in db.execute("SELECT n FROM t ORDER BY rowid")]


async def test_a_transaction_commits_whole_or_not_at_all(writer: HotWriter, tmp_path: Path) -> None:
    def insert(db: sqlite3.Connection) -> int:
        db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
        return db.execute("SELECT count(*) FROM t").fetchone()[0]

    def insert_then_fail(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO t VALUES (3)")
        raise ValueError("the work failed")

    assert await writer.transaction(insert) == 2
    with pytest.raises(ValueError, match="the work failed"):
        await writer.transaction(insert_then_fail)
    assert rows(tmp_path / "hot.db") == [1, 2]
    assert await writer.transaction(insert) == 4  # the connection is usable after a failure


async def test_a_commit_refused_rolls_back_and_the_next_transaction_begins(
    writer: HotWriter, tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "hot.db") as db:  # a check SQLite makes at the commit
        db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        db.execute(
            "CREATE TABLE child (parent INTEGER REFERENCES parent (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )

    with pytest.raises(sqlite3.IntegrityError):
        await writer.transaction(lambda db: db.execute("INSERT INTO child VALUES (1)"))
    await writer.transaction(lambda db: db.execute("INSERT INTO t VALUES (5)"))
    assert rows(tmp_path / "hot.db") == [5]


async def test_transactions_run_in_the_order_queued(writer: HotWriter, tmp_path: Path) -> None:
    def insert(n: int) -> object:
        return lambda db: db.execute("INSERT INTO t VALUES (?)", (n,))

    await asyncio.gather(*(writer.transaction(insert(n)) for n in range(20)))  # type: ignore[arg-type]
    assert rows(tmp_path / "hot.db") == list(range(20))


async def test_a_held_turn_keeps_later_transactions_waiting(
    writer: HotWriter, tmp_path: Path
) -> None:
    path = tmp_path / "hot.db"
    other = sqlite3.connect(path, isolation_level=None)
    try:
        async with writer.hold():
            later = asyncio.ensure_future(
                writer.transaction(lambda db: db.execute("INSERT INTO t VALUES (2)"))
            )
            # The other connection writes in its turn: no busy wait, the hot one is idle.
            other.execute("BEGIN IMMEDIATE")
            other.execute("INSERT INTO t VALUES (1)")
            other.execute("COMMIT")
            # Room for the later one to run, were the thread not held (it runs in well under
            # a millisecond when free; held, it cannot finish however long this is).
            await asyncio.sleep(0.05)
            assert not later.done()
        await later
    finally:
        other.close()
    assert rows(path) == [1, 2]


async def test_a_turn_given_up_before_it_came_frees_the_thread(
    writer: HotWriter, tmp_path: Path
) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def holder() -> None:
        async with writer.hold():
            entered.set()
            await release.wait()

    first = asyncio.create_task(holder())
    await entered.wait()
    waiting = asyncio.create_task(holder())  # queued behind the first turn
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await first
    await asyncio.wait_for(
        writer.transaction(lambda db: db.execute("INSERT INTO t VALUES (7)")), timeout=5
    )
    assert rows(tmp_path / "hot.db") == [7]
