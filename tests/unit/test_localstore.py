"""The worker-local SQLite store: finalized attempts, the outbox, and the state directory lock."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.app.settings import Settings, WorkerSettings
from rota.core.errors import ConfigurationError
from rota.core.ids import new_id
from rota.worker import localstore
from rota.worker.localstore import LOGS, STATUS, LocalStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LocalStore]:
    opened = await LocalStore.open(tmp_path / "state")
    yield opened
    await opened.close()


async def test_opens_in_wal_mode_with_its_tables(store: LocalStore, tmp_path: Path) -> None:
    assert store.directory == tmp_path / "state"
    assert store.path.is_file()
    db = sqlite3.connect(store.path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    finally:
        db.close()
    assert {"finalized", "outbox"} <= tables


async def test_outbox_keeps_order_and_drops_what_was_sent(store: LocalStore) -> None:
    await store.save(outbox=[(STATUS, b"[1]", 1), (LOGS, b"[2,3]", 2)])
    await store.save(outbox=[(STATUS, b"[4]", 1)])
    head = await store.outbox_head(10)
    assert [(e.kind, e.body, e.records) for e in head] == [
        (STATUS, b"[1]", 1),
        (LOGS, b"[2,3]", 2),
        (STATUS, b"[4]", 1),
    ]
    assert [e.seq for e in head] == sorted(e.seq for e in head)
    size = await store.outbox_size()
    assert (size.entries, size.records) == (3, 4)
    await store.drop_outbox([head[0].seq, head[1].seq])
    assert [e.body for e in await store.outbox_head(10)] == [b"[4]"]
    assert [e.body for e in await store.outbox_head(0)] == []


async def test_finalized_attempts(store: LocalStore) -> None:
    first, second = new_id(), new_id()
    assert await store.finalized_attempt(first) is None
    await store.save(finals=[(first, 1), (first, 2), (second, 1)])
    assert await store.finalized_attempt(first) == 2
    assert await store.finalized_attempt(second) == 1
    assert await store.recent_finals(10) == {first: 2, second: 1}
    await store.save()  # nothing to write: no transaction at all


async def test_a_batch_of_finalized_attempts_is_one_statement(store: LocalStore) -> None:
    """``executemany`` would step SQLite once per attempt, each step giving up the
    interpreter's lock and taking it back from the worker's busy event loop."""
    statements: list[str] = []
    await store._call(lambda: store._conn().set_trace_callback(statements.append))
    finals = [(new_id(), 1 + i % 3) for i in range(500)]
    await store.save(finals=finals)
    await store._call(lambda: store._conn().set_trace_callback(None))
    assert len([s for s in statements if "INTO finalized" in s]) == 1
    assert await store.recent_finals(1000) == dict(finals)


async def test_outbox_and_finals_survive_a_restart(tmp_path: Path) -> None:
    oid = new_id()
    store = await LocalStore.open(tmp_path)
    await store.save(outbox=[(STATUS, b"[]", 0)], finals=[(oid, 3)])
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(RuntimeError):
        await store.outbox_head(1)
    again = await LocalStore.open(tmp_path)
    try:
        assert again.directory == tmp_path  # the lock was released: same directory
        assert await again.finalized_attempt(oid) == 3
        assert [e.body for e in await again.outbox_head(5)] == [b"[]"]
    finally:
        await again.close()


async def test_prune_by_age_and_by_count(store: LocalStore) -> None:
    old, kept = new_id(), [new_id() for _ in range(5)]
    await store.save(finals=[(old, 1)])
    cutoff = time.time()
    for oid in kept:
        await store.save(finals=[(oid, 1)])
    assert await store.prune(older_than=cutoff, max_entries=100) == 1
    assert await store.finalized_attempt(old) is None
    assert await store.prune(older_than=cutoff, max_entries=2) == 3
    assert set(await store.recent_finals(100)) == set(kept[-2:])


async def test_a_held_directory_falls_back_to_a_numbered_one(tmp_path: Path) -> None:
    base = tmp_path / "w"
    first = await LocalStore.open(base)
    second = await LocalStore.open(base)
    try:
        assert first.directory == base
        assert second.directory == base / "instance-1"
        await second.save(finals=[(new_id(), 1)])
    finally:
        await second.close()
    third = await LocalStore.open(base)  # instance-1 is free again: reused, not a new one
    try:
        assert third.directory == base / "instance-1"
        assert len(await third.recent_finals(10)) == 1
    finally:
        await third.close()
        await first.close()


async def test_a_directory_locked_by_another_process_is_not_shared(tmp_path: Path) -> None:
    base = tmp_path / "w"
    base.mkdir()
    script = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()"
    )
    lock = str(base / localstore.LOCK_NAME)
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, lock, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert await holder.stdout.readline() == b"locked\n"
        store = await LocalStore.open(base)
        try:
            assert store.directory == base / "instance-1"
        finally:
            await store.close()
    finally:
        holder.kill()
        await holder.communicate()
    store = await LocalStore.open(base)  # the holder is gone: its lock went with it
    try:
        assert store.directory == base
    finally:
        await store.close()


async def test_every_directory_held_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(localstore, "MAX_INSTANCES", 1)
    held = [await LocalStore.open(tmp_path), await LocalStore.open(tmp_path)]
    try:
        with pytest.raises(ConfigurationError, match="state-dir"):
            await LocalStore.open(tmp_path)
    finally:
        for store in held:
            await store.close()


def test_state_path_defaults_to_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert settings.worker.state_path(tmp_path, "reports") == tmp_path / "workers" / "reports"
    assert settings.worker.state_path(tmp_path, "../x/y") == tmp_path / "workers" / "_x_y"
    chosen = WorkerSettings(state_dir=tmp_path / "mine")
    assert chosen.state_path(tmp_path, "reports") == tmp_path / "mine"
