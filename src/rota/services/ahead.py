"""A manual trigger of a Skip-policy job and the fires sent ahead of their due time.

The dispatcher commits and sends a fire up to the dispatch lead (0.5 s) before it is due; the
worker holds it until then. Such a fire is not a run in progress: it does not refuse a
trigger (:func:`in_progress`). It was planned before the trigger came, so the Skip policy
judges it again at its due time against the triggered run (:func:`judge_at_due`): just before
its due instant, if the triggered run is still Queued or Running, the fire is cancelled
(reason ``overlap``: its worker drops it unstarted); if the triggered run has ended, the fire
runs as sent. A judgement that comes late (a server stalled past the fire's due instant)
still cancels it: the fire that has just started is cancelled as a running occurrence is,
so the Skip policy holds on a busy server too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from uuid import UUID

from rota.core.errors import BackendUnavailableError, ConflictError, NotFoundError
from rota.core.models import Occurrence, OccurrenceStatus
from rota.core.ports import OccurrenceStore, Signals
from rota.services.cancellation import cancel_occurrence
from rota.services.events import EventPublisher

S = OccurrenceStatus
log = logging.getLogger(__name__)

JUDGE_BEFORE = timedelta(milliseconds=300)
"""A fire sent ahead is judged this long before its due instant: its cancel must reach the
worker holding it before the worker starts it (the worker looks 10 ms before), through the
store and the coordination. Judged later, it is cancelled all the same (see the module)."""
OVERLAP = "overlap: a manual run of the job was still in progress at its due time"


def in_progress(active: Sequence[Occurrence], now: datetime) -> list[Occurrence]:
    """The runs of ``active`` (a job's Queued and Running occurrences) really in progress:
    all but the fires not due yet (sent ahead, held by a worker until their time)."""
    return [o for o in active if o.status is not S.QUEUED or o.scheduled_for <= now]


def ahead(active: Sequence[Occurrence], now: datetime) -> list[Occurrence]:
    """The fires of ``active`` not due yet (Queued, their fire time after ``now``)."""
    return [o for o in active if o.status is S.QUEUED and o.scheduled_for > now]


async def judge_at_due(
    store: OccurrenceStore,
    coordination: Signals,
    fire: Occurrence,
    triggered: UUID,
    *,
    clock: Callable[[], datetime],
    events: EventPublisher | None = None,
) -> bool:
    """At :data:`JUDGE_BEFORE` before ``fire`` is due, cancel it (reason :data:`OVERLAP`)
    if the triggered run ``triggered`` is still Queued or Running; ``True`` if it was
    cancelled (or, started meanwhile, its cancel was asked of its worker)."""
    wait = (fire.scheduled_for - JUDGE_BEFORE - clock()).total_seconds()
    if wait > 0:
        await asyncio.sleep(wait)
    run = await store.get_occurrence(triggered)
    if run.status not in (S.QUEUED, S.RUNNING):
        return False
    current = await store.get_occurrence(fire.id)
    if current.status not in (S.QUEUED, S.RUNNING) or current.attempt != fire.attempt:
        return False
    try:
        await cancel_occurrence(
            store, coordination, fire.id, reason=OVERLAP, now=clock(), events=events
        )
    except (ConflictError, NotFoundError):  # it ended meanwhile (or was purged)
        return False
    except BackendUnavailableError as exc:  # started, and its worker cannot be told
        log.warning(
            "fire %s overlaps the manual run %s but could not be cancelled: %s",
            fire.id,
            triggered,
            exc,
            extra={"action": "ahead_overlap_failed", "occurrence_id": fire.id},
        )
        return False
    log.info(
        "fire %s cancelled: the manual run %s was still in progress at its due time",
        fire.id,
        triggered,
        extra={"action": "ahead_overlap", "job_id": fire.job_id, "occurrence_id": fire.id},
    )
    return True
