"""Pause with intent and skip the next N fires (issue 20, point 3): the pause and skip state
of a job, NULL unless used.

- ``jobs.paused_at``, ``paused_by``, ``pause_note``, ``paused_until``: a paused job's fires
  are recorded Skipped (``paused``) until it is resumed or ``paused_until`` comes;
  ``ix_jobs_paused_until`` (partial: the timed pauses only) finds the pauses that ended.
- ``jobs.skip_next``, ``skip_note``: how many of its next fires to record Skipped
  (``skip_next``) instead of running.

Nullable columns only, no data rewritten.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
TIMED_PAUSE = "paused_until IS NOT NULL"
COLUMNS = ("paused_at", "paused_by", "pause_note", "paused_until", "skip_next", "skip_note")


def upgrade() -> None:
    # plain ADD COLUMN (no table rebuild: SQLite keeps the jobs search's triggers)
    op.add_column("jobs", sa.Column("paused_at", UTC_DATETIME, nullable=True))
    op.add_column("jobs", sa.Column("paused_by", sa.String(200), nullable=True))
    op.add_column("jobs", sa.Column("pause_note", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("paused_until", UTC_DATETIME, nullable=True))
    op.add_column("jobs", sa.Column("skip_next", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("skip_note", sa.Text(), nullable=True))
    op.create_index(
        "ix_jobs_paused_until",
        "jobs",
        ["paused_until"],
        sqlite_where=sa.text(TIMED_PAUSE),
        postgresql_where=sa.text(TIMED_PAUSE),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_paused_until", table_name="jobs")
    for column in reversed(COLUMNS):  # SQLite 3.35+ drops a column in place
        op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
