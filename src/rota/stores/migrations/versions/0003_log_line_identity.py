"""Log lines carry the attempt that wrote them and their number within it; a line that
arrives twice (a replayed worker outbox, a redelivered batch) is stored once.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("occurrence_logs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("line", sa.Integer(), nullable=True))
    op.create_index(
        "uq_occurrence_logs_line",
        "occurrence_logs",
        ["occurrence_id", "attempt", "line"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_occurrence_logs_line", table_name="occurrence_logs")
    with op.batch_alter_table("occurrence_logs") as batch:
        batch.drop_column("line")
        batch.drop_column("attempt")
