"""The dispatchers' stop switch: stored in the store (it outlives a Redis that loses its data
and a restart of every server) and followed by every server's runtime, which reads it at start
and then every few seconds (:data:`FOLLOW_INTERVAL`). While it is on, no dispatcher fires a job
or publishes a pending occurrence; what was already handed to the broker still runs."""

from __future__ import annotations

from datetime import datetime

from rota.core.events import Event, EventType
from rota.core.models import DispatcherState
from rota.core.ports import ControlStore
from rota.services.events import EventPublisher

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
