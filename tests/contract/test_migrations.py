"""Alembic migrations produce exactly the store's table metadata, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from rota.core.errors import BackendUnavailableError
from rota.stores.migrate import alembic_config, current_revision, downgrade, upgrade
from rota.stores.partitions import is_partition_name
from rota.stores.schema import is_search_table, metadata_for
from rota.stores.sql import SqlStore, create_store_engine


def _declared(name: str | None, kind: str, parents: Any) -> bool:
    """Leave the time partitions out (created by the upkeep, not declared), and SQLite's
    search table (a virtual table, with its shadow tables: made by migration 0012)."""
    if kind != "table" or name is None:
        return True
    return not (is_partition_name(name) or is_search_table(name))


def _diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "include_name": _declared}
    )
    return list(compare_metadata(context, metadata_for(conn.dialect.name)))


async def schema_diff(url: str) -> list[Any]:
    engine = create_store_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_diff)
    finally:
        await engine.dispose()


async def test_upgrade_head_equals_metadata(empty_url: str) -> None:
    await upgrade(empty_url)
    assert await schema_diff(empty_url) == []
    head = ScriptDirectory.from_config(alembic_config(empty_url)).get_current_head()
    assert head is not None
    assert await current_revision(empty_url) == head


async def test_upgrade_is_idempotent_and_store_opens(empty_url: str) -> None:
    await upgrade(empty_url)
    await upgrade(empty_url)
    store = SqlStore(empty_url)
    await store.open()
    try:
        await store.ping()
        assert sum((await store.count_occurrences()).values()) == 0
    finally:
        await store.close()


async def test_downgrade_to_base_removes_every_table(empty_url: str) -> None:
    await upgrade(empty_url)
    await downgrade(empty_url, "base")
    assert await current_revision(empty_url) is None
    removed = {d[1].name for d in await schema_diff(empty_url) if d[0] == "add_table"}
    dialect = "postgresql" if empty_url.startswith("postgresql") else "sqlite"
    assert removed == set(metadata_for(dialect).tables)  # PostgreSQL has no job_tags


async def test_store_refuses_a_database_never_migrated(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/missing.db")
    with pytest.raises(BackendUnavailableError, match="rota migrate"):
        await store.open()


async def test_upgrade_of_unreachable_database_raises_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailableError):
        await upgrade("postgresql://postgres@127.0.0.1:1/nowhere")
