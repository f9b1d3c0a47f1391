"""SQLite: the hot batches' transactions, each in one call to a thread of its own.

A dispatch batch's plain fires and a status batch's completions are the embedded mode's
busiest writes. Through aiosqlite each statement of a transaction is its own call to the
connection's thread, and each answer waits for the event loop's next turn, which under load
is milliseconds, while SQLite's one writer is held: the fires and the completions then take
turns on the writer, each waiting for the loop between its statements. Here a transaction
(``BEGIN IMMEDIATE``, its statements, ``COMMIT``) is one function run on this writer's own
thread and connection, from parameters built before it. The transactions queue on the
thread and run back to back: SQLite works through them while the loop runs everything else,
and the next one starts without waiting for the loop.

The store's other writes (SQLAlchemy's writer connection) each take a turn on the same
thread first (:meth:`HotWriter.hold`): the thread waits while such a transaction runs, so the
two connections never write at the same time and neither waits in SQLite's busy handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

__all__ = ["HotWriter"]

T = TypeVar("T")


class HotWriter:
    """One SQLite connection on one thread, for whole write transactions (see the module)."""

    def __init__(self, path: Path, pragmas: Sequence[str]) -> None:
        """``pragmas``: run on the connection when it opens (the store's writer's own)."""
        self._path = path
        self._pragmas = tuple(pragmas)
        self._thread: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rota-sqlite-hot")
        await asyncio.get_running_loop().run_in_executor(self._thread, self._connect)

    async def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with contextlib.suppress(sqlite3.Error):
            await asyncio.get_running_loop().run_in_executor(thread, self._disconnect)
        thread.shutdown(wait=True)

    async def transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` in one write transaction on the writer's thread, after the
        transactions queued before it: committed when it returns, rolled back when it raises
        (the exception goes to the caller). It runs to its end even if the caller is
        cancelled meanwhile."""
        thread = self._thread
        if thread is None:
            raise RuntimeError("HotWriter is not open")
        return await asyncio.get_running_loop().run_in_executor(thread, self._run, work)

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """A turn for another connection's write transaction: entered once the transactions
        queued before it have ended; the ones queued after it wait until it is left."""
        thread = self._thread
        if thread is None:
            raise RuntimeError("HotWriter is not open")
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        release = threading.Event()

        def wait() -> None:
            loop.call_soon_threadsafe(_set_result, started)
            release.wait()

        loop.run_in_executor(thread, wait)
        try:
            await started
            yield
        finally:
            release.set()

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db
        if db is None:
            raise RuntimeError("HotWriter is not open")
        db.execute("BEGIN IMMEDIATE")
        try:
            result = work(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # (some errors end the transaction in SQLite already)
                db.execute("ROLLBACK")
            raise
        return result

    def _connect(self) -> None:
        db = sqlite3.connect(self._path, isolation_level=None)
        try:
            for pragma in self._pragmas:
                db.execute(pragma)
        except BaseException:
            db.close()
            raise
        self._db = db

    def _disconnect(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()


def _set_result(future: asyncio.Future[None]) -> None:
    if not future.done():  # cancelled meanwhile
        future.set_result(None)
