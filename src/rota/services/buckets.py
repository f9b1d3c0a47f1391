"""Bucket ownership: each scheduler instance holds renewable leases on a fair share of the
buckets. On start it claims free buckets; a graceful stop releases its leases; a crashed
instance's leases expire and the others take them over (JobMaster's bucket life cycle).

Bucket states, as every instance sees them (:func:`bucket_overview`):

- ``Active``: leased by a live instance that dispatches it.
- ``Completing``: its owner is stopping gracefully (it says so in its instance heartbeat): it
  dispatches nothing new there, finishes what is in flight, then releases the lease.
- ``Lost``: no live lease, or the owner's heartbeat is gone: another instance takes it over
  on its next tick (at the latest when the lease runs out).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from rota.core.errors import RotaError
from rota.core.ports import BucketLeases, ScheduleIndex
from rota.core.records import BucketStateName, InstanceStateName, Lease
from rota.services._loop import run_periodically

log = logging.getLogger(__name__)

STATE_KEY = "state"
"""Key of the instance heartbeat info that says what the instance is doing."""
STOPPING = "stopping"
"""Its value while the instance stops gracefully (its buckets are Completing)."""

ACTIVE: Final = "Active"
COMPLETING: Final = "Completing"
LOST: Final = "Lost"


@dataclass(frozen=True, slots=True)
class BucketState:
    bucket: int
    owner: str | None
    """The lease holder (also for a Lost bucket whose owner's lease has not run out yet)."""
    state: BucketStateName
    """``Active``, ``Completing`` or ``Lost`` (module docstring)."""
    fence: int | None
    lease_expires_at: float | None = None
    """Epoch seconds."""
    lag: float = 0.0
    """Seconds the earliest index entry of the bucket is overdue (0: nothing overdue)."""
    indexed: int = 0
    """Entries of the bucket in the schedule index (the hot window)."""


@dataclass(frozen=True, slots=True)
class InstanceState:
    instance_id: str
    state: InstanceStateName
    buckets: list[int]
    """The buckets it holds leases on."""


@dataclass(frozen=True, slots=True)
class BucketOverview:
    bucket_count: int
    buckets: list[BucketState]
    instances: list[InstanceState]


def _is_stopping(info: Mapping[str, str]) -> bool:
    return info.get(STATE_KEY) == STOPPING


def _state_of(lease: Lease | None, instances: Mapping[str, Mapping[str, str]]) -> BucketStateName:
    if lease is None or lease.owner not in instances:
        return LOST
    return COMPLETING if _is_stopping(instances[lease.owner]) else ACTIVE


async def bucket_overview(
    coordination: BucketLeases,
    index: ScheduleIndex,
    bucket_count: int,
    *,
    now: float | None = None,
) -> BucketOverview:
    """Every bucket's owner, state, lease, lag and index size, and the live instances."""
    at = time.time() if now is None else now
    instances = await coordination.instances()
    leases = await coordination.leases()
    buckets: list[BucketState] = []
    for bucket in range(bucket_count):
        lease = leases.get(bucket)
        earliest = await index.earliest([bucket])
        buckets.append(
            BucketState(
                bucket=bucket,
                owner=None if lease is None else lease.owner,
                state=_state_of(lease, instances),
                fence=None if lease is None else lease.fence,
                lease_expires_at=None if lease is None else lease.expires_at,
                lag=0.0 if earliest is None else max(0.0, at - earliest),
                indexed=await index.size([bucket]),
            )
        )
    held: dict[str, list[int]] = {}
    for state in buckets:
        if state.owner is not None:
            held.setdefault(state.owner, []).append(state.bucket)
    listed = [
        InstanceState(i, "Stopping" if _is_stopping(info) else ACTIVE, held.get(i, []))
        for i, info in sorted(instances.items())
    ]
    return BucketOverview(bucket_count, buckets, listed)


class BucketOwner:
    """Claims and renews this instance's share of the buckets."""

    def __init__(
        self,
        coordination: BucketLeases,
        instance_id: str,
        *,
        bucket_count: int,
        lease_seconds: float,
        on_gained: Callable[[list[int]], None] | None = None,
        info: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        """``info()``: more to publish in the instance heartbeat (every instance reads it)."""
        self._extra_info = info
        self._coordination = coordination
        self.instance_id = instance_id
        self._count = bucket_count
        self._ttl = lease_seconds
        self._on_gained = on_gained
        self._held: dict[int, Lease] = {}
        self._releasing = False
        self._stopping = asyncio.Event()
        self._claimed_once = False
        self.taken_over = 0
        """Buckets gained after the first claim (another instance lost or released them)."""

    def connect(
        self,
        *,
        on_gained: Callable[[list[int]], None] | None = None,
        info: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        """Attach what is built after the owner because it reads the owner's buckets: the
        loader that ``on_gained`` kicks, the monitor whose ``info`` the heartbeat carries.
        Before the first :meth:`tick`."""
        if on_gained is not None:
            self._on_gained = on_gained
        if info is not None:
            self._extra_info = info

    @property
    def buckets(self) -> list[int]:
        """The buckets this instance may dispatch right now (none once it is releasing)."""
        return [] if self._releasing else sorted(self._held)

    def _info(self) -> dict[str, str]:
        info = dict(self._extra_info()) if self._extra_info is not None else {}
        if self._releasing:
            info[STATE_KEY] = STOPPING
        return info

    async def _fair_share(self) -> int:
        instances = await self._coordination.instances()
        live = sum(1 for info in instances.values() if not _is_stopping(info))
        return math.ceil(self._count / max(1, live))

    async def tick(self) -> list[int]:
        """Heartbeat, renew held leases, claim free buckets up to the fair share, give back
        buckets above it (while releasing: only renew). Returns the dispatchable buckets."""
        await self._coordination.heartbeat_instance(self.instance_id, self._info(), self._ttl)
        if self._releasing:
            renewed = await self._coordination.acquire_buckets(
                self.instance_id, list(self._held), self._ttl
            )
            self._held = dict(renewed)
            return self.buckets
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
        # A bucket this instance held whose lease is gone (it expired, or the coordination lost
        # its data: Redis flushed or restarted empty) and is granted again counts as gained:
        # its index may have been lost or changed meanwhile, so the loader must load it now.
        broken = {b for b in self._held if b not in mine}
        gained = [b for b in acquired if b not in self._held or b in broken]
        lost = [b for b in self._held if b not in acquired]
        if gained or lost:
            log.info(
                "buckets gained %s, lost %s; holding %s (fair share %d, gave back %s)",
                gained, lost, sorted(acquired), share, surplus,
                extra={"action": "buckets_changed", "gained": gained, "lost": lost},
            )  # fmt: skip
        self._held = dict(acquired)
        if self._claimed_once:
            self.taken_over += len(gained)
        self._claimed_once = True
        if gained and self._on_gained is not None:
            self._on_gained(gained)
        return self.buckets

    async def run(self) -> None:
        """Renew the leases every third of their time until :meth:`release`."""
        await run_periodically(
            "bucket lease renewal", self.tick, self._ttl / 3, self._stopping, log=log
        )

    async def begin_release(self) -> None:
        """Graceful stop, first step: dispatch nothing more and tell the other instances
        (every held bucket is Completing; they stop counting this instance in their fair
        share). Keeps renewing the held leases until :meth:`release`."""
        self._releasing = True
        try:
            await self._coordination.heartbeat_instance(self.instance_id, self._info(), self._ttl)
        except (RotaError, OSError) as exc:
            log.warning("could not announce the graceful stop: %s", exc)

    async def release(self) -> None:
        """Release every lease this instance holds and stop renewing. The others take the
        buckets over on their next tick."""
        self._releasing = True
        self._stopping.set()
        held = list(self._held)
        self._held = {}
        if held:
            await self._coordination.release_buckets(self.instance_id, held)
