"""A pending job costs less on PostgreSQL (issue 19): the values most jobs share are kept as
NULL, and the indexes on a job's state hold each job once.

- The run counts (``total_executions``, ``success_count``, ``failure_count``,
  ``duration_samples``, ``consecutive_failures``), ``misfire_policy``, ``time_zone`` and
  ``source`` may be NULL: NULL is the value every new job has (0, ``fire_once``, ``UTC``,
  ``api``); ``updated_at`` and ``updated_by`` are NULL until the job is first changed (they
  read as its creation). Rows written before keep their values, which read the same. A new
  job's row: 200 B instead of 283.
- ``(is_active, next_run_at)`` and ``(is_active, id)`` become partial indexes, each job in
  the one of its state: ``ix_jobs_schedule`` (``next_run_at`` where ``is_active``: the
  dispatcher's read), ``ix_jobs_active`` and ``ix_jobs_inactive`` (``id``: the jobs list
  filtered by state, newest first). 54 B a pending job instead of 72.

SQLite keeps its columns (a column cannot lose ``NOT NULL`` there without a copy of the
table, and it keeps a 0 in no bytes) and its indexes.

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
    op.execute("CREATE INDEX ix_jobs_active ON jobs (id) WHERE is_active")
    op.execute("CREATE INDEX ix_jobs_inactive ON jobs (id) WHERE NOT is_active")
    op.execute("DROP INDEX IF EXISTS ix_jobs_is_active_next_run_at")
    op.execute("DROP INDEX IF EXISTS ix_jobs_is_active_id")
    for column in (*_NULL_IS_DEFAULT, "updated_at"):
        op.execute(f"ALTER TABLE jobs ALTER COLUMN {column} DROP NOT NULL")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # one pass over the rows that hold a NULL (every job created since the upgrade)
    values = ", ".join(f"{c} = coalesce({c}, {v})" for c, v in _NULL_IS_DEFAULT.items())
    nulls = " OR ".join(f"{c} IS NULL" for c in (*_NULL_IS_DEFAULT, "updated_at"))
    op.execute(
        f"UPDATE jobs SET {values}, "
        "updated_by = CASE WHEN updated_at IS NULL THEN created_by ELSE updated_by END, "
        f"updated_at = coalesce(updated_at, created_at) WHERE {nulls}"
    )
    for column in (*_NULL_IS_DEFAULT, "updated_at"):
        op.execute(f"ALTER TABLE jobs ALTER COLUMN {column} SET NOT NULL")
    op.execute("CREATE INDEX ix_jobs_is_active_id ON jobs (is_active, id)")
    op.execute("CREATE INDEX ix_jobs_is_active_next_run_at ON jobs (is_active, next_run_at)")
    op.execute("DROP INDEX IF EXISTS ix_jobs_inactive")
    op.execute("DROP INDEX IF EXISTS ix_jobs_active")
    op.execute("DROP INDEX IF EXISTS ix_jobs_schedule")
