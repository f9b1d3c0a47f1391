"""Schedule bounds (issue 20): interval schedules, start and end, a limit of runs, jitter and
a per-job misfire window.

- ``jobs``: ``interval_seconds`` (an interval schedule, API ``every``), ``start_at`` and
  ``end_at`` (no fire before / after), ``max_runs`` and ``run_count`` (the fires planned to
  run so far, kept by the dispatch), ``jitter_seconds``, ``misfire_window_seconds``.
- ``occurrences``: ``jitter_seconds``: the random delay a fire of a job with jitter was
  given (its ``scheduled_for`` stays the nominal fire time).

All nullable and ``NULL`` when unused: a metadata-only change on PostgreSQL and SQLite alike,
no data is rewritten.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)

JOB_COLUMNS = (
    ("interval_seconds", sa.Integer),
    ("start_at", lambda: UTC_DATETIME),
    ("end_at", lambda: UTC_DATETIME),
    ("max_runs", sa.Integer),
    ("run_count", sa.Integer),
    ("jitter_seconds", sa.Float),
    ("misfire_window_seconds", sa.Float),
)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name, kind in JOB_COLUMNS:
            batch.add_column(sa.Column(name, kind(), nullable=True))
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("jitter_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("jitter_seconds")
    with op.batch_alter_table("jobs") as batch:
        for name, _ in reversed(JOB_COLUMNS):
            batch.drop_column(name)
