"""The recurring jobs' index covers the interval jobs too (issue 20): the silence and
missed-fire checks read the recurring jobs of a bucket through ``ix_jobs_recurring``, whose
predicate named only ``cron_expression``; it becomes ``cron_expression IS NOT NULL OR
interval_seconds IS NOT NULL``, the predicate those reads give.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_jobs_recurring"
CRON_ONLY = "cron_expression IS NOT NULL"
RECURRING = "cron_expression IS NOT NULL OR interval_seconds IS NOT NULL"


def _index(predicate: str) -> None:
    op.drop_index(INDEX, table_name="jobs")
    op.create_index(
        INDEX,
        "jobs",
        ["bucket", "id"],
        sqlite_where=sa.text(predicate),
        postgresql_where=sa.text(predicate),
    )


def upgrade() -> None:
    _index(RECURRING)


def downgrade() -> None:
    _index(CRON_ONLY)
