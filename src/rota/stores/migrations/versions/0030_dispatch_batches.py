"""A fire's dispatch without a per-occurrence mark (issue 34, "a two-write record"):
``dispatch_batches``, one row per batch a dispatcher commits and then publishes itself. Its
occurrences are inserted dispatched; the row (their ids, the batch's claim and dispatch time)
is deleted once they are published, or read by a sweep after ``claim_until`` to send again
what is still Queued as the batch left it. (Fires of earlier releases, claimed in their
``due_at``, are still swept as before.)

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | Sequence[str] | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dispatch_batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("claim_until", UTC_DATETIME, nullable=False),
        sa.Column("dispatched_at", UTC_DATETIME, nullable=False),
        sa.Column("occurrence_ids", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dispatch_batches"),
    )


def downgrade() -> None:
    # What a batch left unpublished goes back to the sweep of the earlier release, which
    # looks for Queued occurrences never dispatched.
    op.execute(
        "UPDATE occurrences SET dispatched_at = NULL WHERE status = 0 AND dispatched_at IN "
        "(SELECT dispatched_at FROM dispatch_batches)"
    )
    op.drop_table("dispatch_batches")
