"""Maintained statistics (issue 19): counts and per-minute figures that every occurrence
write keeps up to date, so the overview and a job's counts read a few rows, not the history.

- ``occurrence_counts``: (``job_id``, ``status``) -> ``n``.
- ``occurrence_totals``: (``shard``, ``status``) -> ``n``: the counts over every job, spread
  over a few shard rows per status that concurrent writers pick at random.
- ``finished_minutes``: (``minute``: epoch seconds, ``shard``, ``status``) -> ``n``,
  ``duration_sum``, ``duration_count`` of the Completed, Failed, TimedOut and Cancelled
  occurrences that ended in that minute.
- ``finished_hours``: the same per hour (``hour``: epoch seconds of its start).

The upgrade fills them from the occurrences already stored (one pass each; on a large
history it takes a while, during which the store should not be written).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WINDOWED = "2, 3, 4, 5"
"""Completed, Failed, Cancelled, TimedOut (OccurrenceStatus codes)."""


def upgrade() -> None:
    op.create_table(
        "occurrence_counts",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "status", name="pk_occurrence_counts"),
    )
    op.create_table(
        "occurrence_totals",
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("shard", "status", name="pk_occurrence_totals"),
    )
    op.create_table(
        "finished_minutes",
        sa.Column("minute", sa.BigInteger(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("duration_sum", sa.Float(), nullable=False),
        sa.Column("duration_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("minute", "shard", "status", name="pk_finished_minutes"),
    )
    op.create_table(
        "finished_hours",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("duration_sum", sa.Float(), nullable=False),
        sa.Column("duration_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "shard", "status", name="pk_finished_hours"),
    )
    if op.get_bind().dialect.name == "postgresql":
        minute = "floor(extract(epoch FROM end_time) / 60)::bigint * 60"
    else:
        minute = "CAST(strftime('%s', end_time) AS INTEGER) / 60 * 60"
    op.execute(
        "INSERT INTO occurrence_counts (job_id, status, n) "
        "SELECT job_id, status, count(*) FROM occurrences GROUP BY job_id, status"
    )
    op.execute(
        "INSERT INTO occurrence_totals (shard, status, n) "
        "SELECT 0, status, sum(n) FROM occurrence_counts GROUP BY status"
    )
    op.execute(
        "INSERT INTO finished_minutes (minute, shard, status, n, duration_sum, duration_count) "
        f"SELECT {minute}, 0, status, count(*), coalesce(sum(duration_ms), 0), "
        f"count(duration_ms) FROM occurrences WHERE end_time IS NOT NULL AND status IN "
        f"({WINDOWED}) GROUP BY 1, 3"
    )
    op.execute(
        "INSERT INTO finished_hours (hour, shard, status, n, duration_sum, duration_count) "
        "SELECT minute / 3600 * 3600, shard, status, sum(n), sum(duration_sum), "
        "sum(duration_count) FROM finished_minutes GROUP BY 1, 2, 3"
    )


def downgrade() -> None:
    op.drop_table("finished_hours")
    op.drop_table("finished_minutes")
    op.drop_table("occurrence_totals")
    op.drop_table("occurrence_counts")
