"""Fixtures shared by the unit tests that need a real store: a migrated SQLite database in the
test's temporary directory (a copy of the session's migrated template), and a store opened on
it."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.stores.sql import SqlStore


@pytest.fixture
def url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite database: a copy of the session's template (``tests/conftest.py``)."""
    path = tmp_path / "rota.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
async def store(url: str) -> AsyncIterator[SqlStore]:
    sql = SqlStore(url)
    await sql.open()
    yield sql
    await sql.close()
