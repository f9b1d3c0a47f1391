"""One index for the schedule (issue 19): the jobs had two on their next fire,
``(is_active, next_run_at)`` and ``(bucket, next_run_at)``. The dispatcher's and the hot
window's read (the active jobs due by a time, in time order, of some buckets or all) takes
the first whatever the buckets, their filter being on the rows; the second cost 33 bytes a
pending job on PostgreSQL (41 on SQLite) and an entry to write with every change of a job's
next fire.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_jobs_bucket_next_run_at", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_bucket_next_run_at", "jobs", ["bucket", "next_run_at"])
