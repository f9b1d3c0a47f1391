"""A pending job costs less on PostgreSQL (issue 19): two of its indexes are lighter, and
the values most jobs share are kept as NULL.

- The schedule, ``(is_active, next_run_at)``, holds the active jobs only:
  ``ix_jobs_schedule`` on ``next_run_at`` where ``is_active`` (22 B a job instead of 32),
  and the inactive ones are found by ``ix_jobs_inactive`` on ``id`` where ``NOT
  is_active``. ``(is_active, id)`` is dropped (41 B a job): the jobs list filtered by state
  walks the primary key newest first when most jobs are in that state, and takes those
  that are not from one of the two (the planner chooses from the column's statistics).
- ``(job_type, id)`` becomes ``(job_type)``: B-tree deduplication keeps one entry per type
  and page with the list of its rows (about 7 B a job instead of 50). The list filtered by
  a type, and the search's types, walk the primary key when the type is common and sort the
  few jobs of a rare one.
- The run counts (``total_executions``, ``success_count``, ``failure_count``,
  ``duration_samples``, ``consecutive_failures``), ``misfire_policy``, ``time_zone`` and
  ``source`` may be NULL: NULL is the value every new job has (0, ``fire_once``, ``UTC``,
  ``api``); ``updated_at`` and ``updated_by`` are NULL until the job is first changed (they
  read as its creation). Rows written before keep their values, which read the same.

SQLite keeps its indexes (no deduplication, no bitmap scans) and its columns (a column
cannot lose ``NOT NULL`` there without a copy of the table, and it keeps a 0 in no bytes).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NULL_IS_DEFAULT = {
    "total_executions": "0",
    "success_count": "0",
    "failure_count": "0",
    "duration_samples": "0",
    "consecutive_failures": "0",
    "misfire_policy": "'fire_once'",
    "time_zone": "'UTC'",
    "source": "'api'",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE INDEX ix_jobs_schedule ON jobs (next_run_at) WHERE is_active")
    op.execute("CREATE INDEX ix_jobs_inactive ON jobs (id) WHERE NOT is_active")
    op.execute("DROP INDEX IF EXISTS ix_jobs_is_active_next_run_at")
    op.execute("DROP INDEX IF EXISTS ix_jobs_is_active_id")
    op.execute("DROP INDEX IF EXISTS ix_jobs_job_type_id")
    op.execute("CREATE INDEX ix_jobs_job_type ON jobs (job_type)")
    for column in (*_NULL_IS_DEFAULT, "updated_at"):
        op.execute(f"ALTER TABLE jobs ALTER COLUMN {column} DROP NOT NULL")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for column, value in _NULL_IS_DEFAULT.items():
        op.execute(f"UPDATE jobs SET {column} = {value} WHERE {column} IS NULL")
        op.execute(f"ALTER TABLE jobs ALTER COLUMN {column} SET NOT NULL")
    op.execute(
        "UPDATE jobs SET updated_at = created_at, updated_by = created_by WHERE updated_at IS NULL"
    )
    op.execute("ALTER TABLE jobs ALTER COLUMN updated_at SET NOT NULL")
    op.execute("DROP INDEX IF EXISTS ix_jobs_job_type")
    op.execute("CREATE INDEX ix_jobs_job_type_id ON jobs (job_type, id)")
    op.execute("CREATE INDEX ix_jobs_is_active_id ON jobs (is_active, id)")
    op.execute("CREATE INDEX ix_jobs_is_active_next_run_at ON jobs (is_active, next_run_at)")
    op.execute("DROP INDEX IF EXISTS ix_jobs_inactive")
    op.execute("DROP INDEX IF EXISTS ix_jobs_schedule")
