"""Deliveries that arrive before their due time, held on a timer until it (the dispatch lead).

The dispatcher commits and sends an occurrence up to ``dispatch_lead_seconds`` before its
``scheduledFor``; the worker keeps it here, unstarted and unacknowledged, and releases it to
the flow (:mod:`rota.worker.flow`) at its due instant. A held delivery takes no slot: slots
stay free for work that is due. Deliveries due at the same instant (every fire of a cron
second) share one timer.

The loop's timers wake up to a millisecond late (``epoll`` waits in whole milliseconds), so a
timer is armed :data:`SPIN` early, then once more :data:`FINE` early, and the last stretch is
spun on the loop (each turn lets every other callback run); a delivery is never released
before its due instant by the wall clock. The second timer keeps the spin short: a process
that spins for a millisecond and a half loses its core to another one wanting it, and the
spins of many due instants a second would keep a core busy. A delivery whose due time is
further than :data:`MAX_HOLD` ahead (a clock far off) is not held.

A group's starts are as cheap as they can be: :data:`READY` before the due instant,
``ready(deliveries)`` checks what can be checked then and gives each delivery a token
(``None``: nothing ready; a delivery held later is readied when it arrives); at the instant,
``release_group`` gets the group's :class:`Entry` list at once, so that the starts themselves
are one tight loop. A delivery taken out in between (cancelled, superseded) is no longer in
the group: its token goes with it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

from rota.core.models import JobMessage
from rota.core.ports import Delivery

__all__ = ["FINE", "MAX_HOLD", "READY", "SPIN", "Entry", "Hold"]

log = logging.getLogger(__name__)

SPIN = 0.002
"""Seconds before a due instant at which its timer fires first."""

FINE = 0.0008
"""Seconds before a due instant at which its second timer fires; the rest is spun on the loop
(about 0.65 ms a due instant on average, against 1.8 with the first timer alone; measured in
``bench/2026-11-30-pipeline-fill.md``)."""

READY = 0.010
"""Seconds before a due instant at which its group is readied (with ``ready``)."""

MAX_HOLD = 60.0
"""A delivery due further ahead than this is not held (released at once)."""


def _rank(message: JobMessage) -> tuple[int, int]:
    """Of two copies of an occurrence's message, the higher rank supersedes."""
    return message.attempt, message.job_version


def collect_young_if_half_full() -> None:
    """Right after a group's starts: a young generation at least half full is collected now
    (with the middle one if this collection would take it too), not at whatever instant it
    fills up, which may be the next group's (a young collection of tens of thousands of
    objects takes milliseconds)."""
    young, middle, _ = gc.get_count()
    threshold_young, threshold_middle, _ = gc.get_threshold()
    if young > threshold_young // 2:
        gc.collect(1 if middle + 1 > threshold_middle else 0)


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Entry:
    """A held delivery and its token from ``ready`` (``None``: not readied)."""

    __slots__ = ("delivery", "token")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.token: object = None


Timer = Callable[[float, Callable[[], None]], TimerHandle]
"""``timer(delay, callback)``: call ``callback`` after ``delay`` seconds (0: on the next turn
of the loop); the handle cancels it."""


def _loop_timer(delay: float, callback: Callable[[], None]) -> TimerHandle:
    loop = asyncio.get_running_loop()
    if delay <= 0:
        return loop.call_soon(callback)
    return loop.call_later(delay, callback)


