"""Dead letters: the DLQ handler every server runs, and the use cases of failed occurrences.

The handler consumes the broker's dead-letter queue in batches and turns every message into a
failed-occurrence record, then acknowledges the batch (a batch is acknowledged only after it is
stored; a store outage stalls the loop with backoff but loses nothing):

* a job message it can read, naming an occurrence the store knows: that occurrence is failed
  (status Failed with the letter's failure type, else ``poison``, and its reason), which
  records its failed occurrence in the same transaction. If the occurrence has moved on (a
  later attempt, or it already ended) the letter is stale: logged and counted, nothing stored.
* a job message naming an occurrence the store does not know: a record for that id, with the
  message's job, data and attempt.
* a body that cannot be read (a *poison message*): a record naming no occurrence, failure type
  ``poison``, the body as received (cut) in ``raw_message`` and why it cannot be read in
  ``exception``.

No input stops the loop: every message becomes a record or a counted, logged stale letter,
and an unexpected error is logged and retried with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from rota.core.errors import RotaError
from rota.core.events import occurrence_updated
from rota.core.ids import new_id
from rota.core.models import (
    FailedOccurrence,
    FailureType,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    utcnow,
)
from rota.core.ports import Broker, DeadLetterStore, FailedStore, Signals
from rota.core.records import (
    FAILURE_TEXT_LIMIT,
    Batch,
    ReceivedDeadLetter,
    StatusResult,
    truncate_text,
)
from rota.services._loop import Backoff, run_periodically
from rota.services.events import EventPublisher
from rota.services.tracker import TrackerStats

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

JOB_TYPE_LIMIT = 200
"""The longest job type a record holds (the store's column)."""


@dataclass(slots=True)
class DeadLetterStats(TrackerStats):
    letters: int = 0
    """Dead letters handled (stored as records, or found stale)."""
    failed: int = 0
    """Occurrences failed because their job message was dead-lettered."""
    poison: int = 0
    """Records stored for messages that name no occurrence the store knows, or none at all."""
    stale: int = 0
    """Letters for occurrences that had moved on (a later attempt, or already ended)."""


def clean_text(text: str, limit: int | None = None) -> str:
    """Text any store column takes: no NUL (PostgreSQL refuses it), at most ``limit``."""
    text = text.replace("\x00", "\ufffd")
    return text if limit is None else (truncate_text(text, limit) or "")


def _where(item: ReceivedDeadLetter) -> str:
    parts = [
        f"reason {item.reason}" if item.reason else "",
        f"from {item.queue}" if item.queue else "",
    ]
    said = ", ".join(p for p in parts if p)
    return f" (dead-lettered: {said})" if said else ""


def _loose(body: bytes) -> dict[str, Any]:
    """What can be read of an unreadable body: a JSON object's ``jobId``/``jobType``/
    ``occurrenceId`` when they are there (else nothing)."""
    try:
        document = orjson.loads(body)
    except (orjson.JSONDecodeError, RecursionError, MemoryError):
        return {}
    return document if isinstance(document, dict) else {}


def _uuid_or_none(value: object) -> UUID | None:
    if not isinstance(value, str):
        return None
    try:
        return UUID(value)
    except ValueError:
        return None


def _head(body: bytes) -> str:
    """The start of a body as text (enough for a record; undecodable bytes replaced)."""
    return body[: FAILURE_TEXT_LIMIT * 4].decode("utf-8", "replace")


def poison_record(item: ReceivedDeadLetter, now: datetime) -> FailedOccurrence:
    """The record of a dead letter whose body cannot be read: it names no occurrence (an id
    read from a broken body is not trusted with one), and keeps the body and why."""
    loose = _loose(item.body)
    job_type = loose.get("jobType")
    hint = _uuid_or_none(loose.get("occurrenceId"))
    named = f" naming occurrence {hint}" if hint is not None else ""
    exception = f"undecodable job message{named}: {item.error or 'unreadable'}{_where(item)}"
    return FailedOccurrence(
        id=new_id(),
        occurrence_id=None,
        job_id=_uuid_or_none(loose.get("jobId")),
        job_type=clean_text(job_type, JOB_TYPE_LIMIT) if isinstance(job_type, str) else "",
        failure_type=FailureType.POISON,
        exception=clean_text(exception, None),
        job_data=None,
        attempts=0,
        failed_at=now,
        created_at=now,
        raw_message=clean_text(_head(item.body), FAILURE_TEXT_LIMIT),
    )


def _letter_exception(item: ReceivedDeadLetter) -> str:
    assert item.letter is not None
    if item.letter.exception:
        return clean_text(item.letter.exception)
    return f"the job message was dead-lettered without running{_where(item)}"


def _failure_type(item: ReceivedDeadLetter) -> FailureType:
    assert item.letter is not None
    return item.letter.failure_type or FailureType.POISON


def letter_status(item: ReceivedDeadLetter, now: datetime) -> StatusRecord:
    """The final status a readable dead letter gives its occurrence's attempt."""
    assert item.letter is not None
    message = item.letter.message
    return StatusRecord(
        occurrence_id=message.occurrence_id,
        status=OccurrenceStatus.FAILED,
        timestamp=item.letter.failed_at or now,
        attempt=message.attempt,
        exception=truncate_text(_letter_exception(item)),
        failure_type=_failure_type(item),
    )


def unknown_occurrence_record(item: ReceivedDeadLetter, now: datetime) -> FailedOccurrence:
    """The record of a readable dead letter naming an occurrence the store does not know."""
    assert item.letter is not None
    message = item.letter.message
    return FailedOccurrence(
        id=new_id(),
        occurrence_id=message.occurrence_id,
        job_id=message.job_id,
        job_type=clean_text(message.job_type, JOB_TYPE_LIMIT),
        failure_type=_failure_type(item),
        exception=f"{_letter_exception(item)} (no such occurrence)",
        job_data=message.job_data,
        attempts=message.attempt,
        failed_at=item.letter.failed_at or now,
        created_at=now,
    )


class DeadLetterHandler:
    """Stores the broker's dead letters as failed occurrences (see the module docstring)."""

    def __init__(
        self,
        store: DeadLetterStore,
        broker: Broker,
        *,
        batch_size: int = 100,
        max_wait: float = 0.2,
        clock: Clock = utcnow,
        on_applied: Callable[[StatusResult], None] | None = None,
        max_backoff: float = 5.0,
    ) -> None:
        self._store = store
        self._broker = broker
        self._batch_size = batch_size
        self._max_wait = max_wait
        self._clock = clock
        self._on_applied = on_applied
        self._max_backoff = max_backoff
        self._stopping = asyncio.Event()
        self.stats = DeadLetterStats()

    def stop(self) -> None:
        self._stopping.set()

    async def handle(self, items: Sequence[ReceivedDeadLetter]) -> None:
        """Store one batch of dead letters (raises when the store fails: nothing is then
        half-stored in a way a repeat would double, see the module docstring)."""
        now = self._clock()
        readable = [item for item in items if item.letter is not None]
        records = [poison_record(item, now) for item in items if item.letter is None]
        stale = 0
        failed = 0
        if readable:
            result = await self._store.apply_status([letter_status(i, now) for i in readable])
            failed = sum(1 for c in result.applied if c.to_status.is_terminal)
            unknown = {i.record.occurrence_id for i in result.ignored if i.reason == "unknown"}
            for item in readable:
                assert item.letter is not None
                if item.letter.message.occurrence_id in unknown:
                    records.append(unknown_occurrence_record(item, now))
            for ignored in result.ignored:
                if ignored.reason != "unknown":
                    stale += 1
                    log.info(
                        "stale dead letter (the occurrence moved on: %s) dropped",
                        ignored.reason,
                        extra={
                            "action": "dead_letter",
                            "occurrence_id": ignored.record.occurrence_id,
                        },
                    )
            if result.applied and self._on_applied is not None:
                self._on_applied(result)
        if records:
            await self._store.record_dead_letters(records)
            for record in records:
                log.warning(
                    "dead letter stored as a failed occurrence: %s",
                    (record.exception or "")[:300],
                    extra={"action": "dead_letter", "occurrence_id": record.occurrence_id},
                )
        self.stats.batches += 1
        self.stats.letters += len(items)
        self.stats.failed += failed
        self.stats.poison += len(records)
        self.stats.stale += stale

    async def run(self) -> None:
        """Consume until :meth:`stop`. A store outage holds the batch and retries it; a broker
        outage (or anything unexpected) restarts the consumer after a backoff."""
        restart = Backoff(0.05, self._max_backoff)
        # The consumer ending on its own (its broker closed) waits the backoff too.
        await run_periodically(
            "dead-letter consumer",
            lambda: self._consume(restart),
            restart.next,
            self._stopping,
            log=log,
            on_error=self._failed,
        )

    def _failed(self) -> None:
        self.stats.errors += 1

    async def _consume(self, restart: Backoff) -> None:
        batches = self._broker.consume_dead_letters(self._batch_size, self._max_wait)
        try:
            async for batch in batches:
                restart.reset()
                if not await self._store_batch(batch) or self._stopping.is_set():
                    return
        finally:
            await _close(batches)

    async def _store_batch(self, batch: Batch[ReceivedDeadLetter]) -> bool:
        """Store and acknowledge one batch, retrying with backoff; ``False`` if stopped
        before it was stored."""
        self.stats.holding = True
        try:
            backoff = 0.05
            while True:
                try:
                    await self.handle(batch.items)
                    await batch.ack()
                    return True
                except (RotaError, OSError) as exc:
                    self.stats.errors += 1
                    log.warning("dead-letter handler: store write failed, retrying: %s", exc)
                except Exception:  # a bug: logged, and retried rather than lost or fatal
                    self.stats.errors += 1
                    log.exception("dead-letter handler: unexpected error storing a batch")
                if self._stopping.is_set():
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=backoff)
                backoff = min(backoff * 2, self._max_backoff)
        finally:
            self.stats.holding = False


