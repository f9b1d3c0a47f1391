"""A text index for the jobs search (``GET /api/v1/jobs?search=``: a case-insensitive
substring of the display name, the job type or the description), and indexes that serve the
lists' filters in the lists' order.

- SQLite: ``jobs_search``, an FTS5 table with the ``trigram`` tokenizer over those three columns
  of ``jobs`` (external content: it holds the index only, keyed by ``jobs``' rowid), kept in step
  by triggers on insert, update of those columns and delete; filled from the jobs already there.
  A later migration that rebuilds ``jobs`` (a batch operation copies it into a new table, which
  renumbers the rowids and drops the triggers) must recreate the triggers and ``rebuild`` it.
- PostgreSQL: the ``pg_trgm`` extension and one GIN index over the three columns
  (``gin_trgm_ops``), which serves ``ILIKE '%…%'``.

And the lists' filters served in the lists' order (newest first, by id), so that a page is an
index range read however many rows match: ``jobs`` (``job_type``, ``id``) in place of
(``job_type``), (``is_active``, ``id``) and ``ix_jobs_auto_disabled`` (``id`` where
``disabled_reason IS NOT NULL``); ``failed_occurrences`` (``job_id``, ``id``),
(``failure_type``, ``id``) and (``resolved``, ``id``) in place of the single-column ones.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = "display_name, job_type, description"
OLD = "old.display_name, old.job_type, old.description"
NEW = "new.display_name, new.job_type, new.description"

SQLITE_UP = (
    f"CREATE VIRTUAL TABLE jobs_search USING fts5({COLUMNS}, content='jobs', "
    "content_rowid='rowid', tokenize='trigram')",
    f"CREATE TRIGGER jobs_search_insert AFTER INSERT ON jobs BEGIN "
    f"INSERT INTO jobs_search(rowid, {COLUMNS}) VALUES (new.rowid, {NEW}); END",
    f"CREATE TRIGGER jobs_search_delete AFTER DELETE ON jobs BEGIN "
    f"INSERT INTO jobs_search(jobs_search, rowid, {COLUMNS}) "
    f"VALUES ('delete', old.rowid, {OLD}); END",
    f"CREATE TRIGGER jobs_search_update AFTER UPDATE OF {COLUMNS} ON jobs "
    "WHEN old.display_name IS NOT new.display_name OR old.job_type IS NOT new.job_type "
    "OR old.description IS NOT new.description BEGIN "
    f"INSERT INTO jobs_search(jobs_search, rowid, {COLUMNS}) "
    f"VALUES ('delete', old.rowid, {OLD}); "
    f"INSERT INTO jobs_search(rowid, {COLUMNS}) VALUES (new.rowid, {NEW}); END",
    "INSERT INTO jobs_search(jobs_search) VALUES ('rebuild')",
)
SQLITE_DOWN = (
    "DROP TRIGGER IF EXISTS jobs_search_update",
    "DROP TRIGGER IF EXISTS jobs_search_delete",
    "DROP TRIGGER IF EXISTS jobs_search_insert",
    "DROP TABLE IF EXISTS jobs_search",
)
POSTGRESQL_UP = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX ix_jobs_search ON jobs USING gin "
    "(display_name gin_trgm_ops, job_type gin_trgm_ops, description gin_trgm_ops)",
)
POSTGRESQL_DOWN = ("DROP INDEX IF EXISTS ix_jobs_search",)


def _run(statements: Sequence[str]) -> None:
    for statement in statements:
        op.execute(statement)


AUTO_DISABLED = sa.text("disabled_reason IS NOT NULL")
REPLACED = (
    ("jobs", "job_type"),
    ("failed_occurrences", "job_id"),
    ("failed_occurrences", "failure_type"),
    ("failed_occurrences", "resolved"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _run(POSTGRESQL_UP)
    else:
        _run(SQLITE_UP)
    for table, column in REPLACED:
        op.drop_index(f"ix_{table}_{column}", table_name=table)
        op.create_index(f"ix_{table}_{column}_id", table, [column, "id"])
    op.create_index("ix_jobs_is_active_id", "jobs", ["is_active", "id"])
    op.create_index(
        "ix_jobs_auto_disabled",
        "jobs",
        ["id"],
        sqlite_where=AUTO_DISABLED,
        postgresql_where=AUTO_DISABLED,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_auto_disabled", table_name="jobs")
    op.drop_index("ix_jobs_is_active_id", table_name="jobs")
    for table, column in REPLACED:
        op.drop_index(f"ix_{table}_{column}_id", table_name=table)
        op.create_index(f"ix_{table}_{column}", table, [column])
    if op.get_bind().dialect.name == "postgresql":
        _run(POSTGRESQL_DOWN)
    else:
        _run(SQLITE_DOWN)
