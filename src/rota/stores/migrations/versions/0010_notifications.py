"""Notifications: subscriptions, their deliveries (a durable, leased queue) and the delivery log.

- ``notify_subscriptions``: ``name``, ``events`` (JSON list), a scope (``job_id`` or
  ``tag``, neither: every job), a ``channel`` (``webhook``: ``url`` and ``secret``; ``email``:
  ``recipients``, a JSON list), the dead-letter ``threshold``, ``enabled``.
- ``notify_deliveries``: one per (subscription, notice) (unique ``event_key``), its
  JSON ``payload``, ``state`` (pending, delivered, failed), ``attempts``, ``next_attempt_at``,
  and the claim of the server sending it (``claimed_by`` until ``claimed_until``).
- ``notify_attempts``: the delivery log (the newest attempts of each subscription).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
PENDING = "state = 'pending'"


def upgrade() -> None:
    op.create_table(
        "notify_subscriptions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("channel", sa.String(20), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("tag", sa.String(200), nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("secret", sa.Text(), nullable=True),
        sa.Column("recipients", sa.JSON(), nullable=False),
        sa.Column("threshold", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("created_by", sa.String(100), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notify_subscriptions"),
    )
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("event", sa.String(50), nullable=False),
        sa.Column("event_key", sa.String(300), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_attempt_at", UTC_DATETIME, nullable=False),
        sa.Column("claimed_by", sa.String(200), nullable=True),
        sa.Column("claimed_until", UTC_DATETIME, nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["notify_subscriptions.id"],
            name="fk_notify_deliveries_subscription_id_notify_subscriptions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_notify_deliveries"),
        sa.UniqueConstraint(
            "subscription_id",
            "event_key",
            name="uq_notify_deliveries_subscription_id_event_key",
        ),
    )
    op.create_index(
        "ix_notify_deliveries_due",
        "notify_deliveries",
        ["next_attempt_at"],
        sqlite_where=sa.text(PENDING),
        postgresql_where=sa.text(PENDING),
    )
    op.create_index("ix_notify_deliveries_finished_at", "notify_deliveries", ["finished_at"])
    op.create_table(
        "notify_attempts",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("delivery_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("event", sa.String(50), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", UTC_DATETIME, nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["notify_subscriptions.id"],
            name="fk_notify_attempts_subscription_id_notify_subscriptions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_notify_attempts"),
    )
    op.create_index(
        "ix_notify_attempts_subscription_id_at",
        "notify_attempts",
        ["subscription_id", "at"],
    )


def downgrade() -> None:
    op.drop_table("notify_attempts")
    op.drop_table("notify_deliveries")
    op.drop_table("notify_subscriptions")
