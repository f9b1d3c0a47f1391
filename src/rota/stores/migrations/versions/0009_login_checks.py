"""Sign-in that cannot be raced: a per-name lease on the password check, and the failed
logins of names that are not users kept in the store (shared by every server).

- ``users.login_check_until``: while set and in the future, a password check of this user is
  in flight; another sign-in of the same name is refused until it ends (one check at a time).
- ``login_throttles``: per name that is not a user, ``failed_logins``, ``locked_until`` and
  ``check_until`` exactly like a user's, and ``updated_at`` (idle rows are pruned).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("login_check_until", UTC_DATETIME, nullable=True))
    op.create_table(
        "login_throttles",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("failed_logins", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("locked_until", UTC_DATETIME, nullable=True),
        sa.Column("check_until", UTC_DATETIME, nullable=True),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_login_throttles"),
    )
    op.create_index("ix_login_throttles_updated_at", "login_throttles", ["updated_at"])


def downgrade() -> None:
    op.drop_table("login_throttles")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("login_check_until")
