"""PostgreSQL for the tests that run on each store kind (the store contract suites and the
services over every store): the local server, a database per test (cloned from a template
migrated once per session, the ``pg_template`` fixture in ``tests/conftest.py``), and the
``store`` fixture on each store kind, which a module or conftest imports to use instead of
``tests/conftest.py``'s SQLite one."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest

from rota.app.settings import Settings
from rota.core.ports import Store
from rota.stores.sql import SqlStore
from tests.api_runtime import MiniRuntime, mini_runtime

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_ADMIN_URL = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"


def pg_url(database: str) -> str:
    return f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{database}"


async def pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def require_postgres(error: str | None) -> None:
    """Skip the test (fail it under CI) when PostgreSQL is unreachable (``error`` is the
    ``pg_error`` fixture)."""
    if error is None:
        return
    message = f"PostgreSQL unreachable on {PG_HOST}:{PG_PORT}: {error}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def pg_database(template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database (a clone of ``template`` if given), dropped afterwards."""
    name = f"rota_test_{uuid.uuid4().hex[:12]}"
    clone = f' TEMPLATE "{template}"' if template else ""
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"{clone}'))
    try:
        yield pg_url(name)
    finally:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open :class:`SqlStore` on a fresh database, for each store kind (``store_kind``)."""
    instance = SqlStore(store_url)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture(name="runtime")
def store_runtime(store: SqlStore, store_url: str, tmp_path: Path) -> MiniRuntime:
    """``runtime``: the API's smallest runtime on :func:`store` (each store kind), for a module
    that tests the API on every store (it imports this and ``store``;
    ``tests/integration/conftest.py``'s ``client`` then talks to it)."""
    settings = Settings(environment="test", data_dir=tmp_path, database_url=store_url)
    return mini_runtime(store, settings)
