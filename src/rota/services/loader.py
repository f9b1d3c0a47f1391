"""The loader keeps the schedule index equal to the store's hot window for the buckets this
instance owns: it adds jobs coming due and drops stale entries. The index is only a cache;
after a flush the next sync rebuilds it.

Only the window is ever held (in this process or in Redis): a job due beyond it has no entry
until a sync finds it inside, so the index's size, and each sync's cost (one indexed range
read of ``jobs`` by ``next_run_at``), follow the fires due within the window, not the number
of pending jobs. A sync runs every interval, so a job enters the index at least
``window - interval`` before it is due (the settings require the window to be the longer).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from rota.core.models import utcnow
from rota.core.ports import DispatchStore, ScheduleIndex
from rota.core.records import IndexEntry
from rota.services._loop import run_periodically

log = logging.getLogger(__name__)

_FAR_FUTURE = 32503680000.0
"""Year 3000 in epoch seconds: reading the index up to it reads all of it."""


class Loader:
    """Periodically mirrors ``next_run_at <= now + window`` from the store into the index:
    adds or moves the entries the store has, drops the ones it no longer has."""

    def __init__(
        self,
        store: DispatchStore,
        index: ScheduleIndex,
        buckets: Callable[[], Sequence[int]],
        *,
        window_seconds: float,
        interval_seconds: float,
        limit: int = 200_000,
        on_loaded: Callable[[float], None] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """``limit``: entries read per sync (the earliest first: a window holding more is
        taken in slices as the dispatcher fires them). ``on_loaded(earliest due)``: after
        a sync that found entries (the dispatcher's wake)."""
        self._store = store
        self._index = index
        self._buckets = buckets
        self._window = window_seconds
        self._interval = interval_seconds
        self._limit = limit
        self._on_loaded = on_loaded
        self._clock = clock
        self._stopping = asyncio.Event()
        self._kick = asyncio.Event()
        self.last_sync: float | None = None

    async def sync(self, buckets: Sequence[int] | None = None) -> int:
        """Rebuild the index for ``buckets`` (default: the owned ones) from the store; returns
        how many entries the window holds."""
        owned = list(self._buckets() if buckets is None else buckets)
        if not owned:
            return 0
        # What the index holds *before* the store is read: only those entries may be dropped
        # as stale. An entry added meanwhile (a job created or changed through any server's
        # API) is newer than what this read can see, and stays.
        before = await self._index.due(owned, _FAR_FUTURE, self._limit)
        until = self._clock() + timedelta(seconds=self._window)
        due = await self._store.due_jobs(until, owned, self._limit)
        # Only what the index lacks or holds otherwise is written: a backlog due now (read
        # again by every sync until it is fired) costs one read, not a rewrite each time.
        held = {e.job_id: (e.bucket, e.due) for e in before}
        fresh = [IndexEntry(e.job_id, e.bucket, e.due_at.timestamp()) for e in due]
        changed = [e for e in fresh if held.get(e.job_id) != (e.bucket, e.due)]
        if changed:
            await self._index.upsert(changed)
        current = {e.job_id for e in due}
        # A read cut at the limit says nothing of the jobs from its last due time on (ties
        # are cut by job id): their entries (indexed when their job was created) stay.
        seen_until = due[-1].due_at.timestamp() if len(due) >= self._limit else math.inf
        stale = [
            (e.bucket, e.job_id) for e in before if e.job_id not in current and e.due < seen_until
        ]
        if stale:
            await self._index.remove(stale)
        self.last_sync = time.time()
        if due and self._on_loaded is not None:
            self._on_loaded(min(e.due_at.timestamp() for e in due))
        return len(due)

    def kick(self) -> None:
        """Sync now (after taking over buckets)."""
        self._kick.set()

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()

    async def run(self) -> None:
        """Sync every interval, and at once after a :meth:`kick`. The kick is cleared before
        the sync, not after it: a kick that comes while the sync runs (buckets gained
        meanwhile, which this sync may not cover) starts the next one."""
        await run_periodically(
            "loader sync", self.sync, self._interval, self._stopping, self._kick, log=log
        )
