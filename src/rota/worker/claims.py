"""Claims of attempts across a worker group: exactly one run per attempt (docs/reliability.md,
"One run per attempt").

Before an executor starts an attempt it claims ``(occurrence id, attempt)`` for its instance
through the :class:`~rota.core.ports.Coordination` port (Redis ``SET NX PX`` in the distributed
mode, the in-memory adapter in the embedded mode). A copy of the message delivered to another
instance of the group (an ack lost with the broker connection, a republished message) finds
the claim taken and is acknowledged without running.

The claim memory may be lost (Redis flushed, or restarted with nothing on disk). Its epoch
token tells: the token last seen is kept (in the worker's local store, so a restarted worker
knows it too) and sent with every claim; a different token means the memory was lost, and for
the claim TTL after that loss a delivery flagged *redelivered* (a copy that may have run before
the loss) is not run: it is marked taken by an unknown owner instead, and reported Running for
the unknown holder (:data:`~rota.core.models.UNKNOWN_HOLDER`). The store settles it: if a real
holder reports the attempt, that holder is named and its heartbeats tell whether it lives;
otherwise (never started, or its holder died before reporting) the dead-worker sweep gives the
occurrence its next attempt after the dead-worker silence (5 s), not the zombie threshold. A
first delivery still runs. The same holds while Redis cannot be reached (every call is bounded
by ``timeout``): a first delivery runs, and its claim is written once Redis answers again; a
redelivered one is not run.

Attempts running here are re-claimed on every :meth:`AttemptClaims.renew` (the executor's
heartbeat): that renews their expiry and puts them back at once into a memory that lost them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from rota.core.models import JobMessage
from rota.core.ports import ClaimMemory
from rota.core.records import AttemptClaim, ClaimBatch, ClaimOutcome, ClaimRequest
from rota.worker.localstore import LocalStore

__all__ = ["CLAIM_EPOCH", "DEFAULT_CLAIM_TTL", "AttemptClaims", "ClaimVerdict"]

log = logging.getLogger(__name__)

CLAIM_EPOCH = "claim_epoch"
"""The local store's key for the claim memory's epoch token last seen."""
DEFAULT_CLAIM_TTL = 3 * 3600.0
"""Seconds a claim lives (plus the attempt's timeout), see ``docs/reliability.md``."""
_MAX_UNCONFIRMED = 100_000
_BATCH = 500
"""Most attempts claimed in one call."""


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    run: bool
    """Whether this instance may run the attempt."""
    outcome: str
    """A :class:`~rota.core.records.ClaimOutcome` value, or ``unavailable`` (no answer)."""
    owner: str | None = None
    """Who holds it (``None``: unknown, or nobody could be asked)."""
    claimed_at: float | None = None
    """When its holder claimed it (epoch seconds)."""


class AttemptClaims:
    """The claims of one worker instance (``instance_id``)."""

    def __init__(
        self,
        coordination: ClaimMemory,
        instance_id: str,
        *,
        ttl: float = DEFAULT_CLAIM_TTL,
        timeout: float = 5.0,
        store: LocalStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not ttl > 0 or not timeout > 0:
            raise ValueError("ttl and timeout must be > 0")
        self._coordination = coordination
        self.instance_id = instance_id
        self.ttl = ttl
        self.timeout = timeout
        self._store = store
        self._clock = clock
        self._known: str | None = None
        self._unconfirmed: dict[tuple[UUID, int], float] = {}
        """Attempts started here while no claim could be made -> when (epoch seconds)."""
        self._waiting: list[tuple[ClaimRequest, float, asyncio.Future[AttemptClaim | None]]] = []
        """Claims waiting to be sent together: (request, TTL, the caller's future)."""
        self._sender: asyncio.Task[None] | None = None
        self.calls = 0
        """Calls made to the coordination (claims are sent in batches)."""
        self.unavailable = 0
        """Claims that got no answer (the coordination unreachable or too slow)."""
        self.losses = 0
        """Times the claim memory was found lost (a new epoch token)."""
        self.conflicts = 0
        """Attempts running here found claimed by another instance (claimed while the
        memory was unreachable or lost)."""

    @property
    def unconfirmed(self) -> int:
        """Attempts started here without a claim, to be claimed when the memory answers."""
        return len(self._unconfirmed)

    @property
    def known_epoch(self) -> str | None:
        return self._known

    def ttl_for(self, message: JobMessage) -> float:
        """A claim outlives the attempt's own timeout by the claim TTL."""
        return self.ttl + (message.timeout_seconds or 0.0)

    async def load(self) -> None:
        """Read the epoch token last seen from the local store (a restart knows it)."""
        if self._store is not None:
            try:
                self._known = await self._store.get_meta(CLAIM_EPOCH)
            except Exception:
                log.warning("reading the claim epoch failed", exc_info=True)

    async def claim(self, message: JobMessage, *, careful: bool) -> ClaimVerdict:
        """Claim the message's attempt for this instance. ``careful``: the delivery is flagged
        redelivered (it may be a copy of one handed out before)."""
        request = ClaimRequest(message.occurrence_id, message.attempt, careful)
        found = await self._queued(request, self.ttl_for(message))
        return self._verdict(message, careful, found)

    async def claim_many(self, wanted: Sequence[tuple[JobMessage, bool]]) -> list[ClaimVerdict]:
        """Claim the attempts of several messages, each ``(message, careful)`` as
        :meth:`claim` does, in one call per :data:`_BATCH` (the deliveries of a burst, whose
        starts wait for this alone)."""
        verdicts: list[ClaimVerdict] = []
        for start in range(0, len(wanted), _BATCH):
            chunk = wanted[start : start + _BATCH]
            requests = [ClaimRequest(m.occurrence_id, m.attempt, careful) for m, careful in chunk]
            batch = await self._call(requests, max(self.ttl_for(m) for m, _ in chunk))
            last: AttemptClaim | None = None  # answers shared by many: one verdict
            verdict = ClaimVerdict(False, "unavailable")
            for i, (message, careful) in enumerate(chunk):
                found = None if batch is None else batch.claims[i]
                if found is None or found is not last:
                    verdict = self._verdict(message, careful, found)
                    last = found
                verdicts.append(verdict)
        return verdicts

    def _verdict(
        self, message: JobMessage, careful: bool, found: AttemptClaim | None
    ) -> ClaimVerdict:
        """What a claim's answer (``None``: none came) means for running the attempt."""
        if found is None:
            if careful:
                return ClaimVerdict(False, "unavailable")
            if len(self._unconfirmed) < _MAX_UNCONFIRMED:
                self._unconfirmed[(message.occurrence_id, message.attempt)] = self._clock()
            return ClaimVerdict(True, "unavailable")
        run = found.outcome in (ClaimOutcome.CLAIMED, ClaimOutcome.OWNED)
        return ClaimVerdict(run, found.outcome.value, found.owner, found.claimed_at)

    async def _queued(self, request: ClaimRequest, ttl: float) -> AttemptClaim | None:
        """The claim of ``request``, made in one call with the other requests that came in
        the same turn of the event loop (a burst of deliveries costs one round trip)."""
        future: asyncio.Future[AttemptClaim | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, ttl, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_waiting(), name="rota-claims")
        return await future

    async def _send_waiting(self) -> None:
        await asyncio.sleep(0)  # let the deliveries of this turn queue their requests
        while self._waiting:
            waiting = self._waiting[:_BATCH]
            del self._waiting[:_BATCH]
            try:
                batch = await self._call([r for r, _, _ in waiting], max(t for _, t, _ in waiting))
            except BaseException:
                for _, _, future in waiting:  # cancelled (the executor stops): nobody waits
                    if not future.done():
                        future.cancel()
                raise
            for i, (_, _, future) in enumerate(waiting):
                if not future.done():
                    future.set_result(None if batch is None else batch.claims[i])

    async def renew(self, running: Sequence[tuple[UUID, int]]) -> None:
        """Claim again the attempts running here and those started without a claim: renews
        their expiry, restores them in a memory that lost them, and notices such a loss even
        while no message arrives. Never raises."""
        now = self._clock()
        self._unconfirmed = {k: at for k, at in self._unconfirmed.items() if now - at < self.ttl}
        keys = list(dict.fromkeys([*running, *self._unconfirmed]))
        requests = [ClaimRequest(oid, attempt) for oid, attempt in keys]
        batch = await self._call(requests, self.ttl)
        if batch is None:
            return
        for (oid, attempt), found in zip(keys, batch.claims, strict=True):
            self._unconfirmed.pop((oid, attempt), None)
            if found.outcome is ClaimOutcome.TAKEN:
                self.conflicts += 1
                log.error(
                    "an attempt that ran here is claimed by another worker instance",
                    extra={
                        "action": "claim_conflict",
                        "occurrence_id": str(oid),
                        "attempt": attempt,
                        "owner": found.owner,
                    },
                )

    async def release(self, attempts: Sequence[tuple[UUID, int]]) -> None:
        """Give up this instance's claims on attempts it claimed ahead and will not start
        (given back to the broker, or their delivery lost): the instance that gets them next
        claims them at once instead of finding them taken. Never raises; a claim not given up
        (Redis unreachable) makes that instance skip the copy, and the occurrence gets its
        next attempt from the dead-worker sweep or the zombie threshold."""
        unconfirmed = self._unconfirmed
        for key in attempts:
            unconfirmed.pop(key, None)
        if not attempts:
            return
        self.calls += 1
        try:
            async with asyncio.timeout(self.timeout):
                await self._coordination.release_attempts(self.instance_id, attempts)
        except Exception as exc:
            self.unavailable += 1
            log.warning(
                "giving up attempt claims failed: %s",
                exc or type(exc).__name__,
                extra={"action": "claim_release_failed", "count": len(attempts)},
            )

    async def _call(self, requests: list[ClaimRequest], ttl: float) -> ClaimBatch | None:
        """The coordination's answer, or ``None`` (logged) when it gives none in time."""
        self.calls += 1
        try:
            async with asyncio.timeout(self.timeout):
                batch = await self._coordination.claim_attempts(
                    self.instance_id, requests, ttl, known_epoch=self._known
                )
        except Exception as exc:  # unreachable, too slow, or broken: never crash the caller
            self.unavailable += 1
            log.warning(
                "claiming attempts failed: %s",
                exc or type(exc).__name__,
                extra={"action": "claim_unavailable"},
            )
            return None
        await self._note_epoch(batch)
        return batch

    async def _note_epoch(self, batch: ClaimBatch) -> None:
        if batch.epoch == self._known:
            return
        if self._known is not None:
            self.losses += 1
            until = batch.uncertain_until
            log.warning(
                "the claim memory was lost (Redis flushed or restarted empty): redelivered "
                "messages are not run until %s; attempts running here are claimed again",
                "?" if until is None else datetime.fromtimestamp(until, UTC).isoformat(),
                extra={"action": "claims_lost"},
            )
        self._known = batch.epoch
        if self._store is not None:
            try:
                await self._store.set_meta(CLAIM_EPOCH, batch.epoch)
            except Exception:
                log.warning("keeping the claim epoch failed", exc_info=True)
