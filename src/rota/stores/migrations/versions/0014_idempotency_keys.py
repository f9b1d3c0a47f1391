"""The answers of creation requests made with an ``Idempotency-Key`` (kept 24 hours).

- ``idempotency_keys``: one row per key scope (the caller, the operation and the key,
  hashed: ``scope``), the ``fingerprint`` of the first request's body, and once it succeeded
  its answer (``status``, ``body``, ``headers``); ``expires_at`` (indexed) for the purge.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("headers", sa.JSON(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("scope", name="pk_idempotency_keys"),
    )
    op.create_index("ix_idempotency_keys_expires_at", "idempotency_keys", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_expires_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
