"""The dispatchers' stop switch: stored in the store (it outlives a Redis that loses its data
and a restart of every server) and followed by every server's runtime, which reads it at start
and then every few seconds (:data:`FOLLOW_INTERVAL`). While it is on, no dispatcher fires a job
or publishes a pending occurrence; what was already handed to the broker still runs."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Protocol

from rota.core.events import Event, EventType
from rota.core.models import DispatcherState
from rota.core.ports import ControlStore
from rota.services._loop import run_periodically
from rota.services.events import EventPublisher

log = logging.getLogger(__name__)

FOLLOW_INTERVAL = 2.0
"""Seconds between two reads of the switch by each server."""


def dispatcher_changed(state: DispatcherState) -> Event:
    return Event(
        EventType.DISPATCHER_CHANGED,
        {
            "paused": state.paused,
            "reason": state.reason,
            "by": state.by,
            "changedAt": None if state.changed_at is None else state.changed_at.isoformat(),
        },
    )


async def switch_dispatcher(
    store: ControlStore,
    *,
    paused: bool,
    reason: str | None,
    by: str | None,
    now: datetime,
    events: EventPublisher | None = None,
) -> DispatcherState:
    """Stop (``paused``) or resume dispatching on every server; returns the stored state."""
    state = DispatcherState(paused=paused, reason=reason, by=by, changed_at=now)
    await store.set_dispatcher_state(state)
    if events is not None:
        events.emit([dispatcher_changed(state)])
    return state


class Pausable(Protocol):
    """The part of the dispatcher the switch drives."""

    def pause(self, reason: str) -> None: ...

    def resume(self) -> None: ...


class DispatcherSwitchFollower:
    """Applies the stored switch to this server's dispatcher: read at start
    (:meth:`follow`), then every :data:`FOLLOW_INTERVAL` (:meth:`run`), and at once on this
    server when an operator flips it here (:meth:`apply`)."""

    def __init__(
        self, store: ControlStore, dispatcher: Pausable, *, interval: float = FOLLOW_INTERVAL
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._interval = interval
        self._switched_off = False
        """The dispatcher is paused because the shared switch says so."""
        self._stopping = asyncio.Event()

    async def follow(self) -> DispatcherState:
        """Read the dispatchers' stop switch from the store and apply it here."""
        state = await self._store.dispatcher_state()
        self.apply(state)
        return state

    def apply(self, state: DispatcherState) -> None:
        """Pause or resume this server's dispatcher by the shared switch. Only a pause the
        switch made is resumed by it (a pause made here by other means stays)."""
        if state.paused:
            if not self._switched_off:
                log.warning(
                    "dispatcher stopped: %s",
                    state.reason,
                    extra={"action": "dispatcher_stop", "by": state.by},
                )
            self._switched_off = True
            self._dispatcher.pause(state.reason or "stopped")
        elif self._switched_off:
            log.warning("dispatcher resumed", extra={"action": "dispatcher_resume"})
            self._switched_off = False
            self._dispatcher.resume()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Read the switch every interval (the first read is :meth:`follow` at start)."""
        await run_periodically(
            "dispatcher switch read",
            self.follow,
            self._interval,
            self._stopping,
            log=log,
            wait_first=True,
        )
