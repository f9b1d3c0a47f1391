"""The executor's flow control: slots, per-job-type limits, held deliveries, hand-back.

A :class:`Flow` admits the deliveries the executor takes from the broker (its prefetch is the
executor's ``concurrency``). One starts at once when a slot is free and its job type is under
its own ``concurrency``; else it is held here, and held ones start highest priority first
(then oldest first) as handlers finish, a job type at its limit letting other types pass: a
low-priority delivery that came first never starts before a higher one waiting with it. A
delivery held longer than ``hand_back_after`` seconds (and every held one at stop) is given
back to the broker, which delivers it again: none stays unsettled long enough to meet the
broker's consumer timeout.
The flow owns the tasks handling the deliveries it started; what a task does is the
intake's ``start`` (stage 7 of :mod:`rota.worker.intake`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from rota.core.ports import Delivery
from rota.sdk.registry import AnyJobDefinition
from rota.worker.hold import Entry
from rota.worker.run import ExecutorStats

__all__ = ["Flow"]

log = logging.getLogger(__name__)


class _Held:
    """A delivery received but not started: no slot free, or its job type at its limit."""

    __slots__ = ("delivery", "since")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.since = time.monotonic()


class Flow:
    """Starts deliveries as slots and job type limits allow (see the module).

    ``handle(delivery)`` runs one started delivery; ``ack(delivery)`` acknowledges one
    without running it (a held copy of the same occurrence); ``unstarted(delivery)`` is told
    of one that will not start here (given back to the broker, or dropped with its lost
    channel). ``stopping`` (set at the executor's stop) stops held deliveries from starting.
    """

    def __init__(
        self,
        *,
        concurrency: int,
        definitions: Mapping[str, AnyJobDefinition],
        hand_back_after: float,
        stats: ExecutorStats,
        handle: Callable[[Delivery], Coroutine[Any, Any, None]],
        ack: Callable[[Delivery], None],
        unstarted: Callable[[Delivery], None] = lambda _: None,
        finished: Callable[[Delivery], None] | None = None,
    ) -> None:
        self._free = concurrency
        self._limits = {
            name: limit
            for name, d in definitions.items()
            if (limit := d.options.concurrency) is not None and limit < concurrency
        }
        self._by_type: dict[str, int] = {}
        """Handlers of each limited job type started and not finished."""
        self._held: deque[_Held] = deque()
        self._held_ids: dict[UUID, int] = {}
        """How many held deliveries each occurrence has (a copy is looked for only then)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._hand_back_after = hand_back_after
        self._stats = stats
        self._handle = handle
        self._ack = ack
        self._unstarted = unstarted
        self._finished = finished
        self.stopping = False

    @property
    def held(self) -> int:
        """Deliveries received and waiting for a slot or their job type's turn."""
        return len(self._held)

    @property
    def hand_back_after(self) -> float:
        return self._hand_back_after

    @property
    def room(self) -> int:
        """How many more deliveries could start now (free slots not promised to held ones)."""
        return self._free - len(self._held)

    @property
    def tasks(self) -> set[asyncio.Task[None]]:
        """The tasks handling started deliveries (a copy)."""
        return set(self._tasks)

    def admit(self, delivery: Delivery) -> None:
        """Start the delivery if it fits now and none waits before it, else hold it."""
        if not self._held and self._fits(delivery.message.job_type):
            self._launch(delivery)
        elif self._is_held_copy(delivery):
            self._ack(delivery)
        else:
            self._hold(_Held(delivery))
            self._pump()

    def _is_held_copy(self, delivery: Delivery) -> bool:
        """Whether a held delivery of the same occurrence makes this one a copy to drop. Two
        of one occurrence: a republish, or a redelivery after the channel of the held one was
        lost (its settle reaches nobody). The later attempt, else the later job version, else
        the newer delivery, stays; the other is acknowledged without running."""
        message = delivery.message
        if message.occurrence_id not in self._held_ids:
            return False
        for item in self._held:
            held = item.delivery.message
            if held.occurrence_id == message.occurrence_id:
                if (held.attempt, held.job_version) > (message.attempt, message.job_version):
                    self._ended(delivery)
                    return True
                self._held.remove(item)
                self._forget(item)
                self._ack(item.delivery)
                self._ended(item.delivery)
                return False
        return False

    def _ended(self, delivery: Delivery) -> None:
        if self._finished is not None:
            self._finished(delivery)

    def _hold(self, item: _Held) -> None:
        """Hold it after every held delivery of its priority or higher (the order to start)."""
        held, priority = self._held, item.delivery.message.priority
        at = len(held)
        while at and held[at - 1].delivery.message.priority < priority:
            at -= 1
        held.insert(at, item)
        self._remember(item)

    def _remember(self, item: _Held) -> None:
        oid = item.delivery.message.occurrence_id
        self._held_ids[oid] = self._held_ids.get(oid, 0) + 1

    def _forget(self, item: _Held) -> None:
        oid = item.delivery.message.occurrence_id
        left = self._held_ids.get(oid, 0) - 1
        if left > 0:
            self._held_ids[oid] = left
        else:
            self._held_ids.pop(oid, None)

    def _fits(self, job_type: str) -> bool:
        if not self._free:
            return False
        limit = self._limits.get(job_type)
        return limit is None or self._by_type.get(job_type, 0) < limit

    def _pump(self) -> None:
        """Start held deliveries that fit now, in the order held (priority, then age)."""
        held = self._held
        if self.stopping or not held or not self._free:
            return
        kept: deque[_Held] = deque()
        while held and self._free:
            item = held.popleft()
            self._forget(item)
            if not item.delivery.is_live:
                # Its channel is gone: the broker delivers it again (maybe elsewhere); running
                # it here as well would run it twice.
                self._stats.dropped_dead += 1
                self._unstarted(item.delivery)
                continue
            if self._fits(item.delivery.message.job_type):
                self._launch(item.delivery)
            else:
                self._remember(item)
                kept.append(item)
        kept.extend(held)
        self._held = kept

    def limited(self, job_type: str) -> bool:
        """Whether the job type has a concurrency of its own here."""
        return job_type in self._limits

    def start_ready(
        self,
        entries: list[Entry],
        make: Callable[[Delivery, Any, datetime], Coroutine[Any, Any, None]],
        clock: Callable[[], datetime],
    ) -> list[Delivery]:
        """Start the readied deliveries of a hold's group (:mod:`rota.worker.hold`), all due
        now, as slots allow, highest priority first: each start is its time and its task,
        ``make(delivery, token, started)``, in one loop; what the flow keeps of them comes
        after it. Tokens are only given to job types without a concurrency of their own.
        None starts while a delivery is held here (those come first) or at stop. Returns the
        deliveries not started (unreadied, or no slot), in order."""
        if self.stopping or self._held or not self._free:
            return [entry.delivery for entry in entries]
        if len(entries) > self._free:
            entries = sorted(entries, key=lambda e: -e.delivery.message.priority)
        loop = asyncio.get_running_loop()
        task_of = asyncio.Task
        free = self._free
        started: list[tuple[asyncio.Task[None], Delivery]] = []
        rest: list[Delivery] = []
        for entry in entries:
            token = entry.token
            if token is None or not free:
                rest.append(entry.delivery)
                continue
            free -= 1
            delivery = entry.delivery
            started.append((task_of(make(delivery, token, clock()), loop=loop), delivery))
        self._free = free
        tasks, on_done = self._tasks, self._on_done
        for task, delivery in started:
            tasks.add(task)
            task.add_done_callback(on_done(delivery, None))
        return rest

    def _launch(self, delivery: Delivery) -> None:
        job_type = delivery.message.job_type
        self._free -= 1
        task = asyncio.get_running_loop().create_task(self._handle(delivery))
        self._tasks.add(task)
        limited = job_type if job_type in self._limits else None
        if limited is not None:
            self._by_type[limited] = self._by_type.get(limited, 0) + 1
        task.add_done_callback(self._on_done(delivery, limited))

    def _on_done(
        self, delivery: Delivery, limited: str | None
    ) -> Callable[[asyncio.Task[None]], None]:
        """A started task's one done callback: :meth:`_done` alone when there is nothing
        else to settle, else :meth:`_settle` (its type's count, ``finished``)."""
        if limited is None and self._finished is None:
            return self._done
        return functools.partial(self._settle, limited, delivery)

    def _settle(self, limited: str | None, delivery: Delivery, task: asyncio.Task[None]) -> None:
        """A task's one callback (one turn of the loop a job, not two): its type's count
        (``limited``) and its slot back, then ``finished``."""
        if limited is not None:
            self._by_type[limited] -= 1
        self._done(task)
        self._ended(delivery)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._free += 1
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("job handling failed", exc_info=exc, extra={"action": "handle_delivery"})
        self._pump()

    def drop_dead(self) -> int:
        """Drop the held deliveries whose channel is gone (the broker delivers them again,
        maybe elsewhere); each is told to ``unstarted``. Returns how many."""
        dead = [item for item in self._held if not item.delivery.is_live]
        if dead:
            self._held = deque(item for item in self._held if item.delivery.is_live)
            for item in dead:
                self._forget(item)
                self._stats.dropped_dead += 1
                self._unstarted(item.delivery)
        return len(dead)

    # --- hand-back ----------------------------------------------------------------------

    async def hand_back(self, delivery: Delivery) -> None:
        """Give an unstarted delivery back to the broker (not reported: it runs later)."""
        self._stats.handed_back += 1
        self._unstarted(delivery)
        try:
            await delivery.reject(requeue=True)
        except Exception:  # already handed back by the broker's close: it comes again
            log.debug("hand-back failed", exc_info=True, extra={"action": "hand_back"})

    async def hand_back_overdue(self) -> None:
        """Give back the deliveries held longer than ``hand_back_after`` seconds."""
        returned = await self.hand_back_held(time.monotonic() - self._hand_back_after)
        if returned:
            log.info(
                "deliveries held too long given back to the broker",
                extra={"action": "hand_back", "count": returned},
            )

    async def hand_back_held(self, cutoff: float) -> int:
        """Give back the held deliveries waiting since ``cutoff`` (monotonic) or longer."""
        chosen = [item.delivery for item in self._held if item.since <= cutoff]
        for item in self._held:
            if item.since <= cutoff:
                self._forget(item)
        if chosen:
            self._held = deque(item for item in self._held if item.since > cutoff)
            # out of held now: see them all settled even if the caller is cancelled
            await asyncio.shield(self._hand_back_all(chosen))
        return len(chosen)

    async def _hand_back_all(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            await self.hand_back(delivery)
