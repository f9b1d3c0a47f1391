"""Store fixtures: every store contract test runs on SQLite (a file per test) and PostgreSQL (a
database per test, cloned from a template migrated once per session)."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest

from rota.core.ports import Store
from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore

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


def _require(error: str | None) -> None:
    """Skip the test (fail it under CI) when PostgreSQL is unreachable."""
    if error is None:
        return
    message = f"PostgreSQL unreachable on {PG_HOST}:{PG_PORT}: {error}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_error() -> str | None:
    """``None`` when PostgreSQL answers, else why not."""
    try:
        asyncio.run(pg_admin("SELECT 1"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def pg_template(pg_error: str | None) -> Iterator[str]:
    """A database migrated to head once per session, cloned by each PostgreSQL test."""
    _require(pg_error)
    name = f"rota_tpl_{uuid.uuid4().hex[:12]}"
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(upgrade(pg_url(name)))
        yield name
    finally:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


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


KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of the given kind."""
    if store_kind == "sqlite":
        path = tmp_path / "rota.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    with pg_database(request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
def empty_url(store_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty, never migrated database of the given kind."""
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty' / 'rota.db'}"
        return
    _require(request.getfixturevalue("pg_error"))
    with pg_database() as url:
        yield url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open :class:`SqlStore` on a fresh database, for each store kind."""
    instance = SqlStore(store_url)
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()
