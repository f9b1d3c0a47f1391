"""The SQL store: one SQLAlchemy Core (async) implementation for SQLite and PostgreSQL.

The dialect-specific parts are few and named:

- SQLite (aiosqlite): WAL, ``synchronous=NORMAL``, a busy timeout, foreign keys on. Writes go
  through one writer connection, serialized by an asyncio lock, in ``BEGIN IMMEDIATE``
  transactions; the hot batches' transactions (plain fires, completions) each run whole on a
  connection and thread of their own, which the other writes take turns with
  (:mod:`.hotwriter`); reads use a small pool of other connections (WAL readers never block).
- PostgreSQL (asyncpg): one pool for reads and writes; rows being claimed are locked with
  ``FOR UPDATE SKIP LOCKED`` (SQLite's compiler renders no locking clause, which is right: its
  writer lock already serializes the writes).

Hot paths write each batch with one statement per table (executemany / multi-row VALUES).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota.core.autodisable import AutoDisableDefaults
from rota.core.errors import BackendUnavailableError
from rota.core.ports import DependencyAwareStore
from rota.core.sealing import DataSeal
from rota.stores.sql.apikeys import ApiKeyQueries
from rota.stores.sql.batches import _FastBatches
from rota.stores.sql.control import ControlQueries
from rota.stores.sql.dependencies import DependencyQueries
from rota.stores.sql.dispatch import DispatchQueries
from rota.stores.sql.engine import create_store_engine, guard_errors, sqlite_pragmas
from rota.stores.sql.failed import FailedQueries
from rota.stores.sql.fires import FireQueries
from rota.stores.sql.hotwriter import HotWriter
from rota.stores.sql.idempotency import IdempotencyQueries
from rota.stores.sql.jobs import JobQueries
from rota.stores.sql.limits import LimitQueries
from rota.stores.sql.lookup import LookupQueries
from rota.stores.sql.notifications import NotificationQueries
from rota.stores.sql.occurrences import OccurrenceQueries
from rota.stores.sql.pausing import PauseQueries
from rota.stores.sql.rebuild import RebuildQueries
from rota.stores.sql.reencrypt import ReencryptQueries
from rota.stores.sql.retention import RetentionQueries
from rota.stores.sql.routing import RoutingQueries
from rota.stores.sql.security import SecurityQueries
from rota.stores.sql.sending import SendingQueries
from rota.stores.sql.sessions import SessionQueries
from rota.stores.sql.stats import StatsQueries
from rota.stores.sql.status import StatusQueries
from rota.stores.urls import dialect_of, sqlite_path


class SqlStore(
    JobQueries,
    DispatchQueries,
    OccurrenceQueries,
    SendingQueries,
    ControlQueries,
    StatusQueries,
    FailedQueries,
    StatsQueries,
    RetentionQueries,
    RebuildQueries,
    SecurityQueries,
    NotificationQueries,
    IdempotencyQueries,
    FireQueries,
    PauseQueries,
    LimitQueries,
    DependencyQueries,
    RoutingQueries,
    ReencryptQueries,
    SessionQueries,
    ApiKeyQueries,
    LookupQueries,
    DependencyAwareStore,
):
    """The :class:`~rota.core.ports.Store` on SQLite (embedded) or PostgreSQL (distributed).

    ``url`` is a plain user URL (``sqlite:///path/rota.db``, ``postgresql://…``); the schema
    must be migrated first (:func:`rota.stores.migrate.upgrade`).
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        busy_timeout_ms: int = 10_000,
        auto_disable: AutoDisableDefaults | None = None,
        seal: DataSeal | None = None,
    ) -> None:
        """``auto_disable``: the global auto-disable defaults (default: 5 failures in 60 min,
        no probe). ``seal``: the keys job data and results are sealed with at rest (see
        :mod:`rota.stores.sql.sealing`); ``None``: stored and read as they are."""
        self._url = url
        self._auto_disable = auto_disable or AutoDisableDefaults()
        self._dialect = dialect_of(url)
        self._pool_size = pool_size
        self._busy_timeout_ms = busy_timeout_ms
        self._writer: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None
        self._write_lock = asyncio.Lock() if self._dialect == "sqlite" else None
        self._fast = _FastBatches(self._dialect)
        self._seal = seal
        self._rng = random.Random()
        self._hot: HotWriter | None = None

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._dialect

    # --- connections ----------------------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            return
        if self._dialect == "sqlite":
            path = sqlite_path(self._url)
            if path is None or not path.is_file():
                # Connecting would create an empty, unmigrated database file.
                raise BackendUnavailableError(
                    f"no SQLite database at {path}: run `rota migrate` first"
                )
            self._writer = self._engine(writer=True, pool_size=1)
            self._reader = self._engine(writer=False, pool_size=max(2, self._pool_size // 2))
            pragmas = sqlite_pragmas(writer=True, foreign_keys=True, busy_ms=self._busy_timeout_ms)
            self._hot = HotWriter(path, pragmas)
        else:
            self._writer = self._reader = self._engine(writer=True, pool_size=self._pool_size)
        try:
            await self.ping()
            if self._hot is not None:
                await self._hot.open()
        except BaseException:
            await self.close()
            raise

    def _engine(self, *, writer: bool, pool_size: int) -> AsyncEngine:
        return create_store_engine(
            self._url, writer=writer, pool_size=pool_size, busy_timeout_ms=self._busy_timeout_ms
        )

    async def close(self) -> None:
        writer, reader = self._writer, self._reader
        self._writer = self._reader = None
        hot, self._hot = self._hot, None
        if hot is not None:
            await hot.close()
        if writer is not None:
            await writer.dispose()
        if reader is not None and reader is not writer:
            await reader.dispose()

    async def ping(self) -> None:
        async with self._read() as conn:
            await conn.exec_driver_sql("SELECT 1")

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        engine = self._reader
        if engine is None:
            raise RuntimeError("SqlStore is not open: call open() first")
        async with guard_errors(), engine.connect() as conn:
            yield conn

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        engine = self._writer
        if engine is None:
            raise RuntimeError("SqlStore is not open: call open() first")
        async with guard_errors():
            if self._write_lock is None:
                async with engine.begin() as conn:
                    yield conn
            elif self._hot is None:
                async with self._write_lock, engine.begin() as conn:
                    yield conn
            else:  # its turn on the hot writer's thread too (see .hotwriter)
                async with self._write_lock, self._hot.hold(), engine.begin() as conn:
                    yield conn


__all__ = ("SqlStore", "create_store_engine", "guard_errors")
