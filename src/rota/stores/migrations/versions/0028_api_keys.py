"""API keys for services (issue 33): ``api_keys``, each key's name, role, scope (job types,
tags), the SHA-256 of its secret, its expiry, last use and revocation. A name is unique
among the keys that are not revoked (a partial unique index).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("job_types", sa.JSON(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("created_by", sa.String(110), nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=True),
        sa.Column("last_used_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_by", sa.String(110), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index(
        "ux_api_keys_live_name",
        "api_keys",
        ["name"],
        unique=True,
        sqlite_where=sa.text("revoked_at IS NULL"),
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ux_api_keys_live_name", table_name="api_keys")
    op.drop_table("api_keys")
