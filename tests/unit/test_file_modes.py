"""What Rota writes to disk is its owner's only: directories 0700, database files 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.app.settings import Settings
from rota.cli.users import list_users
from rota.stores.files import private_sqlite
from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore
from rota.worker.localstore import LocalStore


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask most systems run with (022): without Rota's care files come out 0644."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(directory: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in directory.iterdir() if p.is_file()}


async def test_the_data_dir_and_the_sqlite_store_are_private(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)  # a directory of the user's
    data = tmp_path / "deploy" / "data"
    await list_users(Settings(environment="test", data_dir=data))  # creates and migrates
    assert mode(data) == 0o700
    assert mode(data.parent) == 0o700  # created by Rota too
    assert mode(tmp_path) == 0o755  # not created by Rota: left as it was
    store = SqlStore(Settings(environment="test", data_dir=data).effective_database_url)
    await store.open()
    try:
        await store.ping()
        files = modes(data)
    finally:
        await store.close()
    assert {"rota.db", "rota.db-wal", "rota.db-shm"} <= set(files), files
    assert set(files.values()) == {0o600}, files


async def test_an_existing_database_is_tightened_on_migration(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    await upgrade(f"sqlite:///{db}")
    os.chmod(db, 0o644)  # made by an earlier version
    await upgrade(f"sqlite:///{db}")
    assert mode(db) == 0o600


def test_existing_companions_lose_group_and_other_access(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    for path in (db, tmp_path / "old.db-wal", tmp_path / "old.db-shm"):
        path.touch()
        os.chmod(path, 0o664)
    os.chmod(tmp_path / "old.db-shm", 0o640)
    private_sqlite(db)
    assert modes(tmp_path) == {"old.db": 0o600, "old.db-wal": 0o600, "old.db-shm": 0o600}


def test_private_sqlite_creates_the_file_0600(tmp_path: Path) -> None:
    path = private_sqlite(tmp_path / "new" / "x.db")
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert path.read_bytes() == b""


async def test_the_worker_state_is_private(tmp_path: Path) -> None:
    base = Settings(environment="test").worker.state_path(tmp_path / "data", "email-worker")
    store = await LocalStore.open(base)
    try:
        await store.recent_finals(10)
        files = modes(store.directory)
    finally:
        await store.close()
    assert mode(tmp_path / "data") == 0o700
    assert mode(tmp_path / "data" / "workers") == 0o700
    assert mode(base) == 0o700
    assert {"lock", "worker.sqlite3"} <= set(files), files
    assert set(files.values()) == {0o600}, files
