"""The limits' gate of a worker instance: cluster-wide slots and start rates per job type
(:mod:`rota.core.limits`, docs/concepts.md "Limits").

A delivery of a limited job type passes the gate before the executor's flow
(:mod:`rota.worker.flow`) may start it: the gate takes a slot of its semaphore (and a start
of its type's rate) from the coordination, then hands it to the flow; it gives the slot back
when the flow's task for it ends (or when it will not start here). A delivery that gets no
slot waits here, unstarted and unacknowledged (a crash hands it back to the broker), without
holding a worker slot: the gate asks again, for every waiting delivery in one call, highest
priority (then earliest due) first, as soon as a slot is given back here, else after a short
backoff (a slot freed on another instance), or when the rate's window says. Its first refusal
writes a line to the occurrence's log, and the coordination lists it as waiting
(``GET /api/v1/limits``) while it waits.

Slots are held under a lease the executor's heartbeat renews (:meth:`LimitGate.renew`): a
holder killed outright frees its slots when their leases end. The limits are read from the
coordination at start and at every heartbeat (:meth:`LimitGate.refresh`; the embedded mode's
in-memory coordination tells the gate of a change at once); a type without a
limit costs one dict lookup. While the coordination cannot be reached, deliveries of limited
types wait (a limit is never exceeded for want of an answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rota.core.limits import JobLimit, LimitHold, LimitRequest
from rota.core.models import JobMessage
from rota.core.ports import Delivery
from rota.core.ports.limits import LimitMemory

__all__ = ["DEFAULT_LIMIT_LEASE", "LimitGate"]

log = logging.getLogger(__name__)

DEFAULT_LIMIT_LEASE = 15.0
"""Seconds a slot is held without a renewal (three default heartbeats)."""
_FIRST_BACKOFF = 0.02
_MAX_BACKOFF = 0.5
_BATCH = 500
"""Most waiting deliveries asked for in one call (the first by priority, then due time)."""


@dataclass(slots=True, eq=False)
class _Waiting:
    delivery: Delivery
    order: tuple[int, float]
    since: float = field(default_factory=time.monotonic)
    noted: bool = False


class LimitGate:
    """Slots and rates for one worker instance (``holder``), see the module.

    ``room()``: how many deliveries the flow could start now (no more are granted at once);
    ``admit(delivery)``: hand a granted delivery to the flow; ``note(message, text)``: tell
    the occurrence it waits; ``hand_back(delivery)``: give one back to the broker."""

    def __init__(
        self,
        memory: LimitMemory,
        holder: str,
        *,
        room: Callable[[], int],
        admit: Callable[[Delivery], None],
        note: Callable[[JobMessage, str], None],
        hand_back: Callable[[Delivery], Awaitable[None]],
        lease: float = DEFAULT_LIMIT_LEASE,
        timeout: float = 5.0,
    ) -> None:
        if not lease > 0 or not timeout > 0:
            raise ValueError("lease and timeout must be > 0")
        self._memory = memory
        self.holder = holder
        self._room = room
        self._admit = admit
        self._note = note
        self._hand_back = hand_back
        self.lease = lease
        self._timeout = timeout
        self._limits: dict[str, JobLimit] = {}
        self._waiting: list[_Waiting] = []
        self._held: dict[str, tuple[LimitHold | None, int]] = {}
        """Token -> (its slot, or None for a rate only; deliveries granted with it)."""
        self._granted: dict[int, str] = {}
        """The deliveries granted and not finished (by identity) -> their token."""
        self._to_release: list[LimitHold] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.granted = 0
        self.refused = 0
        self.unavailable = 0

    @property
    def limits(self) -> dict[str, JobLimit]:
        return dict(self._limits)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def holding(self) -> int:
        return len(self._held)

    def applies(self, job_type: str) -> bool:
        """Whether deliveries of ``job_type`` must pass the gate (the hot path's one lookup)."""
        return job_type in self._limits

    def set_limits(self, limits: list[JobLimit]) -> None:
        self._limits = {limit.job_type: limit for limit in limits}
        if self._waiting:
            self._wake.set()  # a limit lifted lets its waiting deliveries through

    async def refresh(self) -> None:
        """Read the limits the coordination publishes (kept as they were if it has none, or
        does not answer). Never raises."""
        try:
            async with asyncio.timeout(self._timeout):
                limits = await self._memory.published_limits()
        except Exception as exc:
            log.warning("reading the limits failed: %s", exc or type(exc).__name__)
            return
        if limits is not None:
            self.set_limits(limits)

    def start(self) -> None:
        if self._task is None:
            self._memory.watch_limits(self.set_limits)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="rota-limits")

    def wait(self, delivery: Delivery) -> None:
        """Take a delivery of a limited type: it starts (through the flow) once granted."""
        message = delivery.message
        due = message.scheduled_for.timestamp() if message.scheduled_for else time.time()
        item = _Waiting(delivery, (-message.priority, due))
        waiting = self._waiting
        at = len(waiting)
        while at and waiting[at - 1].order > item.order:
            at -= 1
        waiting.insert(at, item)
        self._wake.set()

    def take(self, occurrence_id: object) -> Delivery | None:
        """Take a waiting delivery of the occurrence out of the gate (it is cancelled)."""
        for item in self._waiting:
            if item.delivery.message.occurrence_id == occurrence_id:
                self._waiting.remove(item)
                self._to_release.append(LimitHold("", str(occurrence_id)))
                self._wake.set()
                return item.delivery
        return None

    def finished(self, delivery: Delivery) -> None:
        """The flow is done with a delivery (run, skipped, or not started): give its slot
        back (once every delivery granted with its token is done)."""
        token = self._granted.pop(id(delivery), None)
        held = None if token is None else self._held.get(token)
        if token is not None and held is not None:
            hold, count = held
            if count > 1:
                self._held[token] = (hold, count - 1)
            else:
                del self._held[token]
                if hold is not None:
                    self._to_release.append(hold)
                    self._wake.set()
        if self._waiting:
            self._wake.set()  # a worker slot is free: try the waiting ones

    async def renew(self) -> None:
        """Renew the leases of the slots held here (the heartbeat). Never raises."""
        holds = [hold for hold, _ in self._held.values() if hold is not None]
        if not holds:
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._memory.renew_limits(self.holder, holds, self.lease)
        except Exception as exc:
            log.warning("renewing limit slots failed: %s", exc or type(exc).__name__)

    async def hand_back_overdue(self, after: float) -> None:
        """Give back to the broker the deliveries waiting longer than ``after`` seconds (and
        those whose channel is gone are dropped: the broker delivers them again)."""
        cutoff = time.monotonic() - after
        out = [w for w in self._waiting if w.since <= cutoff or not w.delivery.is_live]
        if not out:
            return
        gone = {id(w) for w in out}
        self._waiting = [w for w in self._waiting if id(w) not in gone]
        await self._forget([w.delivery for w in out])
        for item in out:
            if item.delivery.is_live:
                await self._hand_back(item.delivery)

    async def stop(self) -> list[Delivery]:
        """Stop asking; the waiting deliveries are returned (to be handed back)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        waiting = [w.delivery for w in self._waiting]
        self._waiting = []
        await self._forget(waiting)
        return waiting

    async def close(self) -> None:
        """Give back every slot still held here (after the handlers ended). Never raises."""
        holds = [hold for hold, _ in self._held.values() if hold is not None]
        self._held.clear()
        self._granted.clear()
        await self._send_releases([*self._to_release, *holds])
        self._to_release = []

    async def _forget(self, deliveries: list[Delivery]) -> None:
        tokens = {str(d.message.occurrence_id) for d in deliveries}
        await self._send_releases([LimitHold("", token) for token in tokens])

    async def _send_releases(self, holds: list[LimitHold]) -> None:
        if not holds:
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._memory.release_limits(self.holder, holds)
        except Exception as exc:  # the slots' leases end by themselves
            log.warning("giving back limit slots failed: %s", exc or type(exc).__name__)

    # --- the loop that asks for the waiting deliveries --------------------------------------

    async def _run(self) -> None:
        delay: float | None = None
        backoff = _FIRST_BACKOFF
        while True:
            if delay is None or delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
            self._wake.clear()
            if self._to_release:
                releases, self._to_release = self._to_release, []
                await self._send_releases(releases)
            if not self._waiting:
                delay, backoff = None, _FIRST_BACKOFF
                continue
            try:
                granted, hint = await self._ask()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.unavailable += 1
                log.warning("asking for limit slots failed: %s", exc or type(exc).__name__)
                granted, hint = 0, 0.0
            if granted and self._waiting and self._room() > 0:
                delay, backoff = 0.0, _FIRST_BACKOFF
            elif self._waiting and self._room() <= 0:
                # a flow task's end wakes the gate; until then its waiting ones stay listed
                delay = self.lease / 3
            else:
                delay = hint if hint > 0 else backoff
                backoff = min(backoff * 2, _MAX_BACKOFF)

    async def _ask(self) -> tuple[int, float]:
        """One call for every waiting delivery; the granted ones go to the flow. Returns how
        many were granted and the shortest wait a rate named (0: none)."""
        room = max(0, self._room())  # 0: none granted, the waiting ones listed again
        asked: list[_Waiting] = []
        requests: list[LimitRequest] = []
        free: list[_Waiting] = []
        for item in self._waiting[:_BATCH]:
            request = self._request(item.delivery.message)
            if request is None:
                free.append(item)  # its limit was lifted
            else:
                asked.append(item)
                requests.append(request)
        for item in free:
            self._waiting.remove(item)
            self._admit(item.delivery)
            room -= 1
        if not requests:
            return len(free), 0.0
        async with asyncio.timeout(self._timeout):
            grants = await self._memory.acquire_limits(
                self.holder, requests, self.lease, max(0, room)
            )
        hint = 0.0
        granted = 0
        for item, request, grant in zip(asked, requests, grants, strict=True):
            if grant.granted:
                granted += 1
                self.granted += 1
                self._waiting.remove(item)
                hold = (
                    None if request.slot_key is None else LimitHold(request.slot_key, request.token)
                )
                _, count = self._held.get(request.token, (hold, 0))
                self._held[request.token] = (hold, count + 1)
                self._granted[id(item.delivery)] = request.token
                self._admit(item.delivery)
                continue
            self.refused += 1
            if granted >= room:
                continue  # not tried: no room left here
            if grant.wait > 0:
                hint = grant.wait if hint == 0 else min(hint, grant.wait)
            if not item.noted:
                item.noted = True
                if grant.wait > 0:
                    text = f"waiting for limit {request.label}: its start rate is reached"
                else:
                    text = (
                        f"waiting for limit {request.label}: "
                        f"{grant.holding} of {request.max_concurrent} running"
                    )
                self._note(item.delivery.message, text)
        return granted + len(free), hint

    def _request(self, message: JobMessage) -> LimitRequest | None:
        limit = self._limits.get(message.job_type)
        if limit is None:
            return None
        slot = limit.slot_key(message.job_data)
        return LimitRequest(
            token=str(message.occurrence_id),
            slot_key=slot,
            max_concurrent=limit.max_concurrent or 0,
            rate_key=None if limit.rate is None else limit.job_type,
            rate=limit.rate or 0.0,
            label=slot or limit.job_type,
        )
