"""Operations: the W3C trace context an occurrence was fired with.

- ``occurrences``: ``traceparent`` (nullable): the ``traceparent`` of the span that created
  the occurrence (a scheduled fire or a manual trigger), sent with each attempt's job message
  so that retries link back to the same trace. ``NULL`` while tracing is off.

- ``jobs``: index ``ix_jobs_recurring`` on ``(bucket, id)`` of the cron jobs only (partial:
  ``cron_expression IS NOT NULL``), for silence detection to read the cron jobs of its buckets
  without the (possibly millions of) one-time jobs.

Adding a nullable column is a metadata-only change on PostgreSQL and SQLite alike; the index
is built from the jobs table (a short write lock on ``jobs`` only).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


RECURRING = "cron_expression IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=True))
    op.create_index(
        "ix_jobs_recurring",
        "jobs",
        ["bucket", "id"],
        sqlite_where=sa.text(RECURRING),
        postgresql_where=sa.text(RECURRING),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_recurring", table_name="jobs")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("traceparent")
