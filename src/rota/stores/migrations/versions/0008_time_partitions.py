"""PostgreSQL: ``occurrences`` (by ``scheduled_for``), ``occurrence_status_changes`` and
``occurrence_logs`` (by ``timestamp``) partitioned by time, so retention drops whole partitions.

Each table is rebuilt: the old one renamed away (with its indexes and sequence), the
partitioned one created with a default partition and one partition per calendar month from
its oldest row to two months ahead, the rows copied over, the sequence carried on, the old
table dropped. The copy holds an exclusive lock on the old tables for its duration: stop the
servers and workers for this migration (see ``docs/operations.md``, "Upgrades"). The primary
keys now include the partition column (PostgreSQL requires it), and so does the key that
stores a log line once. SQLite is left as it is.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from alembic import op
from sqlalchemy import Column, Index, MetaData, PrimaryKeyConstraint, Table, UniqueConstraint, text
from sqlalchemy.engine import Connection

from rota.stores.partitions import create_default_sql, create_partition_sql, periods

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PARTITIONED_BY = {
    "occurrences": "scheduled_for",
    "occurrence_status_changes": "timestamp",
    "occurrence_logs": "timestamp",
}
SERIAL = {"occurrence_status_changes": "id", "occurrence_logs": "seq"}
"""The tables with a serial column (its sequence is ``<table>_<column>_seq``)."""
WIDENED = {"uq_occurrence_logs_line"}
"""Unique keys that take the partition column in (besides the primary keys)."""

# The tables are rebuilt from what the database has (reflected), not from the current
# schema module, so that this migration stays right when later ones change these tables.


def _reflect(conn: Connection, table: str) -> Table:
    return Table(table, MetaData(), autoload_with=conn)


def _rename_away(conn: Connection, table: str, suffix: str) -> str:
    """Rename ``table``, its indexes (constraints follow their indexes) and its sequence."""
    old = f"{table}{suffix}"
    conn.execute(text(f"ALTER TABLE {table} RENAME TO {old}"))
    indexes = conn.execute(
        text(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = to_regclass(:t)"
        ),
        {"t": old},
    ).scalars()
    for index in list(indexes):
        conn.execute(text(f"ALTER INDEX {index} RENAME TO {index}{suffix}"))
    if table in SERIAL:
        sequence = f"{table}_{SERIAL[table]}_seq"
        conn.execute(text(f"ALTER SEQUENCE {sequence} RENAME TO {sequence}{suffix}"))
    return old


def _keyed(names: list[str], partition_column: str, partitioned: bool) -> list[str]:
    """A key's columns with the partition column taken in (or out)."""
    names = [n for n in names if n != partition_column]
    return [*names, partition_column] if partitioned else names


def _rebuilt(found: Table, partitioned: bool) -> Table:
    """``found`` (reflected) as a new table: partitioned by time or not."""
    name = found.name
    column = PARTITIONED_BY[name]
    columns = []
    for c in found.columns:
        serial = SERIAL.get(name) == c.name
        columns.append(
            Column(
                c.name,
                c.type,
                nullable=c.nullable,
                autoincrement=serial,
                server_default=None if serial or c.server_default is None else c.server_default,
            )
        )
    pk_name = str(found.primary_key.name)
    pk = [c.name for c in found.primary_key.columns]
    pk_columns = _keyed(pk, column, partitioned)
    items: list[Any] = [*columns, PrimaryKeyConstraint(*pk_columns, name=pk_name)]
    for unique in found.constraints:
        if isinstance(unique, UniqueConstraint):
            items.append(UniqueConstraint(*[c.name for c in unique.columns], name=unique.name))
    for index in found.indexes:
        names = [c.name for c in index.columns]
        if index.name in WIDENED:
            names = _keyed(names, column, partitioned)
        items.append(Index(index.name, *names, unique=index.unique))
    kw: dict[str, Any] = {"postgresql_partition_by": f"RANGE ({column})"} if partitioned else {}
    return Table(name, MetaData(), *items, **kw)


def _rebuild(conn: Connection, suffix: str, partitioned: bool) -> None:
    for table in PARTITIONED_BY:
        new = _rebuilt(_reflect(conn, table), partitioned)
        old = _rename_away(conn, table, suffix)
        new.create(conn)
        if partitioned:
            _create_partitions(conn, table, old)
        columns = ", ".join(f'"{c.name}"' for c in new.columns)
        conn.execute(text(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {old}"))
        if table in SERIAL:
            serial = SERIAL[table]
            conn.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', '{serial}'), "
                    f"coalesce((SELECT max({serial}) FROM {table}), 0) + 1, false)"
                )
            )
        conn.execute(text(f"DROP TABLE {old} CASCADE"))


def _create_partitions(conn: Connection, table: str, old: str) -> None:
    """The default partition and one per month from the oldest row of ``old`` to two months
    after the current one (``rota server`` keeps creating them ahead)."""
    column = PARTITIONED_BY[table]
    now = datetime.now(UTC)
    oldest = conn.execute(text(f"SELECT min({column}) FROM {old}")).scalar() or now
    conn.execute(text(create_default_sql(table)))
    for start, end in periods(min(oldest, now), now, "month", ahead=2):
        conn.execute(text(create_partition_sql(table, start, end)))


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    _rebuild(conn, "_unpartitioned", partitioned=True)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    _rebuild(conn, "_partitioned", partitioned=False)
