"""The limits in memory (embedded mode): the same contract as Redis
(:class:`~rota.core.ports.limits.LimitMemory`), for the workers of one process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from rota.core.limits import (
    JobLimit,
    LimitGrant,
    LimitHold,
    LimitRequest,
    LimitUsage,
    LimitWaiter,
    rate_window,
)
from rota.core.ports.limits import LimitMemory


class MemoryLimits(LimitMemory):
    """Semaphores (slot key -> token -> lease end), rate windows (rate key -> start times),
    and the waiting tokens (token -> (label, since, expires)), timed by ``_clock``."""

    _clock: Callable[[], float]

    def _init_limits(self) -> None:
        self._published_limits: list[JobLimit] | None = None
        self._slots: dict[str, dict[str, float]] = {}
        self._starts: dict[str, list[float]] = {}
        self._limit_waiting: dict[str, tuple[str, float, float]] = {}
        self._limit_watchers: list[Callable[[list[JobLimit]], None]] = []

    async def put_limits(self, limits: Sequence[JobLimit]) -> None:
        changed = self._published_limits != list(limits)
        self._published_limits = list(limits)
        if changed:
            for callback in self._limit_watchers:
                callback(list(limits))

    def watch_limits(self, callback: Callable[[list[JobLimit]], None]) -> None:
        self._limit_watchers.append(callback)

    async def published_limits(self) -> list[JobLimit] | None:
        return None if self._published_limits is None else list(self._published_limits)

    def _live_slots(self, key: str, now: float) -> dict[str, float]:
        held = self._slots.get(key)
        if held is None:
            held = self._slots[key] = {}
        else:
            for token in [t for t, until in held.items() if until <= now]:
                del held[token]
        return held

    async def acquire_limits(
        self, holder: str, requests: Sequence[LimitRequest], lease: float, room: int
    ) -> list[LimitGrant]:
        now = self._clock()
        out: list[LimitGrant] = []
        for request in requests:
            grant = self._try(request, now, lease) if room > 0 else LimitGrant(False)
            if grant.granted:
                room -= 1
                self._limit_waiting.pop(request.token, None)
            else:
                since = self._limit_waiting.get(request.token, ("", now, 0.0))[1]
                self._limit_waiting[request.token] = (request.label, since, now + lease)
            out.append(grant)
        return out

    def _try(self, request: LimitRequest, now: float, lease: float) -> LimitGrant:
        held = None
        if request.slot_key is not None:
            held = self._live_slots(request.slot_key, now)
            if request.token in held:
                held[request.token] = now + lease
                return LimitGrant(True)
            if len(held) >= request.max_concurrent:
                return LimitGrant(False, holding=len(held))
        starts = None
        if request.rate_key is not None:
            count, window = rate_window(request.rate)
            starts = [t for t in self._starts.get(request.rate_key, ()) if t > now - window]
            self._starts[request.rate_key] = starts
            if len(starts) >= count:
                return LimitGrant(False, wait=max(0.0, starts[0] + window - now))
        if held is not None:
            held[request.token] = now + lease
        if starts is not None:
            starts.append(now)
        return LimitGrant(True)

    async def renew_limits(self, holder: str, holds: Sequence[LimitHold], lease: float) -> int:
        now = self._clock()
        renewed = 0
        for hold in holds:
            held = self._live_slots(hold.slot_key, now)
            if hold.token in held:
                held[hold.token] = now + lease
                renewed += 1
        return renewed

    async def release_limits(self, holder: str, holds: Sequence[LimitHold]) -> None:
        for hold in holds:
            held = self._slots.get(hold.slot_key)
            if held is not None:
                held.pop(hold.token, None)
                if not held:
                    del self._slots[hold.slot_key]
            self._limit_waiting.pop(hold.token, None)

    async def limit_waiting_for(self, tokens: Sequence[str]) -> dict[str, str]:
        now = self._clock()
        out = {}
        for token in tokens:
            found = self._limit_waiting.get(token)
            if found is not None and found[2] > now:
                out[token] = found[0]
        return out

    async def limit_usage(self) -> LimitUsage:
        now = self._clock()
        running = {}
        for key in list(self._slots):
            if held := self._live_slots(key, now):
                running[key] = len(held)
            else:
                del self._slots[key]
        waiting = self._limit_waiting
        for token in [t for t, (_, _, until) in waiting.items() if until <= now]:
            del waiting[token]
        waiters = sorted(
            (
                LimitWaiter(token, label, datetime.fromtimestamp(since, UTC))
                for token, (label, since, _) in waiting.items()
            ),
            key=lambda w: w.since,
        )
        return LimitUsage(running=running, waiting=waiters)
