"""An occurrence's status history lives in its row (issue 34, "a two-write record"):
``occurrences.history``, a JSON array of its changes oldest first (``jsonb`` on PostgreSQL),
replaces ``occurrence_status_changes`` (a row per change: three rows a run).

Each entry: ``at`` (UTC, ``YYYY-MM-DD HH:MM:SS.ffffff``), ``to`` and ``attempt``, and
``from`` and ``reason`` when not null; statuses as their codes. The upgrade carries every
stored change into its occurrence's array (in the order of the old rows' ids), then drops the
old table (on PostgreSQL with its time partitions); a change whose occurrence is gone goes
with it. The downgrade writes the arrays back as rows (on PostgreSQL into a table partitioned
by month again, as migration 0008 made it) and drops the column.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from rota.stores.partitions import create_default_sql, create_partition_sql, periods

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HISTORY = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
OLD = "occurrence_status_changes"

_FILL_PG = f"""
UPDATE occurrences AS o SET history = h.entries
FROM (
    SELECT occurrence_id, jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'at', to_char(timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),
               'to', to_status, 'attempt', attempt, 'from', from_status, 'reason', reason
           )) ORDER BY id) AS entries
    FROM {OLD} GROUP BY occurrence_id
) AS h
WHERE o.id = h.occurrence_id
"""

_FILL_SQLITE = f"""
UPDATE occurrences SET history = (
    SELECT json_group_array(json(entry)) FROM (
        SELECT json_patch(
                   json_object('at', s.timestamp, 'to', s.to_status, 'attempt', s.attempt),
                   json_object('from', s.from_status, 'reason', s.reason)
               ) AS entry
        FROM {OLD} AS s WHERE s.occurrence_id = occurrences.id ORDER BY s.id
    )
)
WHERE id IN (SELECT occurrence_id FROM {OLD})
"""
"""(``json_patch`` leaves out the members whose value is null, as ``jsonb_strip_nulls``.)"""

_UNFOLD_PG = f"""
INSERT INTO {OLD} (occurrence_id, timestamp, from_status, to_status, attempt, reason)
SELECT o.id, (e.value->>'at')::timestamp AT TIME ZONE 'UTC', (e.value->>'from')::smallint,
       (e.value->>'to')::smallint, (e.value->>'attempt')::integer, e.value->>'reason'
FROM occurrences AS o, jsonb_array_elements(o.history) WITH ORDINALITY AS e(value, n)
WHERE o.history IS NOT NULL
ORDER BY o.id, e.n
"""

_UNFOLD_SQLITE = f"""
INSERT INTO {OLD} (occurrence_id, timestamp, from_status, to_status, attempt, reason)
SELECT o.id, json_extract(e.value, '$.at'), json_extract(e.value, '$.from'),
       json_extract(e.value, '$.to'), json_extract(e.value, '$.attempt'),
       json_extract(e.value, '$.reason')
FROM occurrences AS o, json_each(o.history) AS e
WHERE o.history IS NOT NULL
ORDER BY o.id, e.key
"""


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("occurrences", sa.Column("history", HISTORY, nullable=True))
    op.execute(_FILL_PG if postgres else _FILL_SQLITE)
    op.drop_table(OLD)


def downgrade() -> None:
    conn = op.get_bind()
    postgres = conn.dialect.name == "postgresql"
    key = ["id", "timestamp"] if postgres else ["id"]
    kw: dict[str, Any] = {"postgresql_partition_by": "RANGE (timestamp)"} if postgres else {}
    op.create_table(
        OLD,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("occurrence_id", sa.Uuid(), nullable=False),
        sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_status", sa.SmallInteger(), nullable=True),
        sa.Column("to_status", sa.SmallInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint(*key, name=f"pk_{OLD}"),
        **kw,
    )
    op.create_index(f"ix_{OLD}_occurrence_id_id", OLD, ["occurrence_id", "id"])
    if postgres:
        now = datetime.now(UTC)
        oldest = conn.execute(sa.text("SELECT min(created_at) FROM occurrences")).scalar() or now
        conn.execute(sa.text(create_default_sql(OLD)))
        for start, end in periods(min(oldest, now), now, "month", ahead=2):
            conn.execute(sa.text(create_partition_sql(OLD, start, end)))
    op.execute(_UNFOLD_PG if postgres else _UNFOLD_SQLITE)
    op.execute("ALTER TABLE occurrences DROP COLUMN history")  # SQLite: 3.35 and later
