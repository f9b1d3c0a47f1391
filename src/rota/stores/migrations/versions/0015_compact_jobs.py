"""Compact pending jobs: the tag rows cost less.

- ``job_tags``: no index on ``job_id`` and no foreign key to ``jobs`` (a job's own tags are
  its ``tags`` column; the store deletes its tag rows by their primary key, tag and job);
  on SQLite the table is ``WITHOUT ROWID``, so the rows live in the primary key's tree alone
  instead of a rowid table plus that tree. Issue 19: these were 300 of the 770 bytes a
  pending job with two tags cost on SQLite, 285 of 668 on PostgreSQL.

Revision ID: 0015
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FK = "fk_job_tags_job_id_jobs"
_INDEX = "ix_job_tags_job_id"


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
        f"CONSTRAINT pk_job_tags PRIMARY KEY (tag, job_id){foreign}){suffix}"
    )
    op.execute("INSERT INTO job_tags_new (tag, job_id) SELECT tag, job_id FROM job_tags")
    op.execute("DROP TABLE job_tags")
    op.execute("ALTER TABLE job_tags_new RENAME TO job_tags")


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(with_rowid=False)
        return
    op.drop_index(_INDEX, table_name="job_tags")
    op.drop_constraint(_FK, "job_tags", type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(with_rowid=True)
    else:
        op.create_foreign_key(_FK, "job_tags", "jobs", ["job_id"], ["id"], ondelete="CASCADE")
    op.create_index(_INDEX, "job_tags", ["job_id"])
