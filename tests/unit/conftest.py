"""Fixtures shared by the unit tests that need a real store: a migrated SQLite database in the
test's temporary directory, and a store opened on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore


@pytest.fixture
async def url(tmp_path: Path) -> str:
    """A migrated SQLite database."""
    url = f"sqlite:///{tmp_path / 'rota.db'}"
    await upgrade(url)
    return url


@pytest.fixture
async def store(url: str) -> AsyncIterator[SqlStore]:
    sql = SqlStore(url)
    await sql.open()
    yield sql
    await sql.close()
