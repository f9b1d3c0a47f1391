"""In-memory coordination (embedded mode): leases, heartbeats, worker registry, wake-ups,
and the change-event feed (a bounded deque of the last ``event_cap`` events).

Time comes from an injectable ``clock`` (epoch seconds) so tests can move it without sleeping.
Fences are kept per bucket for the life of the object, also while a bucket is unleased: a
newly granted lease always gets a higher fence than any before it on that bucket; renewing a
live lease keeps its fence.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar
from uuid import UUID, uuid4

from rota.coordination.limits_memory import MemoryLimits
from rota.core.events import Event, EventId, format_event_id, parse_event_id
from rota.core.models import WorkerInfo
from rota.core.ports import Coordination
from rota.core.records import (
    AttemptClaim,
    Cancellation,
    ClaimBatch,
    ClaimOutcome,
    ClaimRequest,
    Lease,
)

T = TypeVar("T")

Clock = Callable[[], float]

_WAKEUP_BACKLOG = 1024
"""Wake-ups kept for a subscriber that does not read; beyond this the oldest are dropped."""

EVENT_CAP = 10_000
"""Events the feed keeps for replay by default."""


class _Wakeups(Generic[T]):
    """One subscriber of :meth:`MemoryCoordination.wakeups` (or ``cancellations``): registered
    when created, so it receives every item sent after that; ``aclose()`` (or the
    coordination's close) ends it."""

    def __init__(self, owner: MemoryCoordination, kind: str) -> None:
        self._owner = owner
        self.kind = kind
        self._queue: asyncio.Queue[T | None] = asyncio.Queue(_WAKEUP_BACKLOG)
        self._closed = False
        owner._subscribers.add(self)

    def __aiter__(self) -> _Wakeups[T]:
        return self

    async def __anext__(self) -> T:
        if self._closed:
            raise StopAsyncIteration
        due = await self._queue.get()
        if due is None:
            self._closed = True
            raise StopAsyncIteration
        return due

    def deliver(self, due: T | None) -> None:
        queue = self._queue
        if queue.full():
            queue.get_nowait()
        queue.put_nowait(due)

    async def aclose(self) -> None:
        self._owner._subscribers.discard(self)
        if not self._closed:
            self._closed = True
            self.deliver(None)  # ends a concurrent __anext__


class MemoryCoordination(MemoryLimits, Coordination):
    """:class:`~rota.core.ports.Coordination` within one process (embedded mode)."""

    def __init__(self, *, clock: Clock = time.time, event_cap: int = EVENT_CAP) -> None:
        self._clock = clock
        self._feed: collections.deque[tuple[int, EventId, Event]] = collections.deque(
            maxlen=max(1, event_cap)
        )
        """``(position, id, event)``; positions count up by one per event ever published."""
        self._published = 0
        self._dropped = False
        self._last_entry = (0, 0)
        self._feed_changed: asyncio.Condition | None = None
        self._feed_readers: set[_FeedReader] = set()
        self._leases: dict[int, Lease] = {}
        self._fences: dict[int, int] = {}
        self._instances: dict[str, tuple[dict[str, str], float]] = {}
        self._workers: dict[str, tuple[WorkerInfo, float]] = {}
        self._subscribers: set[_Wakeups[Any]] = set()
        self._claims: dict[tuple[UUID, int], tuple[str | None, float, float]] = {}
        """(occurrence id, attempt) -> (owner, claimed at, expires at)."""
        self._epoch = uuid4().hex
        self._epoch_since = clock()
        self._epoch_lost = False
        self._next_claim_purge = 0.0
        self._init_limits()

    async def close(self) -> None:
        subscribers, self._subscribers = self._subscribers, set()
        for subscriber in subscribers:
            await subscriber.aclose()
        readers, self._feed_readers = self._feed_readers, set()
        for reader in readers:
            reader.closed = True
        await self._notify_feed()

    # --- bucket leases --------------------------------------------------------------------

    async def acquire_buckets(
        self, instance_id: str, buckets: Sequence[int], ttl: float
    ) -> dict[int, Lease]:
        now = self._clock()
        held: dict[int, Lease] = {}
        for bucket in buckets:
            current = self._leases.get(bucket)
            live = current is not None and current.expires_at > now
            if current is not None and live and current.owner != instance_id:
                continue
            if current is not None and live:
                fence = current.fence
            else:
                fence = self._fences.get(bucket, 0) + 1
                self._fences[bucket] = fence
            held[bucket] = self._leases[bucket] = Lease(bucket, instance_id, fence, now + ttl)
        return held

    async def release_buckets(self, instance_id: str, buckets: Sequence[int]) -> None:
        for bucket in buckets:
            current = self._leases.get(bucket)
            if current is not None and current.owner == instance_id:
                del self._leases[bucket]

    async def leases(self) -> dict[int, Lease]:
        now = self._clock()
        return {b: lease for b, lease in sorted(self._leases.items()) if lease.expires_at > now}

    # --- scheduler instances and workers --------------------------------------------------

    async def heartbeat_instance(
        self, instance_id: str, info: Mapping[str, str], ttl: float
    ) -> None:
        self._instances[instance_id] = (dict(info), self._clock() + ttl)

    async def instances(self) -> dict[str, Mapping[str, str]]:
        now = self._clock()
        self._instances = {k: v for k, v in self._instances.items() if v[1] > now}
        return {k: dict(info) for k, (info, _) in sorted(self._instances.items())}

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        self._workers[info.instance_id] = (info, self._clock() + ttl)

    async def unregister_worker(self, instance_id: str) -> None:
        self._workers.pop(instance_id, None)

    async def workers(self) -> list[WorkerInfo]:
        now = self._clock()
        self._workers = {k: v for k, v in self._workers.items() if v[1] > now}
        return [info for _, (info, _) in sorted(self._workers.items())]

    # --- attempt claims -------------------------------------------------------------------

    async def claim_attempts(
        self,
        owner: str,
        requests: Sequence[ClaimRequest],
        ttl: float,
        *,
        known_epoch: str | None = None,
    ) -> ClaimBatch:
        now = self._clock()
        if known_epoch is not None and known_epoch != self._epoch:
            self._epoch_lost = True
        uncertain_until = self._epoch_since + ttl if self._epoch_lost else None
        uncertain = uncertain_until is not None and now < uncertain_until
        self._purge_claims(now)
        out: list[AttemptClaim] = []
        for request in requests:
            key = (request.occurrence_id, request.attempt)
            held = self._claims.get(key)
            if held is not None and held[2] > now:
                holder, at, _ = held
                if holder == owner:
                    self._claims[key] = (holder, at, now + ttl)
                    out.append(AttemptClaim(ClaimOutcome.OWNED, holder, at))
                else:
                    out.append(AttemptClaim(ClaimOutcome.TAKEN, holder, at))
            elif uncertain and request.careful:
                self._claims[key] = (None, now, now + ttl)
                out.append(AttemptClaim(ClaimOutcome.UNCERTAIN, None, now))
            else:
                self._claims[key] = (owner, now, now + ttl)
                out.append(AttemptClaim(ClaimOutcome.CLAIMED, owner, now))
        return ClaimBatch(self._epoch, out, uncertain_until)

    async def release_attempts(self, owner: str, attempts: Sequence[tuple[UUID, int]]) -> None:
        for key in attempts:
            held = self._claims.get(key)
            if held is not None and held[0] == owner:
                del self._claims[key]

    def _purge_claims(self, now: float) -> None:
        """Forget expired claims, at most once a minute (memory stays bounded by the TTL)."""
        if now < self._next_claim_purge:
            return
        self._next_claim_purge = now + 60.0
        self._claims = {k: v for k, v in self._claims.items() if v[2] > now}

    # --- wake-ups -------------------------------------------------------------------------

    async def wake(self, due: float) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.kind == "wake":
                subscriber.deliver(due)

    def wakeups(self) -> _Wakeups[float]:
        return _Wakeups(self, "wake")

    async def announce(self, topic: str) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.kind == "announce":
                subscriber.deliver(topic)

    def announcements(self) -> _Wakeups[str]:
        return _Wakeups(self, "announce")

    # --- cancellation channel -------------------------------------------------------------

    async def cancel(
        self,
        occurrence_ids: Sequence[UUID],
        reason: str | None = None,
        *,
        superseded_below: int | None = None,
    ) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.kind == "cancel":
                for occurrence_id in occurrence_ids:
                    subscriber.deliver(Cancellation(occurrence_id, reason, superseded_below))

    def cancellations(self) -> _Wakeups[Cancellation]:
        return _Wakeups(self, "cancel")

    # --- change events --------------------------------------------------------------------

    async def publish_events(self, events: Sequence[Event]) -> None:
        if not events:
            return
        ms = int(self._clock() * 1000)
        last_ms, last_seq = self._last_entry
        entry = (ms, 0) if ms > last_ms else (last_ms, last_seq + 1)
        self._last_entry = entry
        ms, seq = entry
        feed = self._feed
        if feed.maxlen is not None and len(feed) + len(events) > feed.maxlen:
            self._dropped = True
        first = self._published + 1
        self._feed.extend(
            zip(
                range(first, first + len(events)),
                ((ms, seq, n) for n in range(len(events))),
                events,
                strict=True,
            )
        )
        self._published += len(events)
        await self._notify_feed()

    async def _notify_feed(self) -> None:
        condition = self._feed_changed
        if condition is not None:
            async with condition:
                condition.notify_all()

    def _condition(self) -> asyncio.Condition:
        if self._feed_changed is None:
            self._feed_changed = asyncio.Condition()
        return self._feed_changed

    def _position_after(self, after: EventId | None) -> int:
        """The position of the last kept event with an id ``<= after`` (the one before the
        oldest kept if none is; ``None``: before the oldest)."""
        feed = self._feed
        if not feed:
            return self._published
        oldest = feed[0][0]
        if after is None:
            return oldest - 1
        low, high = 0, len(feed)  # first index whose id is > after
        while low < high:
            middle = (low + high) // 2
            if feed[middle][1] <= after:
                low = middle + 1
            else:
                high = middle
        return oldest - 1 + low

    def _take(self, position: int, limit: int) -> list[tuple[int, EventId, Event]]:
        """Up to ``limit`` kept events after ``position`` (from the oldest kept if it has
        dropped out)."""
        feed = self._feed
        if not feed:
            return []
        start = max(0, position + 1 - feed[0][0])
        end = min(len(feed), start + limit)
        return [feed[i] for i in range(start, end)]

    async def replay(self, after: str | None, limit: int = 1000) -> list[tuple[str, Event]]:
        position = self._position_after(None if after is None else parse_event_id(after))
        return [(format_event_id(i), e) for _, i, e in self._take(position, max(0, limit))]

    async def feed_horizon(self) -> str | None:
        if not self._dropped or not self._feed:
            return None
        return format_event_id(self._feed[0][1])

    def events(self, after: str | None = None) -> _FeedReader:
        parsed = None if after is None else parse_event_id(after)
        position = self._published if parsed is None else self._position_after(parsed)
        reader = _FeedReader(self, position)
        self._feed_readers.add(reader)
        return reader


class _FeedReader:
    """One :meth:`MemoryCoordination.events` subscriber: reads the feed from its position."""

    _BATCH = 256

    def __init__(self, owner: MemoryCoordination, position: int) -> None:
        self._owner = owner
        self._position = position
        self._buffer: collections.deque[tuple[str, Event]] = collections.deque()
        self.closed = False

    def __aiter__(self) -> _FeedReader:
        return self

    async def ready(self) -> None:
        """In place from its creation (see the Redis reader's ``ready``)."""

    async def __anext__(self) -> tuple[str, Event]:
        owner = self._owner
        while not self._buffer:
            if self.closed:
                raise StopAsyncIteration
            taken = owner._take(self._position, self._BATCH)
            if taken:
                self._position = taken[-1][0]
                self._buffer.extend((format_event_id(i), e) for _, i, e in taken)
                break
            condition = owner._condition()
            async with condition:
                if self.closed or owner._published > self._position:
                    continue
                await condition.wait()
        return self._buffer.popleft()

    async def aclose(self) -> None:
        self.closed = True
        self._owner._feed_readers.discard(self)
        await self._owner._notify_feed()
