"""The store's slice for sending each occurrence to one worker group
(docs/concepts.md#worker-groups-and-routing): what a group declined goes back to the dispatcher."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from uuid import UUID

from rota.core.models import Occurrence
from rota.core.ports.store import DispatchStore
from rota.core.records import DeclinedResult


class RoutingStore(abc.ABC):
    """Occurrences handed back to the dispatcher to be sent (again) to a worker group."""

    @abc.abstractmethod
    async def undispatch(self, occurrences: Sequence[Occurrence]) -> None:
        """Clear ``dispatched_at`` of each occurrence still Queued at the given attempt, so
        the dispatcher's sweep sends it (an occurrence marked dispatched when it was
        committed but that no group could be sent it to)."""

    @abc.abstractmethod
    async def return_declined(
        self,
        declined: Sequence[tuple[UUID, int]],
        serves: Callable[[str, str | None], bool],
    ) -> DeclinedResult:
        """Attempts ``(occurrence id, attempt)`` that a worker group declined (it does not
        run their job type), in one transaction. Each one still Queued at that attempt and
        handed to the broker is either handed back to the dispatcher (``dispatched_at``
        cleared, due at once: ``returned``) when ``serves(job type, the job's group)`` says a
        group runs it now, or left for the caller to fail (``unserved``). Any other
        (unknown, a later attempt, started, ended, already handed back) is in neither: the
        decline is stale."""


class RoutedDispatchStore(DispatchStore, RoutingStore, abc.ABC):
    """What the dispatcher takes: dispatching, and handing back what it could not send."""
