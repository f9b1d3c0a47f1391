"""Compact pending jobs: a job's tags cost less (issue 19).

Before, every (tag, job) pair was a ``job_tags`` row with a primary key (tag, job) and an
index on the job: on a pending job with two tags, 300 of the 770 bytes it cost on SQLite
and 285 of 668 on PostgreSQL.

- PostgreSQL: ``jobs.tags`` becomes ``jsonb`` with a GIN index (``jsonb_path_ops``): the tag
  filter is ``tags @> '["t"]'``, the tag counts unnest the column; ``job_tags`` is dropped.
- SQLite (no such index): ``job_tags`` stays, read by tag only, so it loses the index on
  ``job_id`` and its foreign key (the store deletes a job's rows by their keys, the tags
  its column holds), and becomes ``WITHOUT ROWID``: the rows live in the primary key's tree
  alone instead of a rowid table plus that tree.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FK = "fk_job_tags_job_id_jobs"
_INDEX = "ix_job_tags_job_id"
_PK = "pk_job_tags"


def _rebuild_sqlite(*, with_rowid: bool) -> None:
    """SQLite cannot change a table's rowid or foreign keys in place: a new table, the rows
    copied, the old one dropped."""
    foreign = (
        f", CONSTRAINT {_FK} FOREIGN KEY(job_id) REFERENCES jobs (id) ON DELETE CASCADE"
        if with_rowid
        else ""
    )
    suffix = "" if with_rowid else " WITHOUT ROWID"
    op.execute(
        "CREATE TABLE job_tags_new (tag VARCHAR(200) NOT NULL, job_id CHAR(32) NOT NULL, "
        f"CONSTRAINT {_PK} PRIMARY KEY (tag, job_id){foreign}){suffix}"
    )
    op.execute("INSERT INTO job_tags_new (tag, job_id) SELECT tag, job_id FROM job_tags")
    op.execute("DROP TABLE job_tags")
    op.execute("ALTER TABLE job_tags_new RENAME TO job_tags")


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(with_rowid=False)
        return
    op.execute("DROP TABLE job_tags")
    op.execute("ALTER TABLE jobs ALTER COLUMN tags TYPE jsonb USING tags::jsonb")
    op.execute("CREATE INDEX ix_jobs_tags ON jobs USING gin (tags jsonb_path_ops)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(with_rowid=True)
        op.create_index(_INDEX, "job_tags", ["job_id"])
        return
    op.execute("DROP INDEX ix_jobs_tags")
    op.execute("ALTER TABLE jobs ALTER COLUMN tags TYPE json USING tags::json")
    op.execute(
        "CREATE TABLE job_tags (tag VARCHAR(200) NOT NULL, job_id UUID NOT NULL, "
        f"CONSTRAINT {_PK} PRIMARY KEY (tag, job_id), CONSTRAINT {_FK} FOREIGN KEY(job_id) "
        "REFERENCES jobs (id) ON DELETE CASCADE)"
    )
    op.execute(
        "INSERT INTO job_tags (tag, job_id) SELECT DISTINCT t.tag, jobs.id "
        "FROM jobs, json_array_elements_text(jobs.tags) AS t(tag)"
    )
    op.create_index(_INDEX, "job_tags", ["job_id"])
