"""The data schema each worker group last published for a job type, kept with the type: job
data is checked against it even while no worker of the type is live (a deploy window lets no
misfit in).

``declared_job_types`` gains ``data_schema`` (the JSON Schema, ``NULL`` for untyped data)
and ``schema_published_at`` (when a server first saw that schema; ``NULL``: nothing recorded
yet, as for every row the upgrade finds: the next registration of a worker fills it).

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | Sequence[str] | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("declared_job_types") as batch:
        batch.add_column(sa.Column("data_schema", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("schema_published_at", UTC_DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("declared_job_types") as batch:
        batch.drop_column("schema_published_at")
        batch.drop_column("data_schema")
