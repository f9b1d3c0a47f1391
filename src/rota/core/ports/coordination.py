"""The coordination port: what scheduler instances and workers share beyond the store, cut
into slices (leases, registry, signals, claims, events); :class:`Coordination` is their
composite, the one every coordination adapter implements."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from uuid import UUID

from rota.core.events import Event
from rota.core.models import WorkerInfo
from rota.core.ports.limits import LimitMemory
from rota.core.records import (
    Cancellation,
    ClaimBatch,
    ClaimRequest,
    Lease,
)


class BucketLeases(abc.ABC):
    """Bucket leases and scheduler instance heartbeats."""

    @abc.abstractmethod
    async def acquire_buckets(
        self, instance_id: str, buckets: Sequence[int], ttl: float
    ) -> dict[int, Lease]:
        """Take or renew leases on the given buckets for ``ttl`` seconds. Returns the leases
        now held by ``instance_id`` among them; a bucket leased by another live instance is
        not taken. A bucket that changes owner gets a higher fence."""

    @abc.abstractmethod
    async def release_buckets(self, instance_id: str, buckets: Sequence[int]) -> None:
        """Give up leases held by ``instance_id`` (others' leases are untouched)."""

    @abc.abstractmethod
    async def leases(self) -> dict[int, Lease]:
        """Unexpired leases by bucket."""

    @abc.abstractmethod
    async def heartbeat_instance(
        self, instance_id: str, info: Mapping[str, str], ttl: float
    ) -> None:
        """Record that a scheduler instance is alive for ``ttl`` seconds."""

    @abc.abstractmethod
    async def instances(self) -> dict[str, Mapping[str, str]]:
        """Live scheduler instances."""


class WorkerRegistry(abc.ABC):
    """The live worker instances."""

    @abc.abstractmethod
    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        """Register or refresh a worker instance; it disappears ``ttl`` seconds after its last
        refresh."""

    @abc.abstractmethod
    async def unregister_worker(self, instance_id: str) -> None:
        """Remove a worker instance at once (graceful stop)."""

    @abc.abstractmethod
    async def workers(self) -> list[WorkerInfo]:
        """Live worker instances, in instance id order."""


class Signals(abc.ABC):
    """Wake-up and cancellation signals heard by every instance."""

    @abc.abstractmethod
    async def wake(self, due: float) -> None:
        """Tell every scheduler instance that something is due at ``due`` (epoch seconds)."""

    @abc.abstractmethod
    def wakeups(self) -> AsyncIterator[float]:
        """Due times announced by :meth:`wake` (from any instance) after subscribing."""

    @abc.abstractmethod
    async def announce(self, topic: str) -> None:
        """Tell every scheduler instance that what ``topic`` names has changed and is to be
        read again (``dependencies``: the job dependency edges)."""

    @abc.abstractmethod
    def announcements(self) -> AsyncIterator[str]:
        """Topics sent to :meth:`announce` (from any instance) after subscribing."""

    @abc.abstractmethod
    async def cancel(
        self,
        occurrence_ids: Sequence[UUID],
        reason: str | None = None,
        *,
        superseded_below: int | None = None,
    ) -> None:
        """Ask the workers running these occurrences to cancel them (the cancellation
        channel: every worker instance hears it; the one running the occurrence acts and
        records ``reason`` as the Cancelled attempt's exception). With ``superseded_below``:
        their messages were sent again for a newer job version; a held copy of an older
        version is dropped (:class:`~rota.core.records.Cancellation`)."""

    @abc.abstractmethod
    def cancellations(self) -> AsyncIterator[Cancellation]:
        """Each occurrence sent to :meth:`cancel` (from any process) after subscribing, with
        the reason (and ``superseded_below``) sent with it."""


class ClaimMemory(abc.ABC):
    """Attempt claims: exactly one run per attempt across a worker group."""

    @abc.abstractmethod
    async def claim_attempts(
        self,
        owner: str,
        requests: Sequence[ClaimRequest],
        ttl: float,
        *,
        known_epoch: str | None = None,
    ) -> ClaimBatch:
        """Claim attempts for worker instance ``owner`` atomically (per attempt: one caller
        wins a race), each for ``ttl`` seconds: an attempt nobody holds becomes ``owner``'s
        (``CLAIMED``), one ``owner`` holds is renewed (``OWNED``), one another holds is left
        alone (``TAKEN``, with its holder and claim time).

        The claim memory has an epoch token. ``known_epoch`` is the token the caller saw
        before; if it is not the current one, the memory was lost since (a Redis flush or a
        restart without persistence) and is marked so: for ``ttl`` seconds from the loss
        (``uncertain_until``) a ``careful`` request of an attempt nobody holds is not granted
        but marked taken by an unknown owner (``UNCERTAIN``). A memory that was never lost,
        or whose loss nobody knew about, grants every request."""

    @abc.abstractmethod
    async def release_attempts(self, owner: str, attempts: Sequence[tuple[UUID, int]]) -> None:
        """Give up the claims ``owner`` holds on these ``(occurrence id, attempt)`` (claimed
        ahead, they will not start here after all: given back to the broker, or their
        delivery lost with its channel), so that the instance the broker delivers them to
        next can claim them. A claim another instance holds, or none, is left alone; one
        round trip."""


class EventFeed(abc.ABC):
    """Change events (the SSE feed)."""

    @abc.abstractmethod
    async def publish_events(self, events: Sequence[Event]) -> None:
        """Append events to the one shared feed, in order, in one round trip. Every event
        gets an id (``<ms>-<seq>-<n>``, see :func:`~rota.core.events.parse_event_id`)
        greater than every id before it. The feed is capped: only about the last
        ``event_cap`` events are kept for replay (the adapter's setting)."""

    @abc.abstractmethod
    async def replay(self, after: str | None, limit: int = 1000) -> list[tuple[str, Event]]:
        """Up to ``limit`` kept events with an id greater than ``after`` (``None``: the
        oldest kept), oldest first, as ``(id, event)``. An ``after`` older than what is kept
        replays from the oldest kept; one that is not an event id raises
        ``ValidationError``."""

    @abc.abstractmethod
    async def feed_horizon(self) -> str | None:
        """The id of the oldest event the feed keeps, once it has dropped older ones (its cap);
        ``None`` while it has dropped none. A client resuming after an older id may have
        missed events."""

    @abc.abstractmethod
    def events(self, after: str | None = None) -> AsyncIterator[tuple[str, Event]]:
        """``(id, event)`` as they are published (from any process), oldest first, each
        once: with ``after``, first the kept events after that id (as :meth:`replay`), then
        the new ones; without, only those published after subscribing (a reader that finds
        its start in the background has ``async ready()``: awaited, every event published
        after it returns reaches the reader). Closing the iterator (``aclose``) or the
        coordination ends it."""


class Coordination(BucketLeases, WorkerRegistry, Signals, ClaimMemory, EventFeed, LimitMemory):
    """What scheduler instances and workers share that is not the store: bucket leases,
    instance heartbeats, the worker registry, wake-up signals, and the limits."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources (idempotent)."""
