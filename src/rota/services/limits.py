"""Cluster-wide limits (:mod:`rota.core.limits`): what an Admin sets (kept in the store, the
source of truth) and what the workers follow (published in the coordination, which every
worker instance reads at start and at every heartbeat).

Every scheduler instance publishes the store's limits when it starts, at once after a change
made through it, and every ``interval_seconds`` (Redis may have lost them: a worker that finds
none keeps following the limits it last read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from rota.core.errors import NotFoundError
from rota.core.limits import JobLimit, LimitUsage, validate_limits
from rota.core.ports.limits import LimitMemory, LimitStore
from rota.services._loop import run_periodically

__all__ = ["LimitOverview", "LimitService", "waiting_for"]

log = logging.getLogger(__name__)

PUBLISH_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class LimitOverview:
    limits: list[JobLimit]
    usage: LimitUsage


async def waiting_for(coordination: LimitMemory, tokens: Sequence[str]) -> dict[str, str]:
    """Of these occurrence ids (as text), those a worker holds back for a limit -> the
    limit; empty when the coordination cannot say (an extra shown beside an occurrence,
    never a reason to fail its page)."""
    if not tokens:
        return {}
    try:
        return await coordination.limit_waiting_for(tokens)
    except Exception:
        log.warning("reading who waits for a limit failed", exc_info=True)
        return {}


class LimitService:
    def __init__(
        self,
        store: LimitStore,
        coordination: LimitMemory,
        *,
        interval_seconds: float = PUBLISH_INTERVAL,
    ) -> None:
        self._store = store
        self._coordination = coordination
        self._interval = interval_seconds
        self._stopping = asyncio.Event()

    async def limits(self) -> list[JobLimit]:
        return await self._store.job_limits()

    async def overview(self) -> LimitOverview:
        """The limits, and the slots held and the occurrences waiting now."""
        limits = await self._store.job_limits()
        return LimitOverview(limits, await self._coordination.limit_usage())

    async def replace(self, limits: Sequence[JobLimit]) -> list[JobLimit]:
        """Replace every limit (checked: ``ValidationError`` naming the field), and publish."""
        checked = validate_limits(limits)
        await self._store.set_job_limits(checked)
        await self.publish(checked)
        return checked

    async def put(self, limit: JobLimit) -> list[JobLimit]:
        """Set the limits of one job type (the others kept)."""
        others = [x for x in await self._store.job_limits() if x.job_type != limit.job_type]
        return await self.replace([*others, limit])

    async def delete(self, job_type: str) -> list[JobLimit]:
        """Lift the limits of one job type (``NotFoundError`` if it has none)."""
        current = await self._store.job_limits()
        kept = [x for x in current if x.job_type != job_type]
        if len(kept) == len(current):
            raise NotFoundError("limit of job type", job_type)
        return await self.replace(kept)

    async def publish(self, limits: Sequence[JobLimit] | None = None) -> None:
        """Publish the limits (by default the store's) for the workers."""
        if limits is None:
            limits = await self._store.job_limits()
        await self._coordination.put_limits(limits)

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Publish the store's limits every interval until :meth:`stop` (never dies)."""
        await run_periodically(
            "limits publication", self.publish, self._interval, self._stopping, log=log
        )
