"""Files Rota keeps on disk (the SQLite store, the worker's local state, the development key):
directories it creates are readable by their owner only (0700), and so are its database files
(0600, and SQLite gives its ``-wal`` and ``-shm`` files the database file's mode). And the lock
that makes one process the owner of a SQLite store (:class:`StoreOwnerLock`)."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import socket
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from rota.core.errors import ConfigurationError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

PRIVATE_DIR: Final = 0o700
PRIVATE_FILE: Final = 0o600
SQLITE_COMPANIONS: Final = ("-wal", "-shm", "-journal")


def private_dir(path: Path) -> Path:
    """``path`` as a directory; every part of it this call creates gets mode 0700 (an existing
    directory is left as it is: its owner chose its mode)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            part.mkdir(mode=PRIVATE_DIR)
            os.chmod(part, PRIVATE_DIR)  # mkdir's mode is cut by the umask only, never widened
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty with mode 0600 unless it exists."""
    private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    return path


def private_sqlite(path: Path) -> Path:
    """A SQLite database file created 0600 before SQLite opens it (which would create it 0644
    under the usual umask); an existing one, and its ``-wal``/``-shm``, lose group and other
    access if they have it."""
    private_file(path)
    for file in (path, *(path.with_name(path.name + s) for s in SQLITE_COMPANIONS)):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            mode = stat.S_IMODE(file.stat().st_mode)
            if mode & 0o077:
                os.chmod(file, mode & 0o700)
    return path


# --- one owner per embedded store -------------------------------------------------------------

OWNER_LOCK_SUFFIX: Final = ".lock"
"""The owner lock of a SQLite store ``rota.db`` is ``rota.db.lock`` beside it."""
_DESCRIPTION_BYTES: Final = 4096


class StoreOwnerLock:
    """The lock that makes one process the owner of a SQLite store (``rota dev`` / ``rota
    server`` embedded): an exclusive ``flock`` on a file beside the database, held while the
    process keeps the file open. The kernel drops it when the process ends, however it ends
    (``kill -9`` included), so nothing is left to clean up. The file holds the owner's
    description (pid, host, command, start time) for the message a second process gets."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.path = database.with_name(database.name + OWNER_LOCK_SUFFIX)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, create: bool = True) -> bool:
        """Take the lock and write this process's description into the file. ``create``
        false: a store with no lock file yet (nothing ever ran on it) is left alone and the
        answer is false. Another process holding it: a :class:`ConfigurationError` naming
        that process."""
        if self._fd is not None:
            return True
        if create:
            private_dir(self.path.parent)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            fd = os.open(self.path, flags, PRIVATE_FILE)
        except FileNotFoundError:
            if create:
                raise
            return False
        if fcntl is None:  # pragma: no cover - not POSIX: no lock
            self._fd = fd
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_description(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigurationError(self._in_use(holder)) from None
            raise ConfigurationError(f"cannot lock {self.path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, orjson.dumps(process_description()), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        """Let go of the store (idempotent). The description stays: the next owner
        overwrites it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # releases the flock

    def _in_use(self, holder: dict[str, Any] | None) -> str:
        who = "another process (its description could not be read)"
        if holder is not None:
            who = (
                f"pid {holder.get('pid')} on {holder.get('host')} "
                f"(`{holder.get('command')}`, since {holder.get('since')})"
            )
        return (
            f"the store {self.database} is in use by {who}: one process owns an embedded "
            "(SQLite) store. Stop that one, or give this one a data dir of its own "
            "(--data-dir or ROTA_DATA_DIR); several servers share a PostgreSQL store instead"
        )


def process_description() -> dict[str, Any]:
    """This process as a store's owner lock describes it."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("__main__.py", "rota"):
        argv[0] = "rota"
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": shlex.join(argv),
        "since": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }


def _read_description(fd: int) -> dict[str, Any] | None:
    """The description in an owner lock file; ``None`` if it is empty or not one (an owner
    that has just taken the lock and not written yet)."""
    try:
        found = orjson.loads(os.pread(fd, _DESCRIPTION_BYTES, 0))
    except (OSError, orjson.JSONDecodeError):
        return None
    return found if isinstance(found, dict) else None
