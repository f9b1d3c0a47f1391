"""Statistics and control: an index for the throughput and overview aggregates, and the
scheduler's shared switches (the dispatcher's stop/resume).

- ``occurrences``: an index on ``(end_time, status)``: the statistics count finished
  occurrences by the time they ended.
- ``scheduler_control``: ``key`` -> a JSON ``value`` (``dispatcher``: whether dispatching is
  stopped, why, by whom, since when), read by every server.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_index(
        "ix_occurrences_end_time_status", "occurrences", ["end_time", "status"], unique=False
    )
    op.create_table(
        "scheduler_control",
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_scheduler_control"),
    )


def downgrade() -> None:
    op.drop_table("scheduler_control")
    op.drop_index("ix_occurrences_end_time_status", table_name="occurrences")
