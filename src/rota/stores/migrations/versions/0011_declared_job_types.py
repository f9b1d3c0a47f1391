"""The job types workers have ever declared, and by which group.

- ``declared_job_types``: one row per (``job_type``, ``worker_id``) pair some worker instance
  registered, with ``first_declared_at``. The dispatcher skips a fire (``no_worker``) only for
  a job type no worker ever declared; a type whose workers are merely down waits for them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "declared_job_types",
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("worker_id", sa.String(200), nullable=False),
        sa.Column("first_declared_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("job_type", "worker_id", name="pk_declared_job_types"),
    )


def downgrade() -> None:
    op.drop_table("declared_job_types")
