"""The tags counted as jobs are written (issue 19): ``tag_counts`` (``tag``, ``shard``) ->
``n``, the jobs holding each tag over a few shard rows that writers pick at random, kept in
the transaction of every write that creates, deletes or retags a job (see
``rota.stores.sql.aggregates``). The tags in use with their counts (``GET /tags``, the
dashboard's jobs page) were a pass over every job's tags: seconds at ten million.

The upgrade fills shard 0 from the jobs already stored (one pass).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BACKFILL = {
    "postgresql": "INSERT INTO tag_counts (tag, shard, n) SELECT t.value, 0, count(*) "
    "FROM jobs, jsonb_array_elements_text(jobs.tags) AS t(value) GROUP BY t.value",
    "sqlite": "INSERT INTO tag_counts (tag, shard, n) "
    "SELECT tag, 0, count(*) FROM job_tags GROUP BY tag",
}


def upgrade() -> None:
    op.create_table(
        "tag_counts",
        sa.Column("tag", sa.String(length=200), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tag", "shard", name="pk_tag_counts"),
    )
    op.execute(BACKFILL[op.get_bind().dialect.name])


def downgrade() -> None:
    op.drop_table("tag_counts")
