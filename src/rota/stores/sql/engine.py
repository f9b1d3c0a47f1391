"""The SQL store's engines: one per role (SQLite: a writer and readers; PostgreSQL: one pool),
the SQLite pragmas and transaction start, the translation of driver errors, and
:class:`SqlParts`, what every query mixin of :class:`~rota.stores.sql.SqlStore` shares."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from sqlalchemy import ColumnElement, Uuid, any_, bindparam, event
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from rota.core.autodisable import AutoDisableDefaults
from rota.core.errors import BackendUnavailableError, ConflictError
from rota.stores.sql.sealing import Sealing
from rota.stores.urls import dialect_of, to_async_url

if TYPE_CHECKING:
    from rota.stores.sql.batches import _FastBatches
    from rota.stores.sql.hotwriter import HotWriter

# --- engines ----------------------------------------------------------------------------------


def _json_loads(value: Any) -> Any:
    """Parse stored JSON. SQLite gives a column declared ``JSON`` numeric affinity, so a bare
    JSON number comes back already converted to an int or float: take it as it is."""
    if isinstance(value, int | float):
        return value
    return orjson.loads(value)


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


WRITER_CACHE_KIB = 65_536
"""SQLite page cache of the writing connection (one): 64 MiB, for the indexes it updates."""

READER_CACHE_KIB = 8_192
"""SQLite page cache of each reading connection (up to 2 × the reader pool): 8 MiB. Each
connection keeps its own cache, and a scan (a search, an overview) fills it from the file
whatever its size, so the server's memory was the number of readers × this once the store
outgrew it (10 × 64 MiB before); the pages stay in the OS's file cache, shared."""


def create_store_engine(
    url: str,
    *,
    writer: bool = True,
    pool_size: int = 5,
    foreign_keys: bool = True,
    busy_timeout_ms: int = 10_000,
) -> AsyncEngine:
    """An async engine for a user URL (``sqlite:///…`` or ``postgresql://…``).

    For SQLite: ``writer`` connections open ``BEGIN IMMEDIATE`` transactions, others plain
    ``BEGIN``, with a page cache of :data:`WRITER_CACHE_KIB` or :data:`READER_CACHE_KIB`;
    ``foreign_keys`` is turned off only for migrations (batch table rebuilds).
    """
    async_url = to_async_url(url)
    # hide_parameters: a driver error's text (logged, or in a problem's detail) never carries
    # a statement's parameters: password hashes, webhook secrets, job data.
    common: dict[str, Any] = {
        "json_serializer": _json_dumps,
        "json_deserializer": _json_loads,
        "hide_parameters": True,
    }
    if dialect_of(url) == "postgresql":
        return create_async_engine(
            async_url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=True,
            pool_recycle=1800,
            **common,
        )
    engine = create_async_engine(
        async_url, pool_size=pool_size, max_overflow=0 if writer else pool_size, **common
    )
    _configure_sqlite(engine, writer=writer, foreign_keys=foreign_keys, busy_ms=busy_timeout_ms)
    return engine


def sqlite_pragmas(*, writer: bool, foreign_keys: bool, busy_ms: int) -> tuple[str, ...]:
    """What every SQLite connection of a store runs when it opens."""
    return (
        f"PRAGMA busy_timeout={int(busy_ms)}",
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=NORMAL",
        f"PRAGMA cache_size=-{WRITER_CACHE_KIB if writer else READER_CACHE_KIB}",
        "PRAGMA temp_store=MEMORY",
        f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}",
    )


def _configure_sqlite(
    engine: AsyncEngine, *, writer: bool, foreign_keys: bool, busy_ms: int
) -> None:
    pragmas = sqlite_pragmas(writer=writer, foreign_keys=foreign_keys, busy_ms=busy_ms)
    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    def on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the driver; ``on_begin`` emits our own BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    def on_begin(connection: Connection) -> None:
        # On the DBAPI connection: one call to the driver's thread, not a cursor's three
        # (``driver.py``); a transaction begins for every write.
        dbapi: Any = connection.connection.dbapi_connection
        dbapi.execute(begin)

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)


_DRIVER_MODULES = frozenset({"asyncpg", "aiosqlite", "sqlite3"})
"""Top-level modules of the database drivers, whose own exceptions mean the store failed."""


@asynccontextmanager
async def guard_errors() -> AsyncIterator[None]:
    """Translate driver errors: duplicates -> ``ConflictError``, everything else the database
    or the network raised -> ``BackendUnavailableError``."""
    try:
        yield
    except IntegrityError as exc:
        raise ConflictError(f"conflicts with stored data: {exc.orig}") from exc
    except sqlite3.IntegrityError as exc:  # a statement run on the driver itself (driver.py)
        raise ConflictError(f"conflicts with stored data: {exc}") from exc
    except DBAPIError as exc:
        cause = exc.orig if exc.orig is not None else exc
        raise BackendUnavailableError(f"database error: {type(cause).__name__}: {cause}") from exc
    except (PoolTimeoutError, OSError, TimeoutError) as exc:
        raise BackendUnavailableError(f"database unreachable: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        # A driver error SQLAlchemy does not wrap: asyncpg raises its own while connecting
        # (``CannotConnectNowError`` while PostgreSQL starts or stops, ``TooManyConnections``…).
        if type(exc).__module__.split(".")[0] in _DRIVER_MODULES:
            raise BackendUnavailableError(
                f"database unreachable: {type(exc).__name__}: {exc}"
            ) from exc
        raise


class SqlParts(Sealing):
    """What every query mixin of :class:`~rota.stores.sql.SqlStore` shares: the dialect, the
    fast batches, the auto-disable defaults and the connections (the store's own)."""

    _dialect: str
    _fast: _FastBatches
    _auto_disable: AutoDisableDefaults
    _rng: random.Random
    """The store's own draws (the aggregates' shard): the process's global ``random`` is the
    app's, and a library that draws from it changes what the app's seed gives."""
    _writer: AsyncEngine | None
    _hot: HotWriter | None
    """SQLite: the writer of the hot batches' transactions (``None`` on PostgreSQL)."""

    if TYPE_CHECKING:

        def _read(self) -> AbstractAsyncContextManager[AsyncConnection]: ...

        def _write(self) -> AbstractAsyncContextManager[AsyncConnection]: ...

    def _member(self, column: ColumnElement[Any], ids: Sequence[UUID]) -> ColumnElement[bool]:
        """``column IN ids``. On PostgreSQL ``column = ANY($1)`` with one array parameter:
        the statement text is the same for every batch, so neither SQLAlchemy (which renders
        one placeholder per element of an expanding ``IN``) nor the server (which parses and
        plans every new text) repeats work per batch, and asyncpg reuses its prepared
        statement."""
        if self._dialect == "postgresql":
            return column == any_(bindparam(None, list(ids), type_=postgresql.ARRAY(Uuid())))
        return column.in_(ids)
