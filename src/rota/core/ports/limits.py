"""The limits' slices of the ports (:mod:`rota.core.limits`): the store keeps the limits an
Admin set (the source of truth); the coordination carries them to the workers and holds the
cluster-wide semaphores, rate windows and the list of who waits."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

from rota.core.limits import JobLimit, LimitGrant, LimitHold, LimitRequest, LimitUsage


class LimitStore(abc.ABC):
    """The limits as an Admin set them."""

    @abc.abstractmethod
    async def job_limits(self) -> list[JobLimit]:
        """The limits, by job type (none if never set)."""

    @abc.abstractmethod
    async def set_job_limits(self, limits: Sequence[JobLimit]) -> None:
        """Replace every limit with ``limits`` (checked by the caller)."""


class LimitMemory(abc.ABC):
    """Cluster-wide semaphores and start rates, shared by every worker instance.

    A slot is held by a token (an occurrence id) under a lease: it is freed by
    :meth:`release_limits`, or when its lease ends without a :meth:`renew_limits` (its holder
    died). The clock is the coordination's own (Redis ``TIME``), so workers with skewed clocks
    agree."""

    @abc.abstractmethod
    async def put_limits(self, limits: Sequence[JobLimit]) -> None:
        """Publish the limits the workers follow (replacing what was published)."""

    @abc.abstractmethod
    async def published_limits(self) -> list[JobLimit] | None:
        """The limits last published, ``None`` if none were (or the memory was lost)."""

    def watch_limits(self, callback: Callable[[list[JobLimit]], None]) -> None:  # noqa: B027
        """Have ``callback`` told of the limits :meth:`put_limits` publishes through this
        same object, at once (the embedded mode, one process). By default nothing: a worker
        reads the limits at its heartbeat."""

    @abc.abstractmethod
    async def acquire_limits(
        self, holder: str, requests: Sequence[LimitRequest], lease: float, room: int
    ) -> list[LimitGrant]:
        """Try each request in order, atomically each: it is granted when its semaphore has a
        free slot (or its token holds one already: renewed, no start counted) and its rate
        window a free start; then both are taken, the slot for ``lease`` seconds. At most
        ``room`` requests are granted (those after get refused without being tried). A
        refused request is listed as waiting (its label, since its first refusal) until it
        is granted, released, or ``lease`` seconds pass without another try. One round trip."""

    @abc.abstractmethod
    async def renew_limits(self, holder: str, holds: Sequence[LimitHold], lease: float) -> int:
        """Extend the leases of slots still held to ``lease`` seconds from now (a slot whose
        lease ended and was pruned is not taken back). How many were renewed."""

    @abc.abstractmethod
    async def release_limits(self, holder: str, holds: Sequence[LimitHold]) -> None:
        """Free these slots, and forget these tokens as waiting (an empty ``slot_key`` only
        forgets the waiting token). One round trip."""

    @abc.abstractmethod
    async def limit_waiting_for(self, tokens: Sequence[str]) -> dict[str, str]:
        """Of these tokens, those waiting now -> the label of what each waits for. One round
        trip."""

    @abc.abstractmethod
    async def limit_usage(self) -> LimitUsage:
        """Live holders per semaphore, and the waiting tokens (oldest first)."""
