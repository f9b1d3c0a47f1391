"""Schema migrations (Alembic, configured here: no ``alembic.ini``).

``await upgrade(url)`` brings a database to the newest schema. Alembic runs on the sync face of
an async connection (``run_sync``), inside one transaction; on PostgreSQL an advisory lock keeps
several servers starting at once from migrating concurrently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Connection

from rota.stores.files import private_sqlite
from rota.stores.sql.engine import create_store_engine, guard_errors
from rota.stores.urls import dialect_of, sqlite_path, to_async_url

MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x726F7461  # "rota"

_Action: TypeAlias = Callable[[Connection, Config], None]


def alembic_config(url: str) -> Config:
    """An Alembic configuration for the store's migrations against ``url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["url"] = to_async_url(url)
    return config


async def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` (a plain user URL) to ``revision``.

    Creates the directory of a SQLite file. Raises ``BackendUnavailableError`` when the
    database cannot be reached.
    """
    await _run(url, lambda conn, config: command.upgrade(config, revision))


async def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` back to ``revision`` (``base``: no tables)."""
    await _run(url, lambda conn, config: command.downgrade(config, revision))


async def current_revision(url: str) -> str | None:
    """The revision the database is at (``None``: never migrated)."""
    revisions: list[str | None] = []

    def read(conn: Connection, _config: Config) -> None:
        revisions.append(MigrationContext.configure(conn).get_current_revision())

    await _run(url, read, lock=False)
    return revisions[0]


async def _run(url: str, action: _Action, *, lock: bool = True) -> None:
    path = sqlite_path(url)
    if path is not None:
        private_sqlite(path)
    config = alembic_config(url)
    # SQLite: foreign keys off while batch operations rebuild tables (a rebuild drops the old
    # table, which would cascade).
    engine = create_store_engine(url, pool_size=1, foreign_keys=False)
    try:
        async with guard_errors(), engine.begin() as conn:
            if lock and dialect_of(url) == "postgresql":
                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            await conn.run_sync(_with_connection, config, action)
    finally:
        await engine.dispose()


def _with_connection(conn: Connection, config: Config, action: _Action) -> None:
    config.attributes["connection"] = conn
    action(conn, config)
