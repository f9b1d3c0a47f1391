"""Code-declared jobs: a job's source (``api`` | ``code``), the declaration last applied to a
code job, and at most one code job per job type.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CODE_JOBS = "source = 'code'"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("source", sa.String(10), nullable=False, server_default="api"))
        batch.add_column(sa.Column("declared_spec", sa.JSON(), nullable=True))
    op.create_index(
        "uq_jobs_code_job_type",
        "jobs",
        ["job_type"],
        unique=True,
        sqlite_where=sa.text(CODE_JOBS),
        postgresql_where=sa.text(CODE_JOBS),
    )


def downgrade() -> None:
    op.drop_index("uq_jobs_code_job_type", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("declared_spec")
        batch.drop_column("source")
