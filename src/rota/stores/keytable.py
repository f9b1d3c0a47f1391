"""The ``api_keys`` table (docs/security.md#api-keys), out of :mod:`rota.stores.schema` for
that module's length cap: only the SHA-256 of a key's secret is kept, and a name is unique
among the keys that are not revoked (a partial unique index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Column, Index, MetaData, String, Table, Uuid, text

LIVE_KEYS = text("revoked_at IS NULL")


def api_keys_table(metadata: MetaData, utc: type[Any], json: Callable[[], Any]) -> Table:
    """Add the table to ``metadata`` (``utc``, ``json``: the schema's column types)."""
    return Table(
        "api_keys",
        metadata,
        Column("id", Uuid(), primary_key=True),
        Column("name", String(100), nullable=False),
        Column("role", String(20), nullable=False),
        Column("job_types", json()),
        Column("tags", json()),
        Column("secret_hash", String(64), nullable=False),
        Column("created_at", utc(), nullable=False),
        Column("created_by", String(110), nullable=False),
        Column("expires_at", utc()),
        Column("last_used_at", utc()),
        Column("revoked_at", utc()),
        Column("revoked_by", String(110)),
        Index(
            "ux_api_keys_live_name",
            "name",
            unique=True,
            sqlite_where=LIVE_KEYS,
            postgresql_where=LIVE_KEYS,
        ),
    )
