"""Database URLs as users write them (``sqlite:///path``, ``postgresql://…``) mapped to the async
drivers the store uses (aiosqlite, asyncpg)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from rota.core.errors import ConfigurationError
from rota.core.redact import mask_urls

Dialect = Literal["sqlite", "postgresql"]

_DRIVERS: dict[str, tuple[Dialect, str]] = {
    "sqlite": ("sqlite", "sqlite+aiosqlite"),
    "sqlite+aiosqlite": ("sqlite", "sqlite+aiosqlite"),
    "postgres": ("postgresql", "postgresql+asyncpg"),
    "postgresql": ("postgresql", "postgresql+asyncpg"),
    "postgresql+asyncpg": ("postgresql", "postgresql+asyncpg"),
}


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(mask_urls(f"invalid database URL {url!r}: {exc}")) from exc


def _driver(url: URL) -> tuple[Dialect, str]:
    try:
        return _DRIVERS[url.drivername]
    except KeyError:
        raise ConfigurationError(
            f"unsupported database URL scheme {url.drivername!r}: use sqlite:///path/to/file.db "
            "or postgresql://user:password@host:5432/database"
        ) from None


def dialect_of(url: str) -> Dialect:
    """``sqlite`` or ``postgresql``; ``ConfigurationError`` for anything else."""
    return _driver(_parse(url))[0]


def to_async_url(url: str) -> str:
    """The URL with the async driver Rota uses (``sqlite+aiosqlite``, ``postgresql+asyncpg``).

    Raises ``ConfigurationError`` for other schemes, and when the PostgreSQL driver is missing.
    """
    parsed = _parse(url)
    dialect, drivername = _driver(parsed)
    if dialect == "postgresql":
        require_asyncpg()
    elif parsed.database in (None, "", ":memory:"):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be shared; give a file: sqlite:///path/to/rota.db"
        )
    return parsed.set(drivername=drivername).render_as_string(hide_password=False)


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL, ``None`` for other URLs."""
    parsed = _parse(url)
    if _driver(parsed)[0] != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database)


def require_asyncpg() -> None:
    """Raise an actionable ``ConfigurationError`` when asyncpg is not installed."""
    if importlib.util.find_spec("asyncpg") is None:
        raise ConfigurationError(
            "PostgreSQL needs the asyncpg driver: pip install 'rota[postgres]'"
        )
