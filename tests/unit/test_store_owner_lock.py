"""One owner per embedded store (``rota.stores.files.StoreOwnerLock``): the lock beside a SQLite
store that a second ``rota dev`` / ``rota server`` finds held, naming the process that holds
it; the kernel drops it with its process, so a killed owner leaves nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rota.app.adapters import store_owner_lock
from rota.core.errors import ConfigurationError
from rota.stores.files import StoreOwnerLock

HOLD = (
    "import sys; from pathlib import Path; from rota.stores.files import StoreOwnerLock; "
    "StoreOwnerLock(Path(sys.argv[1])).acquire(); print('held', flush=True); sys.stdin.read()"
)


def test_the_lock_lies_beside_the_sqlite_store_and_postgresql_has_none(tmp_path: Path) -> None:
    lock = store_owner_lock(f"sqlite:///{tmp_path / 'data' / 'rota.db'}")
    assert lock is not None
    assert lock.path == tmp_path / "data" / "rota.db.lock"
    assert store_owner_lock("postgresql://rota@localhost:5432/rota") is None


def test_a_second_owner_is_refused_with_the_first_ones_description(tmp_path: Path) -> None:
    first = StoreOwnerLock(tmp_path / "data" / "rota.db")
    assert first.acquire()
    try:
        assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
        described = orjson.loads(first.path.read_bytes())
        assert described["pid"] == os.getpid()
        assert described["host"] == socket.gethostname()
        assert described["since"].endswith("Z")
        second = StoreOwnerLock(tmp_path / "data" / "rota.db")
        with pytest.raises(ConfigurationError) as refused:
            second.acquire()
        message = refused.value.message
        assert f"pid {os.getpid()} on {socket.gethostname()}" in message
        assert described["since"] in message
        assert "--data-dir" in message
        assert not second.held
    finally:
        first.release()
    assert second.acquire()  # released: the next one takes it
    second.release()


def test_looking_without_creating_leaves_a_new_data_dir_alone(tmp_path: Path) -> None:
    lock = StoreOwnerLock(tmp_path / "data" / "rota.db")
    assert lock.acquire(create=False) is False
    assert not (tmp_path / "data").exists()
    assert lock.acquire()  # creating: the dir (0700) and the file
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    lock.release()
    assert lock.acquire(create=False)  # the file is there now, and free
    lock.release()


def test_a_killed_owner_leaves_no_lock_behind(tmp_path: Path) -> None:
    database = tmp_path / "rota.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(ConfigurationError, match=f"in use by pid {holder.pid} on "):
            StoreOwnerLock(database).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=10)  # and closes its pipes
    assert holder.returncode == -signal.SIGKILL
    lock = StoreOwnerLock(database)
    assert lock.acquire()  # the dead owner's description is still there, its lock is not
    try:
        assert orjson.loads(lock.path.read_bytes())["pid"] == os.getpid()
    finally:
        lock.release()


def test_an_owner_whose_description_is_unreadable_is_still_refused(tmp_path: Path) -> None:
    first = StoreOwnerLock(tmp_path / "rota.db")
    first.acquire()
    try:
        first.path.write_bytes(b"")  # as between an owner's lock and its description
        with pytest.raises(ConfigurationError, match="its description could not be read"):
            StoreOwnerLock(tmp_path / "rota.db").acquire()
    finally:
        first.release()
