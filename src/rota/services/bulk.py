"""Bulk actions: one operator's action on a selection of runs or failed-run records, or on
everything a filter matches — retry, resolve, reopen or delete failed records; cancel or
re-run occurrences. Each item goes through the same use case as a single action (the same
checks, events and wake-ups); one item that cannot be done is reported with its reason and
does not stop the others. At most :data:`MAX_BULK` items per call: a filter that matches more
says so (``more``), and the caller runs the action again for the rest (the acted-on items
no longer match: a retried or resolved record is resolved, a cancelled run is not Queued)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final, Literal
from uuid import UUID

from rota.core.errors import RotaError, ValidationError
from rota.core.models import FailedOccurrence, Occurrence
from rota.core.ports import FailedStore, OccurrenceStore, Signals
from rota.core.records import FailedQuery, OccurrenceQuery
from rota.services.cancellation import cancel_occurrence
from rota.services.deadletters import resolve_failed, retry_failed
from rota.services.events import EventPublisher

MAX_BULK: Final = 1000
"""Most items one bulk call acts on."""

FailedAction = Literal["retry", "resolve", "reopen", "delete"]
RunAction = Literal["cancel", "rerun"]


@dataclass(frozen=True, slots=True)
class BulkError:
    id: UUID
    message: str


@dataclass(slots=True)
class BulkOutcome:
    action: str
    matched: int
    """Items selected (at most :data:`MAX_BULK`)."""
    more: bool
    """The filter matches more than were selected: run it again for the rest."""
    done: int = 0
    errors: list[BulkError] = field(default_factory=list)
    created: list[UUID] = field(default_factory=list)
    """The runs a retry or a re-run queued."""
    dry_run: bool = False


async def _select(
    fetch: Callable[[int, str | None], Awaitable[Any]],
) -> tuple[list[Any], bool]:
    """The filter's matches, newest first, at most :data:`MAX_BULK` (and whether there are
    more)."""
    items: list[Any] = []
    cursor: str | None = None
    while len(items) <= MAX_BULK:
        page = await fetch(MAX_BULK + 1 - len(items), cursor)
        items += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    return items[:MAX_BULK], len(items) > MAX_BULK or cursor is not None


async def _choose(
    ids: Sequence[UUID] | None,
    query: FailedQuery | OccurrenceQuery | None,
    list_page: Callable[[Any], Awaitable[Any]],
) -> tuple[list[Any], bool]:
    """The ids given, or what ``query`` matches (one of the two), and whether there are
    more."""
    if ids is not None:
        return list(_check_ids(ids)), False
    assert query is not None

    def fetch(limit: int, cursor: str | None) -> Awaitable[Any]:
        return list_page(replace(query, limit=limit, cursor=cursor))

    return await _select(fetch)


async def _act(
    action: str,
    chosen: Sequence[Any],
    more: bool,
    dry_run: bool,
    one: Callable[[Any], Awaitable[UUID | None]],
) -> BulkOutcome:
    """``one`` on each chosen item (unless a dry run): an item it cannot do is reported with
    its reason and the others go on; what it returns is a run it queued."""
    outcome = BulkOutcome(action, len(chosen), more, dry_run=dry_run)
    if dry_run:
        return outcome
    for item in chosen:
        try:
            queued = await one(item)
        except RotaError as exc:
            item_id = item if isinstance(item, UUID) else item.id
            outcome.errors.append(BulkError(item_id, str(exc)))
        else:
            outcome.done += 1
            if queued is not None:
                outcome.created.append(queued)
    return outcome


def _check_ids(ids: Sequence[UUID]) -> list[UUID]:
    unique = list(dict.fromkeys(ids))
    if not unique:
        raise ValidationError("give at least one id", field="ids")
    if len(unique) > MAX_BULK:
        raise ValidationError(f"at most {MAX_BULK} ids at once", field="ids")
    return unique


class BulkActions:
    """The bulk use cases over the store's failed records and its occurrences (one store:
    its two slices)."""

    def __init__(
        self,
        failed: FailedStore,
        runs: OccurrenceStore,
        coordination: Signals,
        events: EventPublisher | None,
        trigger: Callable[[UUID, Any, str, bool, float], Awaitable[Occurrence]],
    ) -> None:
        self._failed = failed
        self._runs = runs
        self._coordination = coordination
        self._events = events
        self._trigger = trigger
        """``trigger(job_id, job_data, reason, force, delay_seconds)``: the job service's
        manual run."""

    # --- failed-run records -------------------------------------------------------------

    async def failed(
        self,
        action: FailedAction,
        *,
        ids: Sequence[UUID] | None = None,
        query: FailedQuery | None = None,
        note: str | None = None,
        resolution: str | None = None,
        by: str,
        now: datetime,
        dry_run: bool = False,
    ) -> BulkOutcome:
        """``action`` on the given records, or on those ``query`` matches (``note`` and
        ``resolution``: a resolve's note and action name)."""
        chosen, more = await _choose(ids, query, self._failed.list_failed)

        async def one(record: FailedOccurrence | UUID) -> UUID | None:
            record_id = record if isinstance(record, UUID) else record.id
            return await self._one_failed(action, record_id, (note, resolution), by, now)

        return await _act(action, chosen, more, dry_run, one)

    async def _one_failed(
        self,
        action: FailedAction,
        record_id: UUID,
        said: tuple[str | None, str | None],
        by: str,
        now: datetime,
    ) -> UUID | None:
        """One record's action; the run a retry queued."""
        if action == "retry":
            run = await retry_failed(
                self._failed, self._coordination, record_id, by=by, now=now, events=self._events
            )
            return run.id
        if action == "resolve":
            await resolve_failed(
                self._failed,
                record_id,
                resolution_note=said[0],
                resolution_action=said[1],
                resolved=True,
                by=by,
                now=now,
            )
        elif action == "reopen":
            await resolve_failed(self._failed, record_id, resolved=False, by=by, now=now)
        else:
            await self._failed.delete_failed(record_id)
        return None

    # --- occurrences --------------------------------------------------------------------

    async def runs(
        self,
        action: RunAction,
        *,
        ids: Sequence[UUID] | None = None,
        query: OccurrenceQuery | None = None,
        reason: str | None = None,
        force: bool = False,
        per_second: float | None = None,
        start_after: float = 0.0,
        now: datetime,
        dry_run: bool = False,
    ) -> BulkOutcome:
        """Cancel (Queued or Running) or re-run (a new run of the job with the run's data)
        the given occurrences, or those ``query`` matches. A re-run of a Skip-policy job
        while one of its runs is in progress is refused for that item unless ``force``. With
        ``per_second``, re-runs are paced: the n-th (from 0) is scheduled ``start_after +
        n / per_second`` seconds from now and sent when due, so a replay does not flood the
        workers."""
        chosen, more = await _choose(ids, query, self._runs.list_occurrences)
        made = 0  # re-runs queued so far: the next one is paced after them

        async def one(item: Occurrence | UUID) -> UUID | None:
            nonlocal made
            if action == "cancel":
                run_id = item if isinstance(item, UUID) else item.id
                await cancel_occurrence(
                    self._runs,
                    self._coordination,
                    run_id,
                    reason=reason,
                    now=now,
                    events=self._events,
                )
                return None
            run = item if isinstance(item, Occurrence) else await self._runs.get_occurrence(item)
            said = f"re-run of {run.id}" + (f": {reason}" if reason else "")
            delay = start_after + (made / per_second if per_second else 0.0)
            again = await self._trigger(run.job_id, run.job_data, said, force, delay)
            made += 1
            return again.id

        return await _act(action, chosen, more, dry_run, one)
