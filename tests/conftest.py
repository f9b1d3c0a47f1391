"""Fixtures shared by every test tier: a SQLite store copied from a migrated template, and the
embedded runtime. Helpers a test imports by name are in ``tests/helpers.py`` (a conftest
module cannot be imported)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore
from tests.helpers import RuntimeFactory, settings_for

if TYPE_CHECKING:  # the whole runtime is imported by the tests that build one, not by all
    from rota.app.runtime import Runtime
    from rota.observability.tracing import Tracing


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
    """A store open on :func:`url` (the contract suites' ``store`` runs on every store kind)."""
    sql = SqlStore(url)
    await sql.open()
    yield sql
    await sql.close()


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
