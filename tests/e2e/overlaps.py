"""Fires recorded ``Skipped`` (reason ``overlap``) while nothing of their job was in progress:
the check the chaos soak and the failover tests share (docs/reliability.md, "Chaos soak").

A Skip-policy fire is judged against the runs of its job that existed before the dispatch
that recorded it (docs/concepts.md): an overlap skip is justified by another occurrence of
the job, not skipped itself, recorded *earlier* (``created_at`` before the skip's: a fire of
the same dispatch never counts) and not over yet when the skip was recorded, as the store
saw it:

- still open;
- ended by a transaction that began writing after the skip's (the end's row version,
  ``xmin``, is newer);
- ended by its worker's clock less than a second before the skip (a report being committed
  while the dispatch read the store);
- or ended by a transaction that began writing less than a second before the skip's, as the
  server's clock tells: a report held in a worker's outbox while the broker was away carries
  the worker's older clock, and its status transaction may take its id before the dispatch
  and commit after it (transaction ids order first writes, not commits). Every row whose
  ``xmin`` is older than the end's was created (``created_at``, the server's clock) before
  that transaction's first write, so the latest of them bounds that write from below.
"""

from __future__ import annotations

from typing import Any

from .distributed import Cluster
from .faults import sql

UNJUSTIFIED_OVERLAPS = """
    WITH writes AS (  -- per transaction id, the latest server time known to precede it
        SELECT x, max(at) OVER (ORDER BY x) AS before
          FROM (SELECT xmin::text::bigint AS x, max(created_at) AS at
                  FROM occurrences GROUP BY 1) AS t
    )
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
                   OR o.xmin::text::bigint > s.xmin::text::bigint
                   OR (SELECT w.before FROM writes w
                        WHERE w.x < o.xmin::text::bigint
                        ORDER BY w.x DESC LIMIT 1) > s.created_at - interval '1 second'))
     ORDER BY s.scheduled_for
"""


def unjustified_overlaps(c: Cluster) -> list[dict[str, Any]]:
    """The overlap skips of the cluster's store that no run in progress explains."""
    return sql(c, UNJUSTIFIED_OVERLAPS)