class Hold:
    """Holds early deliveries until their due instant (see the module).

    ``release(delivery)`` is called at the due instant; ``drop(delivery)`` for a copy that
    another held delivery of the same occurrence supersedes: the later attempt, else the
    later job version (the job edited before its due time), else the newer delivery.
    ``ready(deliveries) -> tokens`` (optional) is called once per group when its timer fires
    ahead of the instant, and ``release_group(entries)`` (optional) instead of ``release``
    at the instant, with every delivery of the group and its token (see the module).
    ``wall`` is the wall clock (epoch seconds), ``timer`` schedules a callback (both
    injectable for tests).
    """

    def __init__(
        self,
        *,
        release: Callable[[Delivery], None],
        drop: Callable[[Delivery], None],
        ready: Callable[[list[Delivery]], list[object]] | None = None,
        release_group: Callable[[list[Entry]], None] | None = None,
        wall: Callable[[], float] = time.time,
        timer: Timer = _loop_timer,
    ) -> None:
        self._release = release
        self._drop = drop
        self._ready = ready
        self._release_group = release_group
        self._wall = wall
        self._timer = timer
        self._groups: dict[float, dict[UUID, Entry]] = {}
        """Held deliveries by due instant (epoch seconds), then occurrence id."""
        self._readied: set[float] = set()
        """The due instants whose groups ``ready`` has seen."""
        self._due: dict[UUID, float] = {}
        self._timers: dict[float, TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._due)

    def hold(self, delivery: Delivery) -> bool:
        """Hold the delivery if it is not due yet; ``False``: it is due, start it now."""
        message = delivery.message
        due = message.scheduled_for.timestamp()
        ahead = due - self._wall()
        if ahead <= 0 or ahead > MAX_HOLD:
            return False
        oid = message.occurrence_id
        if oid in self._due:
            other = self._groups[self._due[oid]][oid].delivery
            if _rank(other.message) > _rank(message):
                self._drop(delivery)
                return True
            self._take(oid)
            self._drop(other)
        group = self._groups.get(due)
        if group is None:
            group = self._groups[due] = {}
            self._arm(due, ahead)
        entry = group[oid] = Entry(delivery)
        self._due[oid] = due
        if self._ready is not None and due in self._readied:  # its group readied already
            entry.token = self._ready([delivery])[0]
        return True

    def get(self, occurrence_id: UUID) -> Delivery | None:
        """The held delivery of an occurrence, left held; ``None`` if none is."""
        due = self._due.get(occurrence_id)
        return None if due is None else self._groups[due][occurrence_id].delivery

    def take(self, occurrence_id: UUID) -> Delivery | None:
        """Take a held delivery out (its occurrence was cancelled); ``None`` if none is."""
        return self._take(occurrence_id)

    def take_dead(self) -> list[Delivery]:
        """Take out the held deliveries whose channel is gone (the broker delivers them
        again, maybe elsewhere)."""
        dead = [
            e.delivery
            for group in self._groups.values()
            for e in group.values()
            if not e.delivery.is_live
        ]
        for delivery in dead:
            self._take(delivery.message.occurrence_id)
        return dead

    def take_all(self) -> list[Delivery]:
        """Take every held delivery out (at stop), their timers cancelled."""
        for handle in self._timers.values():
            handle.cancel()
        taken = [e.delivery for group in self._groups.values() for e in group.values()]
        self._groups.clear()
        self._due.clear()
        self._timers.clear()
        self._readied.clear()
        return taken

    def _take(self, oid: UUID) -> Delivery | None:
        due = self._due.pop(oid, None)
        if due is None:
            return None
        group = self._groups[due]
        delivery = group.pop(oid).delivery
        if not group:
            del self._groups[due]
            self._readied.discard(due)
            handle = self._timers.pop(due, None)
            if handle is not None:
                handle.cancel()
        return delivery

    def _arm(self, due: float, ahead: float) -> None:
        if self._ready is not None and due not in self._readied:
            early = SPIN + READY
        else:
            early = SPIN if ahead > SPIN else FINE
        self._timers[due] = self._timer(max(ahead - early, 0.0), lambda: self._fire(due))

    def _fire(self, due: float) -> None:
        group = self._groups.get(due)
        if group is None:
            return
        ahead = due - self._wall()
        if ahead > 0:  # early (readying, timer resolution, the spin's last stretch): not yet
            if self._ready is not None and due not in self._readied:
                self._readied.add(due)
                entries = list(group.values())
                try:
                    tokens = self._ready([e.delivery for e in entries])
                except Exception:  # nothing readied: the group starts one by one
                    log.exception("readying held deliveries failed", extra={"action": "hold"})
                    tokens = [None] * len(entries)
                for entry, token in zip(entries, tokens, strict=True):
                    entry.token = token
                ahead = due - self._wall()
            self._arm(due, ahead)
            return
        self._timers.pop(due, None)
        self._readied.discard(due)
        del self._groups[due]
        # No garbage collection in the middle of a group's starts (a young-generation pass
        # costs milliseconds with a large heap): it runs right after them, if due or near.
        collecting = gc.isenabled()
        if collecting and len(group) > 1:
            gc.disable()
        try:
            if self._release_group is not None:
                try:
                    self._release_group(list(group.values()))
                finally:
                    for oid in group:
                        del self._due[oid]
            else:
                for oid, entry in group.items():
                    del self._due[oid]
                    self._release(entry.delivery)
        finally:
            if collecting:
                gc.enable()
                collect_young_if_half_full()