async def _close(batches: AsyncIterator[Batch[ReceivedDeadLetter]]) -> None:
    close = getattr(batches, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


# --- failed occurrences: use cases ----------------------------------------------------------


async def resolve_failed(
    store: FailedStore,
    failed_id: UUID,
    *,
    resolution_note: str | None = None,
    resolution_action: str | None = None,
    resolved: bool | None = None,
    by: str | None = None,
    now: datetime,
) -> FailedOccurrence:
    """Change a failed occurrence's resolution. Giving a note or an action resolves it unless
    ``resolved`` is given as ``False``."""
    if resolved is None and (resolution_note is not None or resolution_action is not None):
        resolved = True
    return await store.update_failed(
        failed_id,
        resolution_note=resolution_note,
        resolution_action=resolution_action,
        resolved=resolved,
        resolved_by=by if resolved else None,
        now=now,
    )


async def retry_failed(
    store: FailedStore,
    coordination: Signals,
    failed_id: UUID,
    *,
    by: str | None = None,
    now: datetime,
    events: EventPublisher | None = None,
) -> Occurrence:
    """Run a failed occurrence again as a new attempt (resolving its record) and wake the
    dispatchers; if the wake-up cannot be sent the periodic pending sweep publishes it."""
    occurrence = await store.retry_failed(failed_id, now, by)
    if events is not None:
        changes = occurrence.status_changes
        events.emit(
            [
                occurrence_updated(
                    occurrence_id=occurrence.id,
                    job_id=occurrence.job_id,
                    job_type=occurrence.job_type,
                    worker_id=occurrence.worker_id,
                    instance_id=None,
                    from_status=changes[-1].from_status if changes else None,
                    status=occurrence.status,
                    attempt=occurrence.attempt,
                )
            ]
        )
    try:
        await coordination.wake(now.timestamp())
    except (RotaError, OSError) as exc:
        log.warning("retry of %s stored; the dispatchers were not woken: %s", failed_id, exc)
    return occurrence
