"""A worker's local state (DESIGN.md §4): one SQLite file per worker instance, kept across
restarts of the same worker.

* **Finalized attempts**: ``(occurrence id, attempt)`` of every attempt whose final report was
  handed over. A delivery of an attempt finalized here is acknowledged and not run again.
* **Meta**: small values kept across restarts, e.g. the epoch token of the group's claim
  memory last seen (``claim_epoch``), so that a restarted worker notices a Redis that lost its
  claims meanwhile.
* **Outbox**: status and log records that could not be published (the broker is away), as
  their wire bodies, replayed oldest first when publishing works again (also after a restart).

The file lives in a state directory locked for the process (``fcntl.flock``). When another live
process holds the directory (two workers of one group on one machine), the next free numbered
sub-directory ``instance-N`` is used instead, so that a restarted worker finds its state again.

Writes use ``BEGIN IMMEDIATE`` in WAL mode with ``synchronous=NORMAL``; every call runs on one
thread of the store's own, off the event loop. Callers batch: one transaction per flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar
from uuid import UUID

from rota.core.errors import ConfigurationError
from rota.stores.files import PRIVATE_FILE, private_dir, private_sqlite

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOGS", "STATUS", "LocalStore", "OutboxEntry"]

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUS: Literal["status"] = "status"
LOGS: Literal["logs"] = "logs"
OutboxKind = Literal["status", "logs"]

DB_NAME = "worker.sqlite3"
LOCK_NAME = "lock"
MAX_INSTANCES = 64
"""Numbered sub-directories tried when the state directory is held by another process."""
_BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS finalized (
    occurrence_id BLOB NOT NULL,
    attempt INTEGER NOT NULL,
    finalized_at REAL NOT NULL,
    PRIMARY KEY (occurrence_id, attempt)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS finalized_by_time ON finalized (finalized_at);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('status', 'logs')),
    body BLOB NOT NULL,
    records INTEGER NOT NULL,
    created_at REAL NOT NULL
);
"""


_SAVE_FINALS = """
INSERT OR REPLACE INTO finalized (occurrence_id, attempt, finalized_at)
SELECT substr(:ids, a.key * 16 + 1, 16), a.value, :now FROM json_each(:attempts) a
"""
"""A batch of finalized attempts: ``ids`` the occurrences' 16-byte ids one after another,
``attempts`` their attempts as a JSON array in the same order."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One kept message: a JSON array of status or log records in wire format."""

    seq: int
    kind: OutboxKind
    body: bytes
    records: int


@dataclass(frozen=True, slots=True)
class OutboxSize:
    entries: int
    records: int


def _lock(directory: Path) -> int | None:
    """Take the directory's lock file; its descriptor, or ``None`` if another process has it."""
    private_dir(directory)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    if fcntl is None:  # pragma: no cover - not POSIX: no lock
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def claim_directory(base: Path) -> tuple[Path, int]:
    """Lock ``base`` or, if another process holds it, the first free ``base/instance-N``.
    Returns the directory and the lock's descriptor (kept open while the store is)."""
    for number in range(MAX_INSTANCES + 1):
        directory = base if number == 0 else base / f"instance-{number}"
        fd = _lock(directory)
        if fd is not None:
            if number:
                log.warning(
                    "worker state directory %s is in use by another process; using %s",
                    base,
                    directory,
                    extra={"action": "localstore_open", "state_dir": str(directory)},
                )
            return directory, fd
    raise ConfigurationError(
        f"worker state directory {base} and its {MAX_INSTANCES} instance directories are all "
        "in use by other processes; give this worker a --state-dir of its own"
    )


