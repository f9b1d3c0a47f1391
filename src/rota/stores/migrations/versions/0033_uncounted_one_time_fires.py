"""A one-time job's fire writes no count row (issue 34, "a two-write record"): its
occurrence is its job's counts and run statistics, read from the occurrence itself.

``occurrences`` gains ``counted`` (``true``: the occurrence is in its job's
``occurrence_counts`` rows, as every occurrence was before; ``false``: it is not, and the
readers of a job's counts add it from its row) and the partial index
``ix_occurrences_uncounted`` on ``job_id`` of the uncounted ones, through which the readers
find them. Nothing is copied: every stored occurrence stays counted. The downgrade folds
the uncounted occurrences into ``occurrence_counts`` (their settled status, and for a final
status a run, with the Completed ones' durations) before the column goes.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: str | Sequence[str] | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FOLD = """
INSERT INTO occurrence_counts (job_id, status, n, runs, duration_sum, duration_count)
SELECT job_id, status, count(*),
       sum(CASE WHEN status IN (2, 3, 4, 5, 7) THEN 1 ELSE 0 END),
       coalesce(sum(CASE WHEN status = 2 THEN duration_ms END), 0),
       count(CASE WHEN status = 2 THEN duration_ms END)
FROM occurrences WHERE NOT counted AND status NOT IN (0, 1)
GROUP BY job_id, status
ON CONFLICT (job_id, status) DO UPDATE SET
    n = occurrence_counts.n + excluded.n,
    runs = occurrence_counts.runs + excluded.runs,
    duration_sum = occurrence_counts.duration_sum + excluded.duration_sum,
    duration_count = occurrence_counts.duration_count + excluded.duration_count
"""
"""Each uncounted occurrence's part of its job's counts, as the status tracker writes it
for a counted one (statuses: 0 Queued and 1 Running are never kept; 2 Completed, 3 Failed,
4 Cancelled, 5 TimedOut and 7 Skipped are final)."""


def upgrade() -> None:
    op.add_column(
        "occurrences", sa.Column("counted", sa.Boolean(), nullable=False, server_default=sa.true())
    )
    op.execute("CREATE INDEX ix_occurrences_uncounted ON occurrences (job_id) WHERE NOT counted")


def downgrade() -> None:
    op.execute(_FOLD)
    op.execute("DROP INDEX ix_occurrences_uncounted")
    op.execute("ALTER TABLE occurrences DROP COLUMN counted")  # SQLite 3.35+
