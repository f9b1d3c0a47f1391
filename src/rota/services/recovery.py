"""Start-up recovery for the embedded mode: the in-process broker lost everything the previous
process had in flight, so Queued occurrences are handed to the dispatcher again and Running ones
become Unknown and get a new attempt (at-least-once). Nothing stays Queued or Running."""

from __future__ import annotations

import logging
from datetime import datetime

from rota.core.models import OccurrenceStatus, StatusRecord
from rota.core.ports import RecoveryStore
from rota.core.records import OccurrenceQuery

log = logging.getLogger(__name__)

RESTART_REASON = "scheduler process restarted while it ran"


async def recover_embedded(
    store: RecoveryStore, now: datetime, *, batch: int = 1000
) -> tuple[int, int]:
    """Returns (requeued Running, redispatched Queued)."""
    requeued = 0
    while True:
        page = await store.list_occurrences(
            OccurrenceQuery(statuses=(OccurrenceStatus.RUNNING,), limit=batch)
        )
        if not page.items:
            break
        records: list[StatusRecord] = []
        for occ in page.items:
            records.append(
                StatusRecord(
                    occurrence_id=occ.id,
                    status=OccurrenceStatus.UNKNOWN,
                    timestamp=now,
                    attempt=occ.attempt,
                    exception=RESTART_REASON,
                )
            )
            records.append(
                StatusRecord(
                    occurrence_id=occ.id,
                    status=OccurrenceStatus.QUEUED,
                    timestamp=now,
                    attempt=occ.attempt + 1,
                    retry_at=now,
                )
            )
        result = await store.apply_status(records)
        requeued += len(page.items)
        if not result.applied:
            log.error("recovery could not requeue %d running occurrences", len(page.items))
            break
    redispatched = await store.reset_dispatch([OccurrenceStatus.QUEUED])
    if requeued or redispatched:
        log.info(
            "recovered after restart: %d running occurrences requeued, %d queued redispatched",
            requeued,
            redispatched,
        )
    return requeued, redispatched
