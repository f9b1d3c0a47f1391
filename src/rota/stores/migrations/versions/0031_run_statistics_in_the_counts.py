"""A run's end writes no jobs row (issue 34, "a two-write record"): a job's run statistics
are kept in its ``occurrence_counts`` rows, which the status tracker writes anyway, instead
of in the wide jobs row (an update through its indexes, GIN ones on PostgreSQL, per run).

``occurrence_counts`` gains ``runs`` (how many times the tracker took an occurrence of the
job to that final status; retention and retries do not take it back), ``duration_sum`` and
``duration_count`` (of the Completed runs). The jobs row's ``total_executions``,
``success_count``, ``failure_count``, ``average_duration_ms`` and ``duration_samples`` keep
what they counted before and are no longer written; a job's figures are those plus its
count rows' (``rota.stores.sql.jobstats``). Nothing is copied: the upgrade adds three
columns of zeros. The downgrade folds the count rows' figures back into the jobs rows.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | Sequence[str] | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("runs", sa.BigInteger),
    ("duration_sum", sa.Float),
    ("duration_count", sa.BigInteger),
)

_FOLD = """
UPDATE jobs SET
    total_executions = coalesce(total_executions, 0) + r.total,
    success_count = coalesce(success_count, 0) + r.success,
    failure_count = coalesce(failure_count, 0) + r.failure,
    average_duration_ms = CASE WHEN r.dcount = 0 THEN average_duration_ms ELSE
        (coalesce(average_duration_ms * duration_samples, 0) + r.dsum)
        / (CASE WHEN average_duration_ms IS NULL THEN 0 ELSE coalesce(duration_samples, 0) END
           + r.dcount) END,
    duration_samples = coalesce(duration_samples, 0) + r.dcount
FROM (
    SELECT job_id, sum(runs) AS total,
           sum(CASE WHEN status = 2 THEN runs ELSE 0 END) AS success,
           sum(CASE WHEN status IN (3, 5) THEN runs ELSE 0 END) AS failure,
           sum(duration_sum) AS dsum, sum(duration_count) AS dcount
    FROM occurrence_counts WHERE runs > 0 GROUP BY job_id
) AS r
WHERE jobs.id = r.job_id
"""
"""(``UPDATE … FROM``: PostgreSQL, and SQLite since 3.33.)"""


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column(
            "occurrence_counts", sa.Column(name, kind(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    op.execute(_FOLD)
    op.execute("DELETE FROM occurrence_counts WHERE n = 0")
    for name, _ in COLUMNS:
        op.execute(f"ALTER TABLE occurrence_counts DROP COLUMN {name}")  # SQLite 3.35+
