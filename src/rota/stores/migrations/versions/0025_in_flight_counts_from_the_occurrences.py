"""A job's in-flight occurrences are counted from the occurrences (issue 19):
``occurrence_counts`` keeps the settled statuses only. Queued and Running are still in
``occurrence_totals`` (the overview); a job's own are counted from its occurrences when asked
(the ``(job_id, status, id)`` index), as many entries as it has queued or running.

Counting them in ``occurrence_counts`` cost every occurrence two more writes (its job's
Queued row added to at dispatch, taken from at the end) and left a row of zeros behind for
every job: a finished one-time job's counts were two rows, now one.

The upgrade removes the in-flight rows and the rows of zeros; the downgrade counts the
in-flight ones again from the occurrences.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE = "0, 1"  # Queued, Running


def upgrade() -> None:
    op.execute(f"DELETE FROM occurrence_counts WHERE status IN ({_LIVE}) OR n = 0")


def downgrade() -> None:
    op.execute(
        "INSERT INTO occurrence_counts (job_id, status, n) "
        f"SELECT job_id, status, count(*) FROM occurrences WHERE status IN ({_LIVE}) "
        "GROUP BY job_id, status"
    )
