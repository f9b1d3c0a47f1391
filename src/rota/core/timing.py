"""When background work wakes up: away from the instants that jobs start at."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["PHASE", "off_the_second"]

PHASE = 0.25
"""Where in a wall-clock second the waits of a second or more end (see :func:`off_the_second`)."""


def off_the_second(delay: float, now: Callable[[], float] = time.time) -> float:
    """``delay``, if a second or more, moved by at most half a second so that it ends a
    quarter of a second past a wall-clock second: whole seconds are when cron fires start
    (a six-field expression every second, a five-field one on the minute), and the half
    second is when the dispatcher sends them ahead (``dispatch_lead_seconds``, 0.5 s); a
    background pass on the loop there would make them late. A shorter delay is left as is."""
    if delay < 1.0:
        return delay
    shift = (PHASE - (now() + delay) % 1.0) % 1.0
    return delay + shift if shift <= 0.5 else delay + shift - 1.0
