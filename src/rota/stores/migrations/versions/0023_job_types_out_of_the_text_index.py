"""The job type leaves the jobs' text index (issue 19). Every job of a type holds the same
trigrams of its type: the index kept, for each of them, a list of every job (on PostgreSQL
16 B a pending job of the GIN index's 47, on SQLite 50 B of the FTS table's 127, at 300,000
``bench.capacity`` jobs), and every created job paid their insertion.

- ``job_type_counts`` (``job_type``, ``shard``) -> ``n``: the jobs of each type over a few
  shard rows, kept by every write that creates, deletes or changes the type of a job (see
  ``rota.stores.sql.aggregates``); filled here from the stored jobs.
- The search finds a text in the job type among the types in use (a few rows), then the
  jobs of those types by the ``(job_type, id)`` index: the answers are the same.
- PostgreSQL: ``ix_jobs_search`` over ``display_name`` and ``description`` only.
- SQLite: ``jobs_search`` (FTS5) over those two columns, its triggers made again, and
  rebuilt from the jobs (one pass).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _sqlite_search(columns: Sequence[str]) -> list[str]:
    """Drop the FTS5 table and its triggers, then make them over ``columns``, and rebuild."""
    names = ", ".join(columns)
    old = ", ".join(f"old.{c}" for c in columns)
    new = ", ".join(f"new.{c}" for c in columns)
    changed = " OR ".join(f"old.{c} IS NOT new.{c}" for c in columns)
    return [
        "DROP TRIGGER IF EXISTS jobs_search_update",
        "DROP TRIGGER IF EXISTS jobs_search_delete",
        "DROP TRIGGER IF EXISTS jobs_search_insert",
        "DROP TABLE IF EXISTS jobs_search",
        f"CREATE VIRTUAL TABLE jobs_search USING fts5({names}, content='jobs', "
        "content_rowid='rowid', tokenize='trigram')",
        "CREATE TRIGGER jobs_search_insert AFTER INSERT ON jobs BEGIN "
        f"INSERT INTO jobs_search(rowid, {names}) VALUES (new.rowid, {new}); END",
        "CREATE TRIGGER jobs_search_delete AFTER DELETE ON jobs BEGIN "
        f"INSERT INTO jobs_search(jobs_search, rowid, {names}) "
        f"VALUES ('delete', old.rowid, {old}); END",
        f"CREATE TRIGGER jobs_search_update AFTER UPDATE OF {names} ON jobs "
        f"WHEN {changed} BEGIN "
        f"INSERT INTO jobs_search(jobs_search, rowid, {names}) "
        f"VALUES ('delete', old.rowid, {old}); "
        f"INSERT INTO jobs_search(rowid, {names}) VALUES (new.rowid, {new}); END",
        "INSERT INTO jobs_search(jobs_search) VALUES ('rebuild')",
    ]


def _postgresql_search(columns: Sequence[str]) -> list[str]:
    ops = ", ".join(f"{c} gin_trgm_ops" for c in columns)
    return [
        "DROP INDEX IF EXISTS ix_jobs_search",
        f"CREATE INDEX ix_jobs_search ON jobs USING gin ({ops})",
    ]


def _search(columns: Sequence[str]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        statements = _postgresql_search(columns)
    else:
        statements = _sqlite_search(columns)
    for statement in statements:
        op.execute(statement)


def upgrade() -> None:
    op.create_table(
        "job_type_counts",
        sa.Column("job_type", sa.String(length=200), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_type", "shard", name="pk_job_type_counts"),
    )
    op.execute(
        "INSERT INTO job_type_counts (job_type, shard, n) "
        "SELECT job_type, 0, count(*) FROM jobs GROUP BY job_type"
    )
    _search(("display_name", "description"))


def downgrade() -> None:
    _search(("display_name", "job_type", "description"))
    op.drop_table("job_type_counts")
