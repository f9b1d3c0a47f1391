"""Fires recorded ``Skipped`` (reason ``overlap``) while nothing of their job was in progress:
the check the chaos soak and the failover tests share (docs/reliability.md, "Chaos soak").

A Skip-policy fire is judged against the runs of its job that existed before the dispatch
that recorded it (docs/concepts.md): an overlap skip is justified by another occurrence of
the job, not skipped itself, recorded *earlier* (``created_at`` before the skip's: a fire of
the same dispatch never counts) and not over yet when the skip was recorded, as the store
saw it: still open, or ended by a transaction after the skip's (the end's row version,
``xmin``, is newer: a worker's report applied late, after a store outage, carries the
worker's earlier clock in the history), or ended by its worker's clock less than a second
before the skip (a report being committed while the dispatch read the store).
"""

from __future__ import annotations

from typing import Any

from .distributed import Cluster
from .faults import sql

UNJUSTIFIED_OVERLAPS = """
    SELECT s.id, s.job_id, s.scheduled_for, s.created_at
      FROM occurrences s
     WHERE s.status = 7 AND s.skip_reason = 'overlap'
       AND NOT EXISTS (
           SELECT 1 FROM occurrences o
            WHERE o.job_id = s.job_id AND o.id <> s.id AND o.status <> 7
              AND o.created_at < s.created_at
              AND (o.status IN (0, 1, 6)
                   OR o.end_time IS NULL
                   OR o.end_time > s.created_at - interval '1 second'
                   OR o.xmin::text::bigint > s.xmin::text::bigint))
     ORDER BY s.scheduled_for
"""


def unjustified_overlaps(c: Cluster) -> list[dict[str, Any]]:
    """The overlap skips of the cluster's store that no run in progress explains."""
    return sql(c, UNJUSTIFIED_OVERLAPS)
