"""The attempts finalized here, so a copy of one delivered again is not run twice.

:class:`FinalizedAttempts` remembers, per occurrence, the highest attempt this executor
reported final: the newest ones in memory (checked for every delivery), all of them in the
optional :class:`~rota.worker.localstore.LocalStore` (checked for a redelivered message, and
surviving a restart). The store's entries are pruned at start and then every hour: those
older than ``retention`` seconds, and the oldest beyond ``max_entries``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from uuid import UUID

from rota.core.models import JobMessage
from rota.core.ports import Delivery
from rota.worker.localstore import LocalStore

__all__ = ["FinalizedAttempts"]

log = logging.getLogger(__name__)

_MAX_REMEMBERED_FINALS = 50_000
"""Finalized attempts kept in memory (checked for every delivery; the local store keeps more,
checked for redelivered messages)."""
_PRUNE_EVERY = 3600.0


class FinalizedAttempts:
    """The attempts finalized here (see the module)."""

    def __init__(self, store: LocalStore | None, *, retention: float, max_entries: int) -> None:
        self._store = store
        self._retention = retention
        self._max_entries = max_entries
        self._finals: OrderedDict[UUID, int] = OrderedDict()
        """Occurrence id -> highest attempt finalized here (the newest ones)."""
        self._next_prune = 0.0

    async def load(self) -> None:
        """Forget the store's old finalized attempts and remember its newest."""
        store = self._store
        if store is None:
            return
        await self._prune(store)
        for occurrence_id, attempt in (await store.recent_finals(_MAX_REMEMBERED_FINALS)).items():
            self._finals[occurrence_id] = attempt

    def known(self, message: JobMessage) -> bool:
        """Whether the message's attempt (or a later one) is remembered final, in memory."""
        known = self._finals.get(message.occurrence_id)
        return known is not None and message.attempt <= known

    async def finalized_here(self, delivery: Delivery) -> bool:
        """Whether the delivery's attempt (or a later one) was finalized by this worker: in
        memory, or in the local store for a redelivered message."""
        message = delivery.message
        if self.known(message):
            return True
        store = self._store
        if store is None or not delivery.redelivered or message.occurrence_id in self._finals:
            return False
        try:
            attempt = await store.finalized_attempt(message.occurrence_id)
        except Exception:
            log.warning("reading finalized attempts failed", exc_info=True)
            return False
        if attempt is None:
            return False
        self.remember(message.occurrence_id, attempt)
        return message.attempt <= attempt

    def remember(self, occurrence_id: UUID, attempt: int) -> None:
        """Remember an attempt finalized here (the store learns it with the outcome's
        report: :mod:`rota.worker.reporter`)."""
        finals = self._finals
        if finals.get(occurrence_id, 0) < attempt:
            finals[occurrence_id] = attempt
        finals.move_to_end(occurrence_id)
        if len(finals) > _MAX_REMEMBERED_FINALS:
            finals.popitem(last=False)

    async def prune_if_due(self) -> None:
        """Prune the store if an hour passed since the last time."""
        if self._store is not None and time.monotonic() >= self._next_prune:
            await self._prune(self._store)

    async def _prune(self, store: LocalStore) -> None:
        self._next_prune = time.monotonic() + _PRUNE_EVERY
        try:
            removed = await store.prune(
                older_than=time.time() - self._retention, max_entries=self._max_entries
            )
        except Exception:
            log.warning("pruning finalized attempts failed", exc_info=True)
            return
        if removed:
            log.info(
                "forgot %d old finalized attempts", removed, extra={"action": "prune_finalized"}
            )
