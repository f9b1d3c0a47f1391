"""Cancelling an occurrence (``POST /occurrences/{id}/cancel``).

- **Queued**: Cancelled at once, through the store (a status change with the reason), so the
  dispatcher never sends it (or sends no further attempt). If its message is already with the
  broker or a worker, the cancellation channel tells the workers too: a live worker that holds
  or later receives the message reports it Cancelled without running it. A worker that was not
  listening when the cancel was sent (started later) would run it; its reports are then
  ignored (an occurrence that is Cancelled does not change again).
  If the cancellation channel cannot be reached the cancel still stands (logged; the caller
  gets the Cancelled occurrence): a message already out may then be run, its reports ignored.
- **Running**: the cancellation channel asks its worker to stop it (an async handler's task is
  cancelled, a sync handler sees ``ctx.cancelled``); the occurrence ends Cancelled when the
  worker reports. A worker that is gone never reports: the zombie detector ends it. If the
  channel cannot be reached nothing happened: ``BackendUnavailableError`` (503).
- **final** (or Unknown, the moment a zombie is being handled): ``ConflictError``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from rota.core.errors import BackendUnavailableError, ConflictError, NotFoundError
from rota.core.models import Job, LogRecord, Occurrence, OccurrenceStatus, StatusRecord
from rota.core.planning import is_fire
from rota.core.ports import AheadStore, OccurrenceStore, Signals
from rota.core.records import OccurrenceQuery
from rota.services.events import EventPublisher

S = OccurrenceStatus
log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Re-reads when the occurrence moves on while it is being cancelled."""


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    occurrence: Occurrence
    """As stored after the cancel (Cancelled, or still Running)."""
    requested: bool
    """``True``: it is running; its worker was asked to cancel it (it ends Cancelled when the
    worker reports). ``False``: it is Cancelled already."""


def cancel_text(reason: str | None) -> str:
    return f"cancelled: {reason}" if reason else "cancelled"


async def cancel_occurrence(
    store: OccurrenceStore,
    coordination: Signals,
    occurrence_id: UUID,
    *,
    reason: str | None,
    now: datetime,
    events: EventPublisher | None = None,
) -> CancelOutcome:
    """Cancel an occurrence (see the module); ``NotFoundError`` if there is none,
    ``ConflictError`` if it has ended."""
    text = cancel_text(reason)
    for _ in range(MAX_ATTEMPTS):
        occurrence = await store.get_occurrence(occurrence_id)
        status = occurrence.status
        if status is S.QUEUED:
            if not await _cancel_queued(store, coordination, occurrence, text, now, events):
                continue  # it moved on meanwhile (started, or ended): look again
            return CancelOutcome(await store.get_occurrence(occurrence_id), requested=False)
        if status is S.RUNNING:  # its worker reports it Cancelled with ``text``
            await coordination.cancel([occurrence_id], text)
            await store.append_logs(
                [
                    LogRecord(
                        occurrence_id=occurrence_id,
                        timestamp=now,
                        level="WARNING",
                        message=f"cancel requested: {reason or 'no reason given'}",
                        category="rota.cancel",
                    )
                ]
            )
            return CancelOutcome(occurrence, requested=True)
        name = status.name.title().replace("_", "")
        if status is S.UNKNOWN:
            raise ConflictError(
                f"occurrence {occurrence_id} is Unknown (being handled as a zombie); try again"
            )
        raise ConflictError(f"occurrence {occurrence_id} has ended ({name}): nothing to cancel")
    raise ConflictError(f"occurrence {occurrence_id} keeps changing; try again")


async def _cancel_queued(
    store: OccurrenceStore,
    coordination: Signals,
    occurrence: Occurrence,
    text: str,
    now: datetime,
    events: EventPublisher | None,
) -> bool:
    """Cancel a Queued occurrence; ``False`` if it moved on meanwhile (started, or ended)."""
    record = StatusRecord(
        occurrence_id=occurrence.id,
        status=S.CANCELLED,
        timestamp=now,
        attempt=occurrence.attempt,
        exception=text,
    )
    result = await store.apply_status([record])
    if not result.applied:
        return False
    if events is not None:
        events.status_applied(result)
    # Its message may be out (or being published right now): a worker holding it, or
    # receiving it later, skips it. The cancel is stored already: a coordination that
    # cannot be reached does not undo it (nor may the caller see a failure and retry
    # into a 409); only a message already out may then run (its reports ignored).
    try:
        await coordination.cancel([occurrence.id], text)
    except BackendUnavailableError as exc:
        log.warning(
            "occurrence %s cancelled, but the workers could not be told: %s",
            occurrence.id,
            exc,
            extra={"action": "cancel_notify_failed", "occurrence_id": occurrence.id},
        )
    return True


