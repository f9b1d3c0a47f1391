"""Initial schema: jobs, versions, tags, occurrences, status history, logs, failed occurrences.

Revision ID: 0001
Revises:
Create Date: 2026-11-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the store's column types: later changes to the metadata need a migration.
UTC_DATETIME = sa.DateTime(timezone=True)
AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    _create_jobs()
    _create_occurrences()
    _create_failed_occurrences()


def _create_jobs() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("display_name", sa.String(500), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("job_data", sa.JSON(), nullable=True),
        sa.Column("cron_expression", sa.String(200), nullable=True),
        sa.Column("time_zone", sa.String(100), nullable=False),
        sa.Column("execute_at", UTC_DATETIME, nullable=True),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("concurrency_policy", sa.SmallInteger(), nullable=False),
        sa.Column("misfire_policy", sa.String(20), nullable=False),
        sa.Column("timeout_seconds", sa.Float(), nullable=True),
        sa.Column("max_retries", sa.Integer(), nullable=True),
        sa.Column("retry_delay_seconds", sa.Float(), nullable=True),
        sa.Column("next_run_at", UTC_DATETIME, nullable=True),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=True),
        sa.Column("updated_by", sa.String(200), nullable=True),
        sa.Column("total_executions", sa.BigInteger(), nullable=False),
        sa.Column("success_count", sa.BigInteger(), nullable=False),
        sa.Column("failure_count", sa.BigInteger(), nullable=False),
        sa.Column("average_duration_ms", sa.Float(), nullable=True),
        sa.Column("duration_samples", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_is_active_next_run_at", "jobs", ["is_active", "next_run_at"])
    op.create_index("ix_jobs_bucket_next_run_at", "jobs", ["bucket", "next_run_at"])
    op.create_index("ix_jobs_job_type", "jobs", ["job_type"])

    op.create_table(
        "job_tags",
        sa.Column("tag", sa.String(200), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_tags_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tag", "job_id", name="pk_job_tags"),
    )
    op.create_index("ix_job_tags_job_id", "job_tags", ["job_id"])

    op.create_table(
        "job_versions",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_versions_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "version", name="pk_job_versions"),
    )


def _create_occurrences() -> None:
    op.create_table(
        "occurrences",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("scheduled_for", UTC_DATETIME, nullable=False),
        sa.Column("due_at", UTC_DATETIME, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("timeout_seconds", sa.Float(), nullable=True),
        sa.Column("job_version", sa.Integer(), nullable=False),
        sa.Column("job_data", sa.JSON(), nullable=True),
        sa.Column("dispatched_at", UTC_DATETIME, nullable=True),
        sa.Column("instance_id", sa.String(300), nullable=True),
        sa.Column("start_time", UTC_DATETIME, nullable=True),
        sa.Column("end_time", UTC_DATETIME, nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("exception", sa.Text(), nullable=True),
        sa.Column("skip_reason", sa.String(50), nullable=True),
        sa.Column("last_heartbeat", UTC_DATETIME, nullable=True),
        sa.Column("trigger_reason", sa.Text(), nullable=True),
        sa.Column("concurrency_policy", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_occurrences"),
        sa.UniqueConstraint("job_id", "scheduled_for", name="uq_occurrences_job_id_scheduled_for"),
    )
    op.create_index("ix_occurrences_job_id_id", "occurrences", ["job_id", "id"])
    op.create_index("ix_occurrences_job_id_status_id", "occurrences", ["job_id", "status", "id"])
    op.create_index("ix_occurrences_status_id", "occurrences", ["status", "id"])
    op.create_index(
        "ix_occurrences_status_dispatched_at_due_at",
        "occurrences",
        ["status", "dispatched_at", "due_at"],
    )

    op.create_table(
        "occurrence_status_changes",
        sa.Column("id", AUTO_ID, autoincrement=True, nullable=False),
        sa.Column("occurrence_id", sa.Uuid(), nullable=False),
        sa.Column("timestamp", UTC_DATETIME, nullable=False),
        sa.Column("from_status", sa.SmallInteger(), nullable=True),
        sa.Column("to_status", sa.SmallInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_occurrence_status_changes"),
    )
    op.create_index(
        "ix_occurrence_status_changes_occurrence_id_id",
        "occurrence_status_changes",
        ["occurrence_id", "id"],
    )

    op.create_table(
        "occurrence_logs",
        sa.Column("seq", AUTO_ID, autoincrement=True, nullable=False),
        sa.Column("occurrence_id", sa.Uuid(), nullable=False),
        sa.Column("timestamp", UTC_DATETIME, nullable=False),
        sa.Column("level", sa.String(20), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.Column("category", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("seq", name="pk_occurrence_logs"),
    )
    op.create_index(
        "ix_occurrence_logs_occurrence_id_seq", "occurrence_logs", ["occurrence_id", "seq"]
    )


def _create_failed_occurrences() -> None:
    op.create_table(
        "failed_occurrences",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("occurrence_id", sa.Uuid(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("failure_type", sa.String(50), nullable=False),
        sa.Column("exception", sa.Text(), nullable=True),
        sa.Column("job_data", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("failed_at", UTC_DATETIME, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("resolved", sa.Boolean(), nullable=False),
        sa.Column("resolved_at", UTC_DATETIME, nullable=True),
        sa.Column("resolved_by", sa.String(200), nullable=True),
        sa.Column("resolution_note", sa.Text(), nullable=True),
        sa.Column("resolution_action", sa.String(100), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_failed_occurrences"),
    )
    for column in ("occurrence_id", "job_id", "failure_type", "resolved", "failed_at"):
        op.create_index(f"ix_failed_occurrences_{column}", "failed_occurrences", [column])


def downgrade() -> None:
    for table in (
        "failed_occurrences",
        "occurrence_logs",
        "occurrence_status_changes",
        "occurrences",
        "job_versions",
        "job_tags",
        "jobs",
    ):
        op.drop_table(table)
