"""Bucket ownership: each scheduler instance holds renewable leases on a fair share of the
buckets. On start it claims free buckets; a graceful stop releases its leases; a crashed
instance's leases expire and the others take them over (JobMaster's bucket life cycle)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from rota.core.errors import RotaError
from rota.core.ports import Coordination, Lease

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BucketState:
    bucket: int
    owner: str | None
    state: str
    """``Active`` (leased), ``Completing`` (being released by its owner), ``Lost`` (no live
    lease: its owner died or it was never claimed)."""
    fence: int | None


class BucketOwner:
    """Claims and renews this instance's share of the buckets."""

    def __init__(
        self,
        coordination: Coordination,
        instance_id: str,
        *,
        bucket_count: int,
        lease_seconds: float,
        on_gained: Callable[[list[int]], None] | None = None,
    ) -> None:
        self._coordination = coordination
        self.instance_id = instance_id
        self._count = bucket_count
        self._ttl = lease_seconds
        self._on_gained = on_gained
        self._held: dict[int, Lease] = {}
        self._completing: set[int] = set()
        self._stopping = asyncio.Event()

    @property
    def buckets(self) -> list[int]:
        """The buckets this instance may dispatch right now."""
        return sorted(b for b in self._held if b not in self._completing)

    async def _fair_share(self) -> int:
        instances = await self._coordination.instances()
        live = max(1, len(instances))
        return math.ceil(self._count / live)

    async def tick(self) -> list[int]:
        """Heartbeat, renew held leases, claim free buckets up to the fair share, give back
        buckets above it. Returns the buckets held afterwards."""
        await self._coordination.heartbeat_instance(self.instance_id, {}, self._ttl)
        share = await self._fair_share()
        leases = await self._coordination.leases()
        free = [b for b in range(self._count) if b not in leases]
        mine = [b for b, lease in leases.items() if lease.owner == self.instance_id]
        wanted = sorted(mine)[:share]
        surplus = sorted(mine)[share:]
        wanted += free[: max(0, share - len(wanted))]
        if surplus:
            await self._coordination.release_buckets(self.instance_id, surplus)
        acquired = await self._coordination.acquire_buckets(self.instance_id, wanted, self._ttl)
        gained = [b for b in acquired if b not in self._held]
        self._held = dict(acquired)
        if gained and self._on_gained is not None:
            self._on_gained(gained)
        return self.buckets

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.tick()
            except (RotaError, OSError) as exc:
                log.warning("bucket lease renewal failed: %s", exc)
            except Exception:
                log.exception("unexpected bucket owner error")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self._ttl / 3)

    def begin_release(self) -> None:
        """Stop dispatching every held bucket (graceful stop: Completing)."""
        self._completing = set(self._held)

    async def release(self) -> None:
        """Release every lease this instance holds and stop renewing."""
        self._stopping.set()
        held = list(self._held)
        self._held = {}
        self._completing = set()
        if held:
            await self._coordination.release_buckets(self.instance_id, held)

    async def states(self) -> list[BucketState]:
        leases = await self._coordination.leases()
        out: list[BucketState] = []
        for bucket in range(self._count):
            lease = leases.get(bucket)
            if lease is None:
                out.append(BucketState(bucket, None, "Lost", None))
                continue
            completing = lease.owner == self.instance_id and bucket in self._completing
            state = "Completing" if completing else "Active"
            out.append(BucketState(bucket, lease.owner, state, lease.fence))
        return out