AHEAD_PAGE = 1000
"""Occurrences sent ahead looked at per call (a job has a lead's worth of fires at most)."""

AHEAD_MARGIN = timedelta(seconds=0.25)
"""An occurrence sent ahead that is due sooner than this is left to start: the cancel (or the
new version) could reach its worker after its due instant, when it has started, and the store
would then say it never ran. Such a fire runs as it was sent, as if the disable, delete or
edit had come just after it."""


async def cancel_ahead(
    store: OccurrenceStore,
    coordination: Signals,
    job_id: UUID,
    *,
    reason: str,
    now: datetime,
    events: EventPublisher | None = None,
) -> int:
    """Cancel the job's occurrences that were sent ahead of their due time (the dispatch
    lead) and are still Queued, due after ``now`` (and :data:`AHEAD_MARGIN`): the job was
    disabled or deleted before they came due, so they must not start. A worker holding one
    reports it Cancelled without running it. One that has started meanwhile (its due time
    passed) is left alone. Returns how many were cancelled."""
    query = OccurrenceQuery(
        job_id=job_id, statuses=(S.QUEUED,), scheduled_after=now + AHEAD_MARGIN, limit=AHEAD_PAGE
    )
    page = await store.list_occurrences(query)
    text = cancel_text(reason)
    cancelled = 0
    for occurrence in page.items:
        if await _cancel_queued(store, coordination, occurrence, text, now, events):
            cancelled += 1
    return cancelled


EDITED = "job edited before its due time"


async def supersede_ahead(
    store: AheadStore,
    coordination: Signals,
    publish: Callable[[Sequence[Occurrence], datetime], Awaitable[None]],
    job: Job,
    *,
    max_retries: int,
    now: datetime,
    events: EventPublisher | None = None,
) -> tuple[int, int]:
    """Honour an edit of ``job`` (a new version) in its occurrences sent ahead of their due
    time (the dispatch lead), still Queued, due after ``now`` (and :data:`AHEAD_MARGIN`): one
    whose fire is still a fire of the job as it is now takes the new version (type, data,
    priority, timeout…) in the store and is sent again; the workers are told, and one
    holding the older copy drops it unreported (the new copy runs, at the same due
    instant). One whose fire is no longer a fire of the job (a new schedule) is cancelled.
    One that has started meanwhile is left alone. Returns ``(sent again, cancelled)``."""
    query = OccurrenceQuery(
        job_id=job.id, statuses=(S.QUEUED,), scheduled_after=now + AHEAD_MARGIN, limit=AHEAD_PAGE
    )
    ahead = [o for o in (await store.list_occurrences(query)).items if o.job_version < job.version]
    if not ahead:
        return 0, 0
    text = cancel_text(f"{EDITED} (no longer one of its fires)")
    cancelled = 0
    keep: list[UUID] = []
    for occurrence in ahead:
        if is_fire(job, occurrence.scheduled_for):
            keep.append(occurrence.id)
        elif await _cancel_queued(store, coordination, occurrence, text, now, events):
            cancelled += 1
    renewed = await store.supersede_queued(job, keep, max_retries)
    if renewed:
        await publish(renewed, now)  # each to the one worker group the dispatcher picks
        try:
            await coordination.cancel([o.id for o in renewed], EDITED, superseded_below=job.version)
        except BackendUnavailableError as exc:  # a worker holding an old copy on its own
            log.warning(  # keeps the newer copy it receives (the hold's version rule)
                "occurrences sent again after an edit, but the workers could not be told: %s",
                exc,
                extra={"action": "supersede_notify_failed", "job_id": job.id},
            )
    return len(renewed), cancelled


DISPLACED = "superseded by a newer fire (overlap policy CancelOther)"
"""The cancel reason of an occurrence a CancelOther job's newer fire replaced."""


async def cancel_displaced(
    store: OccurrenceStore,
    coordination: Signals,
    displacing: dict[UUID, UUID],
    *,
    now: datetime,
    events: EventPublisher | None = None,
) -> int:
    """CancelOther: cancel each job's occurrences still Queued or Running that came before
    its newest fire (``displacing``: job id -> that occurrence; later ones are left alone).
    Returns how many were cancelled or asked to stop."""
    done = 0
    for job_id, newest in displacing.items():
        active = (S.QUEUED, S.RUNNING)
        page = await store.list_occurrences(
            OccurrenceQuery(job_id=job_id, statuses=active, limit=100)
        )
        for occurrence in page.items:
            if occurrence.id >= newest:
                continue
            try:
                await cancel_occurrence(
                    store, coordination, occurrence.id, reason=DISPLACED, now=now, events=events
                )
            except (ConflictError, NotFoundError):
                continue  # it ended meanwhile
            done += 1
    return done
