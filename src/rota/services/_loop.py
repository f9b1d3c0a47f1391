"""The loop that never dies: the shape every background service of the server shares.

:func:`run_periodically` runs a step, waits, and runs it again until it is stopped. A step
that raises is logged under the loop's name and tried again after a delay; nothing but
cancellation or the stopping event ends the loop. What a step records (its counters, the
timestamps ``/health`` reads) it records itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rota.core.errors import RotaError
from rota.core.timing import off_the_second

EXPECTED: tuple[type[Exception], ...] = (RotaError, OSError)
"""What a backend outage raises: logged as a warning, without a traceback."""


@dataclass(slots=True)
class Backoff:
    """Delays that double after each use, from ``first`` up to ``cap``; :meth:`reset` starts
    them over."""

    first: float
    cap: float
    _next: float = field(init=False)

    def __post_init__(self) -> None:
        self._next = self.first

    def next(self) -> float:
        """The delay to wait now; the next call returns twice as much (at most ``cap``)."""
        delay = self._next
        self._next = min(delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.first


async def run_periodically(
    name: str,
    step: Callable[[], Awaitable[object]],
    interval: float | Callable[[], float],
    stopping: asyncio.Event,
    kick: asyncio.Event | None = None,
    *,
    log: logging.Logger,
    backoff: Backoff | None = None,
    expected: tuple[type[Exception], ...] = EXPECTED,
    expected_level: int = logging.WARNING,
    on_error: Callable[[], None] | None = None,
    unexpected_delay: float | None = None,
    wait_first: bool = False,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Run ``step`` until ``stopping`` is set (or the task is cancelled), waiting ``interval``
    seconds (a callable: asked before each wait) after each pass; a delay of zero or less runs
    the next pass at once. Never raises but for cancellation.

    - ``kick``: setting it ends the current wait early; it is cleared just before each pass,
      so a kick that comes while a pass runs starts the next one at once.
    - A step that raises an exception of ``expected`` is logged as a warning (or at
      ``expected_level``: a loop whose backend is often away on purpose logs it at debug),
      any other as an error with its traceback (``log``, under ``name``); ``on_error`` is
      called. The next pass
      comes after ``backoff.next()`` (reset by a pass that succeeds), or the interval without
      a backoff; an unexpected error waits ``unexpected_delay`` instead if given (the backoff
      left as it is).
    - ``wait_first``: wait an interval before the first pass too.
    - ``sleep``: how to wait a delay (default: until ``stopping`` or ``kick`` is set, at most
      the delay, a delay of a second or more ending :func:`off_the_second`); a loop whose
      step wakes on its own signals passes its own."""
    wait = sleep or (lambda delay: _wait(off_the_second(delay), stopping, kick))

    def failed(unexpected: bool) -> float:
        if on_error is not None:
            on_error()
        if unexpected and unexpected_delay is not None:
            return unexpected_delay
        return backoff.next() if backoff is not None else _seconds(interval)

    delay = _seconds(interval) if wait_first else 0.0
    while not stopping.is_set():
        if delay > 0:
            await wait(delay)
            if stopping.is_set():
                return
        if kick is not None:
            kick.clear()
        try:
            await step()
        except expected as exc:
            delay = failed(unexpected=False)
            log.log(expected_level, "%s failed, retrying in %.1fs: %s", name, delay, exc)
        except Exception:
            delay = failed(unexpected=True)
            log.exception("unexpected %s error, retrying in %.1fs", name, delay)
        else:
            if backoff is not None:
                backoff.reset()
            delay = _seconds(interval)


def _seconds(interval: float | Callable[[], float]) -> float:
    return interval() if callable(interval) else interval


async def _wait(delay: float, stopping: asyncio.Event, kick: asyncio.Event | None) -> None:
    """Wait ``delay`` seconds, or less if ``stopping`` or ``kick`` is set meanwhile."""
    if kick is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=delay)
        return
    waiters = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(kick.wait())]
    try:
        await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