class LocalStore:
    """The worker-local SQLite store; open it with :meth:`open`, close it with :meth:`close`."""

    def __init__(self, directory: Path, lock_fd: int) -> None:
        self.directory = directory
        self.path = directory / DB_NAME
        self._lock_fd: int | None = lock_fd
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="rota-localstore")
        self._db: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, base: Path) -> LocalStore:
        """Lock a state directory (see the module docstring) and open its database."""
        directory, fd = await asyncio.to_thread(claim_directory, base)
        store = cls(directory, fd)
        try:
            await store._call(store._connect)
        except BaseException:
            await store.close()
            raise
        log.info(
            "worker state opened",
            extra={"action": "localstore_open", "state_dir": str(directory)},
        )
        return store

    async def close(self) -> None:
        """Close the database and release the directory (idempotent)."""
        if self._lock_fd is None:
            return
        with contextlib.suppress(sqlite3.Error):
            await self._call(self._disconnect)
        self._thread.shutdown(wait=True)
        fd, self._lock_fd = self._lock_fd, None
        os.close(fd)  # releases the flock

    # --- plumbing ---------------------------------------------------------------------------

    async def _call(self, func: Callable[..., T], *args: object) -> T:
        if self._lock_fd is None:
            raise RuntimeError("the worker's local store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, func, *args)

    def _connect(self) -> None:
        private_sqlite(self.path)
        db = sqlite3.connect(self.path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            with _immediate(db):
                _create_schema(db)
        except BaseException:
            db.close()
            raise
        self._db = db

    def _disconnect(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the worker's local store is closed")
        return self._db

    # --- finalized attempts -----------------------------------------------------------------

    async def recent_finals(self, limit: int) -> dict[UUID, int]:
        """Occurrence id -> highest finalized attempt, for the ``limit`` newest entries."""
        return await self._call(self._recent_finals, limit)

    def _recent_finals(self, limit: int) -> dict[UUID, int]:
        rows = self._conn().execute(
            "SELECT occurrence_id, MAX(attempt) FROM (SELECT occurrence_id, attempt FROM "
            "finalized ORDER BY finalized_at DESC LIMIT ?) GROUP BY occurrence_id",
            (limit,),
        )
        return {UUID(bytes=oid): attempt for oid, attempt in rows}

    async def finalized_attempt(self, occurrence_id: UUID) -> int | None:
        """The highest attempt of the occurrence finalized here, ``None`` if none is."""
        return await self._call(self._finalized_attempt, occurrence_id)

    def _finalized_attempt(self, occurrence_id: UUID) -> int | None:
        row = (
            self._conn()
            .execute(
                "SELECT MAX(attempt) FROM finalized WHERE occurrence_id = ?",
                (occurrence_id.bytes,),
            )
            .fetchone()
        )
        return None if row is None or row[0] is None else int(row[0])

    async def prune(self, *, older_than: float, max_entries: int) -> int:
        """Forget finalized attempts recorded before ``older_than`` (epoch seconds) and all
        but the newest ``max_entries``; how many were removed."""
        return await self._call(self._prune, older_than, max_entries)

    def _prune(self, older_than: float, max_entries: int) -> int:
        db = self._conn()
        with _immediate(db):
            removed = db.execute(
                "DELETE FROM finalized WHERE finalized_at < ?", (older_than,)
            ).rowcount
            row = db.execute(
                "SELECT finalized_at FROM finalized ORDER BY finalized_at DESC LIMIT 1 OFFSET ?",
                (max_entries,),
            ).fetchone()
            if row is not None:
                removed += db.execute(
                    "DELETE FROM finalized WHERE finalized_at <= ?", (row[0],)
                ).rowcount
        return removed

    # --- small values ---------------------------------------------------------------------

    async def get_meta(self, key: str) -> str | None:
        return await self._call(self._get_meta, key)

    def _get_meta(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    async def set_meta(self, key: str, value: str) -> None:
        await self._call(self._set_meta, key, value)

    def _set_meta(self, key: str, value: str) -> None:
        db = self._conn()
        with _immediate(db):
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # --- one flush --------------------------------------------------------------------------

    async def save(
        self,
        *,
        outbox: Sequence[tuple[OutboxKind, bytes, int]] = (),
        finals: Sequence[tuple[UUID, int]] = (),
    ) -> None:
        """In one transaction: append ``(kind, body, record count)`` messages to the outbox
        and record finalized ``(occurrence id, attempt)`` pairs."""
        if outbox or finals:
            await self._call(self._save, list(outbox), list(finals), time.time())

    def _save(
        self,
        outbox: list[tuple[OutboxKind, bytes, int]],
        finals: list[tuple[UUID, int]],
        now: float,
    ) -> None:
        db = self._conn()
        with _immediate(db):
            if outbox:
                db.executemany(
                    "INSERT INTO outbox (kind, body, records, created_at) VALUES (?, ?, ?, ?)",
                    [(kind, body, count, now) for kind, body, count in outbox],
                )
            if finals:
                # One statement for the batch: ``executemany`` steps SQLite once per row, and
                # each step gives up the interpreter's lock and takes it back from the busy
                # event loop. The ids go as one blob of 16 bytes each, the attempts as a JSON
                # array whose index finds each one's id.
                db.execute(
                    _SAVE_FINALS,
                    {
                        "ids": b"".join(oid.bytes for oid, _ in finals),
                        "attempts": json.dumps([attempt for _, attempt in finals]),
                        "now": now,
                    },
                )

    # --- outbox -----------------------------------------------------------------------------

    async def outbox_size(self) -> OutboxSize:
        return await self._call(self._outbox_size)

    def _outbox_size(self) -> OutboxSize:
        row = self._conn().execute("SELECT COUNT(*), TOTAL(records) FROM outbox").fetchone()
        return OutboxSize(int(row[0]), int(row[1]))

    async def outbox_head(self, limit: int) -> list[OutboxEntry]:
        """The oldest ``limit`` outbox messages, oldest first."""
        return await self._call(self._outbox_head, limit)

    def _outbox_head(self, limit: int) -> list[OutboxEntry]:
        rows = self._conn().execute(
            "SELECT seq, kind, body, records FROM outbox ORDER BY seq LIMIT ?", (limit,)
        )
        return [OutboxEntry(seq, kind, bytes(body), records) for seq, kind, body, records in rows]

    async def drop_outbox(self, seqs: Sequence[int]) -> None:
        """Remove published outbox messages (one transaction)."""
        if seqs:
            await self._call(self._drop_outbox, list(seqs))

    def _drop_outbox(self, seqs: list[int]) -> None:
        db = self._conn()
        with _immediate(db):
            db.executemany("DELETE FROM outbox WHERE seq = ?", [(seq,) for seq in seqs])


def _create_schema(db: sqlite3.Connection) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


@contextlib.contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the write lock at once (no lock upgrade deadlocks)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
