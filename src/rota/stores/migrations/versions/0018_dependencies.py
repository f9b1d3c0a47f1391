"""Job dependencies and graph runs (issue 20).

- ``job_dependencies``: one row per edge, ``job_id`` runs after ``upstream_id`` by ``rule``
  (``success``, ``completion``, ``failure``) since ``created_at``; deleted with either job.
  A job without dependencies costs nothing.
- ``graph_runs``: one row per run of a dependency graph, rooted at one occurrence (unique),
  ``running`` until every job of it is resolved and final.
- ``graph_run_nodes``: the occurrence each job got in a run; the key (run, job) makes a
  dependent's creation happen once, however many servers resolve it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("upstream_id", sa.Uuid(), nullable=False),
        sa.Column("rule", sa.String(16), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_dependencies_job_id_jobs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["upstream_id"],
            ["jobs.id"],
            name="fk_job_dependencies_upstream_id_jobs",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "upstream_id", name="pk_job_dependencies"),
    )
    op.create_index("ix_job_dependencies_upstream_id", "job_dependencies", ["upstream_id"])
    op.create_table(
        "graph_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("root_job_id", sa.Uuid(), nullable=False),
        sa.Column("root_occurrence_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_graph_runs"),
        sa.UniqueConstraint("root_occurrence_id", name="uq_graph_runs_root_occurrence_id"),
    )
    op.create_index("ix_graph_runs_status_created_at", "graph_runs", ["status", "created_at"])
    op.create_index(
        "ix_graph_runs_root_job_id_created_at", "graph_runs", ["root_job_id", "created_at"]
    )
    op.create_table(
        "graph_run_nodes",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("occurrence_id", sa.Uuid(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["graph_runs.id"],
            name="fk_graph_run_nodes_run_id_graph_runs",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "job_id", name="pk_graph_run_nodes"),
        sa.UniqueConstraint("occurrence_id", name="uq_graph_run_nodes_occurrence_id"),
    )


def downgrade() -> None:
    op.drop_table("graph_run_nodes")
    op.drop_index("ix_graph_runs_root_job_id_created_at", table_name="graph_runs")
    op.drop_index("ix_graph_runs_status_created_at", table_name="graph_runs")
    op.drop_table("graph_runs")
    op.drop_index("ix_job_dependencies_upstream_id", table_name="job_dependencies")
    op.drop_table("job_dependencies")
