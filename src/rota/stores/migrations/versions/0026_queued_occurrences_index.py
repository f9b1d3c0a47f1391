"""The sweeps' index holds the Queued occurrences only (issue 19):
``ix_occurrences_queued`` (``status``, ``dispatched_at``, ``due_at``) where ``status = 0``
replaces the same index over every occurrence ever stored. (``status`` stays in it: SQLite's
planner, without statistics, prefers an equality, which ``(status, id)`` would offer.)

Its readers are the sweeps that look for Queued occurrences (never dispatched and due; or
dispatched long ago and still not started); they name the status as a literal, which a
partial index needs. An occurrence leaves this index when it starts: the history no longer
pays an entry in it (about 40 B an occurrence), and the updates that start and end an
occurrence insert no entry into it.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_occurrences_queued ON occurrences (status, dispatched_at, due_at) "
        "WHERE status = 0"
    )
    op.execute("DROP INDEX ix_occurrences_status_dispatched_at_due_at")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX ix_occurrences_status_dispatched_at_due_at "
        "ON occurrences (status, dispatched_at, due_at)"
    )
    op.execute("DROP INDEX ix_occurrences_queued")
