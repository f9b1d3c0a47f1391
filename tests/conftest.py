"""Fixtures shared by every test tier: a SQLite store copied from a migrated template, the store
kinds (SQLite and PostgreSQL) that the contract suites and the services over every store run
on, and the embedded runtime. Helpers a test imports by name are in ``tests/helpers.py`` and
``tests/stores.py`` (a conftest module cannot be imported)."""

from __future__ import annotations

import asyncio
import gc
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore
from tests.helpers import RuntimeFactory, settings_for
from tests.stores import pg_admin, pg_database, pg_url, require_postgres

if TYPE_CHECKING:  # the whole runtime is imported by the tests that build one, not by all
    from rota.app.runtime import Runtime
    from rota.observability.tracing import Tracing


@pytest.fixture(autouse=True)
def _earlier_objects_frozen() -> None:
    """Before each test, the garbage of the tests before it is collected and what survives is
    frozen (``gc.freeze``), as ``rota server`` freezes what its start-up made
    (``tune_process``): the collector then scans only what this test makes. A test process
    holds what hundreds of tests imported and cached (1.5 M objects after 100 integration
    tests), and a collection of its oldest generation over all of that stalled the running
    test for over a second (a fire sent ahead seen only after its due time; a teardown's
    collection took 4 s in CI)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per session, copied by each SQLite test."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    asyncio.run(upgrade(f"sqlite:///{path}"))
    return path


@pytest.fixture
def url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite database in ``tmp_path``: a copy of the session's template."""
    path = tmp_path / "rota.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
async def store(url: str) -> AsyncIterator[SqlStore]:
    """A store open on :func:`url` (``tests.stores.store``, which the contract suites take,
    runs on every store kind)."""
    sql = SqlStore(url)
    await sql.open()
    yield sql
    await sql.close()


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
    require_postgres(pg_error)
    name = f"rota_tpl_{uuid.uuid4().hex[:12]}"
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(upgrade(pg_url(name)))
        yield name
    finally:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


STORE_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORE_KINDS)
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
    require_postgres(request.getfixturevalue("pg_error"))
    with pg_database() as url:
        yield url


@pytest.fixture
async def runtime_factory(tmp_path: Path) -> AsyncIterator[RuntimeFactory]:
    """Builds and starts a whole embedded runtime (SQLite in ``tmp_path``, the in-memory
    index, coordination and broker, the worker running ``job_modules``) from
    :func:`tests.helpers.settings_for` with ``settings_overrides`` (dotted paths); stops each
    one it started (``grace`` seconds) when the test ends, the last started first."""
    started: list[tuple[Runtime, float]] = []

    async def make(
        settings_overrides: Mapping[str, Any] | None = None,
        job_modules: Sequence[str] = (),
        *,
        tracing: Tracing | None = None,
        grace: float = 2.0,
    ) -> Runtime:
        from rota.app.server import prepare

        settings = settings_for(tmp_path, settings_overrides)
        runtime = await prepare(settings, list(job_modules), tracing)
        await runtime.start()
        started.append((runtime, grace))
        return runtime

    try:
        yield make
    finally:
        for runtime, grace in reversed(started):
            await runtime.stop(grace=grace)
