"""A run writes fewer index entries on PostgreSQL (issue 34): indexes leave out the rows they
are never read for.

- ``ix_occurrences_status_id`` and ``ix_occurrences_job_id_status_id`` hold the occurrences
  not Completed (``WHERE status <> 2``). A run's end rewrites its row (never a HOT update: its
  status changes), and a Completed one now adds no entry to either. A list of Completed runs
  walks the ids, nearly every one a match.
- ``ix_occurrences_end_time_status`` holds the ended ones (``WHERE end_time IS NOT NULL``):
  a fire adds no entry to it.
- ``ix_jobs_tags`` holds the jobs with tags (``WHERE tags <> '[]'``): a job without tags adds
  no entry when it is created, nor at each fire (a new version of its row).

SQLite keeps its indexes.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | Sequence[str] | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES = {  # name: (what it indexes, its condition)
    "ix_occurrences_job_id_status_id": ("occurrences (job_id, status, id)", "status <> 2"),
    "ix_occurrences_status_id": ("occurrences (status, id)", "status <> 2"),
    "ix_occurrences_end_time_status": ("occurrences (end_time, status)", "end_time IS NOT NULL"),
    "ix_jobs_tags": ("jobs USING gin (tags jsonb_path_ops)", "tags <> '[]'::jsonb"),
}


def _rebuild(partial: bool) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, (target, condition) in _INDEXES.items():
        where = f" WHERE {condition}" if partial else ""
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON {target}{where}")


def upgrade() -> None:
    _rebuild(partial=True)


def downgrade() -> None:
    _rebuild(partial=False)
