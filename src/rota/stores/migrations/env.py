"""Alembic environment of the SQL store, driven by :mod:`rota.stores.migrate`.

``migrate`` runs Alembic on a synchronous connection it takes from an async engine
(``AsyncConnection.run_sync``) and hands it over in ``config.attributes["connection"]``; offline
mode (``--sql``) reads the URL from ``config.attributes["url"]``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from rota.stores.schema import metadata, metadata_for


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata_for(connection.dialect.name),
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        transaction_per_migration=False,
    )


def run_offline() -> None:
    context.configure(
        url=context.config.attributes["url"],
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through rota.stores.migrate (or `rota migrate`)")
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
