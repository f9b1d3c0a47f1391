"""Reliability: auto-disable state and zombie policy per job, the retry delay an occurrence
was fired with, and dead-letter records of messages that name no known occurrence.

- ``jobs``: ``auto_disable_threshold``, ``auto_disable_window_seconds``,
  ``auto_disable_cooldown_seconds`` (overrides; ``NULL`` takes the global default),
  ``consecutive_failures``, ``last_failure_at``, ``disabled_reason``, ``disabled_at``,
  ``probing`` (one probe run let through after the cooldown), ``zombie_policy``
  (``fail`` | ``requeue``) and ``zombie_threshold_seconds``.
- ``occurrences``: ``retry_delay_seconds`` (carried on the wire as ``retryDelaySeconds``).
- ``failed_occurrences``: ``occurrence_id`` may be ``NULL`` (a poison message whose body names
  none), ``raw_message`` keeps such a body (truncated), and at most one unresolved record exists
  per occurrence.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
UNRESOLVED = "NOT resolved"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("auto_disable_threshold", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("auto_disable_window_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("auto_disable_cooldown_seconds", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("last_failure_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("disabled_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("disabled_at", UTC_DATETIME, nullable=True))
        batch.add_column(
            sa.Column("probing", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("zombie_policy", sa.String(10), nullable=True))
        batch.add_column(sa.Column("zombie_threshold_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("retry_delay_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("failed_occurrences") as batch:
        batch.alter_column("occurrence_id", existing_type=sa.Uuid(), nullable=True)
        batch.add_column(sa.Column("raw_message", sa.Text(), nullable=True))
    op.create_index(
        "uq_failed_occurrences_unresolved",
        "failed_occurrences",
        ["occurrence_id"],
        unique=True,
        sqlite_where=sa.text(UNRESOLVED),
        postgresql_where=sa.text(UNRESOLVED),
    )


def downgrade() -> None:
    op.drop_index("uq_failed_occurrences_unresolved", table_name="failed_occurrences")
    op.execute("DELETE FROM failed_occurrences WHERE occurrence_id IS NULL")
    with op.batch_alter_table("failed_occurrences") as batch:
        batch.drop_column("raw_message")
        batch.alter_column("occurrence_id", existing_type=sa.Uuid(), nullable=False)
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("retry_delay_seconds")
    with op.batch_alter_table("jobs") as batch:
        for name in (
            "zombie_threshold_seconds",
            "zombie_policy",
            "probing",
            "disabled_at",
            "disabled_reason",
            "last_failure_at",
            "consecutive_failures",
            "auto_disable_cooldown_seconds",
            "auto_disable_window_seconds",
            "auto_disable_threshold",
        ):
            batch.drop_column(name)
