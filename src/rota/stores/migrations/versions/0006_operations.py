"""Operations: the W3C trace context an occurrence was fired with.

- ``occurrences``: ``traceparent`` (nullable): the ``traceparent`` of the span that created
  the occurrence (a scheduled fire or a manual trigger), sent with each attempt's job message
  so that retries link back to the same trace. ``NULL`` while tracing is off.

Adding a nullable column is a metadata-only change on PostgreSQL and SQLite alike.

Revision ID: 0006
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("traceparent")
