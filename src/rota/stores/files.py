"""Files Rota keeps on disk (the SQLite store, the worker's local state, the development key):
directories it creates are readable by their owner only (0700), and so are its database files
(0600, and SQLite gives its ``-wal`` and ``-shm`` files the database file's mode)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

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
