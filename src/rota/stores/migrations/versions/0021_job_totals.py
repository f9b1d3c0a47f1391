"""The jobs counted as they are written (issue 19): ``job_totals`` (``shard``) -> ``jobs``,
``active``, the number of jobs and of active jobs over a few shard rows that writers pick at
random, kept in the transaction of every write that adds or removes a job or changes whether
it is active (see ``rota.stores.sql.aggregates``). The overview read them from a count of
every job, a second at ten million.

The upgrade fills shard 0 from the jobs already stored (one pass).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BACKFILL = (
    "INSERT INTO job_totals (shard, jobs, active) "
    "SELECT 0, count(*), coalesce(sum(CASE WHEN is_active THEN 1 ELSE 0 END), 0) FROM jobs"
)
"""Shard 0 from the stored jobs (``rebuild_aggregates`` runs the same statement, from
``backfill_sql``: a migration keeps its own copy)."""


def upgrade() -> None:
    op.create_table(
        "job_totals",
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("active", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", name="pk_job_totals"),
    )
    op.execute(BACKFILL)


def downgrade() -> None:
    op.drop_table("job_totals")
