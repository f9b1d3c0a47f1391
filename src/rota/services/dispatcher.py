"""The dispatcher: sleeps until the earliest due time of its buckets, then fires due jobs in
batches — one store transaction per batch — and publishes the Queued occurrences.

It also publishes *pending* occurrences (manual triggers, retries, zombies' new attempts,
occurrences left undispatched by a crash between commit and publish) from the store; those need
no index entry. The sweep claims each batch in the store before publishing it, so several
servers sweeping at once publish every pending occurrence once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from rota.core.errors import RotaError
from rota.core.models import ConcurrencyPolicy, Job, JobMessage, Occurrence, utcnow
from rota.core.planning import (
    FirePlan,
    PlainFires,
    PlanSettings,
    plan_fires,
    with_type_defaults,
)
from rota.core.ports import Broker, RoutedDispatchStore, ScheduleIndex
from rota.core.records import DispatchResult, DueEntry, IndexEntry
from rota.core.sealing import DataSeal, sealed_message
from rota.services._loop import Backoff, run_periodically
from rota.services.events import EventPublisher
from rota.services.workers import WorkerDirectory

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4
"""Batches whose publication (publish, confirms, mark dispatched) may go on while the loop
already fires the next one."""

FIRST_BATCH = 250
"""Due entries in the first batch after an idle spell; each batch after it takes twice as many,
up to ``dispatch_batch_size``. A burst's first runs start after a small transaction (about a
tenth of a full one's time), and the workers and the status tracker get work while the
dispatcher fires the rest (measured in ``bench/2026-11-30-pipeline-fill.md``)."""

GATHER = 0.2
"""A fire also takes what is due up to this share of the lead after the lead: fires are sent
between ``lead`` and ``1.2 × lead`` ahead, and a steady stream of due times (one every few
milliseconds) is fired in batches at most ``0.2 × lead`` apart, not one transaction each (100
one-time jobs a second, each due at its own instant: 982 fire transactions for 1,050 jobs
before; see ``bench/2026-11-30-pipeline-fill.md``)."""

Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatcherConfig:
    """What the dispatcher is told by the settings (built by the composition root)."""

    plan: PlanSettings
    """Misfires, catch-up and retries: how a due job's fires are planned."""
    dispatch_batch_size: int
    """Due entries (and pending occurrences) fired per store transaction."""
    sweeper_interval_seconds: float
    """How often the store is swept for pending occurrences."""
    sweeper_claim_seconds: float
    """How long a sweep's claim on a batch of pending occurrences lasts."""
    hot_window_seconds: float
    """How far ahead the schedule index holds (a job's next fire beyond it is not indexed)."""
    dispatch_lead_seconds: float = 0.0
    """How long before its due time an occurrence is committed and sent (up to :data:`GATHER`
    of it more): the worker holds it on a timer and starts it at its ``scheduledFor`` (0: sent
    when due)."""


MIN_SWEEP_GAP = 0.05
"""Seconds at least between two sweeps brought forward for an upcoming due time."""

LOCKED_RETRY_SECONDS = 0.2
"""A due job whose row another transaction holds (the status tracker writing its statistics,
or another server dispatching it while a bucket changes hands) is tried again this much later.
If the other transaction fired it, the store then says so and the entry moves to the next fire.
"""

DEFERRED_TOLERANCE = 1e-6
"""Seconds within which a job's next fire after a dispatch is the fire it was dispatched for
(not advanced: left for its due time)."""


def to_message(occurrence: Occurrence, now: datetime, group: str | None = None) -> JobMessage:
    """The wire message for an occurrence's current attempt, addressed to the worker
    ``group`` (default: the group the job names)."""
    return JobMessage(
        occurrence_id=occurrence.id,
        job_id=occurrence.job_id,
        job_type=occurrence.job_type,
        job_data=occurrence.job_data,
        scheduled_for=occurrence.scheduled_for,
        timestamp=now,
        retry_count=occurrence.attempt - 1,
        max_retries=occurrence.max_retries,
        priority=occurrence.priority,
        timeout_seconds=occurrence.timeout_seconds,
        job_version=occurrence.job_version,
        worker_id=occurrence.worker_id if group is None else group,
        original_correlation_id=occurrence.id,
        retry_delay_seconds=occurrence.retry_delay_seconds,
        traceparent=occurrence.traceparent,
    )


@dataclass(slots=True)
class DispatchStats:
    """Counters since start (exposed to the admin API and metrics)."""

    batches: int = 0
    dispatched: int = 0
    skipped: int = 0
    held: int = 0
    republished: int = 0
    errors: int = 0
    last_tick: float = field(default_factory=time.time)


class Dispatcher:
    """Fires due jobs of the buckets this instance owns."""

    def __init__(
        self,
        store: RoutedDispatchStore,
        index: ScheduleIndex,
        broker: Broker,
        workers: WorkerDirectory,
        config: DispatcherConfig,
        buckets: Callable[[], Sequence[int]],
        clock: Clock = utcnow,
        *,
        mark_on_commit: bool = False,
        pending_grace: float = 0.0,
        on_fired: Callable[[DispatchResult, datetime], None] | None = None,
        stamp: Callable[[FirePlan], FirePlan] | None = None,
        events: EventPublisher | None = None,
        displace: Callable[[dict[UUID, UUID]], Awaitable[object]] | None = None,
        seal: DataSeal | None = None,
    ) -> None:
        """``mark_on_commit``: record Skip-policy occurrences as dispatched in the dispatch
        transaction itself instead of in a second one after publishing. Only for the embedded
        mode, where a crash between commit and publish loses the whole process and start-up
        recovery hands every Queued occurrence to the dispatcher again.

        ``pending_grace``: the occurrences a fire commits for this dispatcher to publish are
        inserted dispatched, with one record of the batch claimed for it this long (ended once
        they are published): no sweep publishes them a second time meanwhile, and if this one dies
        before sending them a sweep sends them when the claim runs out. A sweep leaves nothing
        else alone: a trigger, a retry, a released dependent or a backfill is published by the
        first sweep its wake-up brings (distributed mode; 0 in the embedded mode: no claim,
        its one dispatcher never sweeps while it publishes).

        ``on_fired(result, now)``: called once per fired batch (metrics). ``stamp(plan)``:
        returns the plan with its occurrences marked (their trace context; tracing on).
        ``displace(displacing)``: cancels the occurrences a CancelOther job's newer fire
        replaces (in the background, after the new ones are sent).
        """
        self._seal = seal
        """Seals the job data of the messages sent (None: sent as the store holds it)."""
        self._displace = displace
        self._on_fired = on_fired
        self._stamp = stamp
        self._mark_on_commit = mark_on_commit
        self._rng = random.Random()
        """The fires' jitter draws (its own: the process's global ``random`` is the app's)."""
        self._events = events
        self._fire_claim = timedelta(seconds=pending_grace)
        self._claim_time = timedelta(seconds=config.sweeper_claim_seconds)
        self._store = store
        self._index = index
        self._broker = broker
        self._workers = workers
        self._config = config
        self._buckets = buckets
        self._clock = clock
        self._plan_settings = config.plan
        self._lead = config.dispatch_lead_seconds
        self._reach = self._lead * (1 + GATHER)
        """How far ahead a fire takes what is due (the lead and its :data:`GATHER`)."""
        self._wake = asyncio.Event()
        self._pending_hint = True
        self._target: float | None = None
        self._next_pending_check = 0.0
        self._stopping = asyncio.Event()
        self._paused_reason: str | None = None
        self._busy = False
        """The last batch was full: look for more before asking for the earliest."""
        self._batch_limit = min(FIRST_BATCH, config.dispatch_batch_size)
        """The next batch's size (:data:`FIRST_BATCH` after an idle spell, doubling)."""
        self._in_flight: deque[asyncio.Task[None]] = deque()
        self._background: set[asyncio.Task[None]] = set()
        self.stats = DispatchStats()

    # --- control ---------------------------------------------------------------------------

    def wake(self, due: float | None = None) -> None:
        """Something is due at ``due`` (epoch seconds; ``None``: now or unknown). Wakes the loop
        if that is earlier than what it sleeps towards; also looks for pending occurrences."""
        self._pending_hint = True
        if due is None or self._target is None or due - self._lead < self._target:
            self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def pause(self, reason: str) -> None:
        self._paused_reason = reason

    def resume(self) -> None:
        self._paused_reason = None
        self._wake.set()

    @property
    def lead_seconds(self) -> float:
        """How long before their due time fires are committed and sent."""
        return self._lead

    @property
    def paused_reason(self) -> str | None:
        return self._paused_reason

    # --- loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Dispatch until :meth:`stop`. Errors are logged and retried; the loop never dies."""
        try:
            await run_periodically(
                "dispatch",
                self._iteration,  # it sleeps as long as it wants: no interval after it
                0.0,
                self._stopping,
                log=log,
                backoff=Backoff(0.1, 5.0),
                on_error=self._failed,
                unexpected_delay=1.0,
                sleep=lambda delay: self._sleep(time.time() + delay),
            )
        finally:
            await self._settle_in_flight(0, quiet=True)

    def _failed(self) -> None:
        self.stats.errors += 1
        self._busy = False
        # A sweep cut short (its batch handed back) is tried again after the error's backoff,
        # not a sweep interval later; so is one a failed fire handed back.
        self._pending_hint = True

    async def _iteration(self) -> None:
        self.stats.last_tick = time.time()
        # A wake from here on (while this iteration awaits the index or the store) must cut
        # the coming sleep short: clear it now, not when the sleep starts.
        self._wake.clear()
        if self._paused_reason is not None:
            await self._sleep(time.time() + 1.0)
            return
        buckets = self._buckets()
        now_epoch = time.time()
        if self._pending_hint or now_epoch >= self._next_pending_check:
            await self._settle_in_flight(0)  # the sweep must not see what is being published
            await self.dispatch_pending()
        if not buckets:
            await self._settle_in_flight(0)
            await self._sleep(min(now_epoch + 1.0, self._next_pending_check))
            return
        if self._busy:  # the last batch was full: go on without asking the earliest
            await self._fire(buckets)
            if self._busy:
                return
        earliest = await self._index.earliest(buckets)
        if earliest is not None and earliest - self._lead <= time.time():
            await self._fire(buckets)
            return
        # Publications still waiting for their confirms go on while the loop sleeps: a slow
        # confirm (the broker's disk) must not hold back the next fire.
        await self._settle_done_in_flight()
        until = min(now_epoch + self._config.sweeper_interval_seconds, self._next_pending_check)
        if earliest is not None:
            until = min(until, earliest - self._lead)
        await self._sleep(until)

    async def _sleep(self, until: float) -> None:
        self._target = until
        delay = until - time.time()
        if delay > 0 and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
        self._target = None

    # --- work ------------------------------------------------------------------------------

    async def dispatch_due(self, buckets: Sequence[int]) -> int:
        """Fire one batch of due index entries and publish it; returns how many occurrences
        were queued."""
        queued = await self._fire(buckets)
        await self._settle_in_flight(0)
        return queued

    async def _fire(self, buckets: Sequence[int]) -> int:
        """Fire one batch of due index entries; their publication goes on in the background
        (at most :data:`MAX_IN_FLIGHT` batches). Returns how many occurrences were queued."""
        reach = self._reach
        until = time.time() + reach
        limit = self._next_batch_limit()
        entries = await self._index.due(buckets, until, limit)
        # A full batch: more may be due. One that was not took all that is: the next look is
        # at the earliest entry (an entry left where it was is not looked at again at once).
        self._busy = len(entries) >= limit
        if not entries:
            return 0
        now = self._clock()
        # Read afresh for every batch (one registry read, a batch holds up to a thousand
        # fires): a fire of a type first declared by a worker that registered just now must
        # not be skipped as having no worker because a cached registry is a second old. (The
        # types declared earlier come from the directory's history, read once.)
        await self._workers.refresh(force=True)
        # Fires due up to ``reach`` from now are committed and sent now: the worker holds each
        # until its due instant. The store takes the horizon as its "due" bound; the plan
        # keeps the real now (misfires, creation time) and each fire's own time.
        horizon = now + timedelta(seconds=reach)

        def planner(job: Job, active: int, _horizon: datetime) -> FirePlan:
            return self._plan(job, active, now, horizon)

        if self._paused_reason is not None:
            # Paused while this iteration was under way (the check at its start passed):
            # nothing is committed after the pause. The entries stay in the index.
            self._busy = False
            return 0
        ids = [e.job_id for e in entries]
        claim = now + self._fire_claim if self._fire_claim else None  # (see ``pending_grace``)
        # The plain one-time jobs the store may fire set-based, as ``planner`` would (not
        # with tracing on: each plan is stamped with its span).
        plain = self._plain_fires(now) if self._stamp is None else None
        result = await self._store.dispatch_due(
            ids, horizon, planner, claim_until=claim, plain=plain
        )
        if self._events is not None:
            self._events.occurrences_created([*result.queued, *result.held, *result.skipped])
        if any(o.jitter_seconds is not None for o in result.held):
            self._pending_hint = True  # the sweep sends them when due: aim it at them
        await self._settle_in_flight(MAX_IN_FLIGHT - 1)
        if result.queued:
            publish = self._publish(result.queued, now, result.batch)
            self._in_flight.append(asyncio.create_task(publish, name="rota-dispatch-publish"))
        if result.displacing and self._displace is not None:
            task = asyncio.create_task(self._displaced(result.displacing), name="rota-displace")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        await self._update_index(entries, result.next_runs)
        self.stats.batches += 1
        self.stats.dispatched += len(result.queued)
        self.stats.skipped += len(result.skipped)
        self.stats.held += len(result.held)
        if self._on_fired is not None:
            self._on_fired(result, now)
        return len(result.queued)

    def _next_batch_limit(self) -> int:
        """The size of the batch about to be read: twice the last one's after a full one, up
        to ``dispatch_batch_size``; else (an idle spell, or all that was due taken)
        :data:`FIRST_BATCH`."""
        full = self._config.dispatch_batch_size
        if self._busy:
            self._batch_limit = min(self._batch_limit * 2, full)
        else:
            self._batch_limit = min(FIRST_BATCH, full)
        return self._batch_limit

    async def dispatch_pending(self) -> int:
        """Publish occurrences that are Queued, due and never handed to the broker.

        Each batch is claimed in the store first, so that several servers sweeping at once
        never publish the same occurrence twice; a batch whose publishing fails is released
        for the next sweep. Stops between batches when the dispatcher is stopping or paused
        (a pause that comes while an iteration is under way). The next
        sweep is due at the earliest pending due time (a retry's) if that comes before the
        sweep interval ends, so a retry is published when it is due, not up to an interval
        later."""
        self._pending_hint = False
        self._next_pending_check = time.time() + self._config.sweeper_interval_seconds
        total = 0
        batch = self._config.dispatch_batch_size
        while not self._stopping.is_set() and self._paused_reason is None:
            now = self._clock()
            claim_until = now + self._claim_time
            pending = await self._store.claim_undispatched(now, batch, claim_until=claim_until)
            if not pending:
                break
            await self._publish_claimed(pending, now, claim_until)
            total += len(pending)
            self.stats.republished += len(pending)
            if len(pending) < batch:
                break
        if self._paused_reason is not None:
            self._pending_hint = True  # swept again as soon as the dispatcher resumes
        elif not self._stopping.is_set():
            await self._aim_next_sweep()
        return total

    async def _aim_next_sweep(self) -> None:
        """Bring the next sweep forward to the earliest occurrence that becomes due before it
        (a retry waiting for its due time, a jittered fire, a claim that runs out: a server
        that died before publishing what it claimed)."""
        now = self._clock()
        interval = timedelta(seconds=self._config.sweeper_interval_seconds)
        upcoming = await self._store.undispatched(now + interval, 1)
        if upcoming:
            # Due already but not claimed (another server is claiming it): look again shortly.
            delay = max((upcoming[0].due_at - now).total_seconds(), MIN_SWEEP_GAP)
            self._next_pending_check = min(self._next_pending_check, time.time() + delay)

    async def _publish_claimed(
        self, claimed: Sequence[Occurrence], now: datetime, claim_until: datetime
    ) -> None:
        await self._workers.refresh()
        messages, sent, unrouted = self._addressed(claimed, now)
        try:
            await self._broker.publish_jobs(messages, envelopes=self._workers.envelopes(messages))
        except BaseException:
            # Give them back at once; if even that fails, the claim runs out by itself.
            with contextlib.suppress(RotaError, OSError):
                await asyncio.shield(
                    self._store.finish_claim(claimed, claim_until, dispatched_at=None)
                )
            raise
        await self._store.finish_claim(sent, claim_until, dispatched_at=now)
        if unrouted:  # no group to send them to: they wait for a worker, swept again
            await self._store.finish_claim(unrouted, claim_until, dispatched_at=None)

    async def publish_addressed(self, occurrences: Sequence[Occurrence], now: datetime) -> None:
        """Send occurrences already marked dispatched (sent again after an edit of their job),
        each to the one group that is to run it; one that no group can take now is handed
        back to the sweep."""
        await self._workers.refresh()
        messages, _sent, unrouted = self._addressed(occurrences, now)
        await self._broker.publish_jobs(messages, envelopes=self._workers.envelopes(messages))
        if unrouted:
            await self._store.undispatch(unrouted)

    def _addressed(
        self, occurrences: Sequence[Occurrence], now: datetime
    ) -> tuple[list[JobMessage], list[Occurrence], list[Occurrence]]:
        """Each occurrence's message addressed to the one worker group that is to run it
        (:meth:`WorkerDirectory.route`); the occurrences sent, and those no group can take
        now."""
        route = self._workers.route
        messages: list[JobMessage] = []
        sent: list[Occurrence] = []
        unrouted: list[Occurrence] = []
        for o in occurrences:
            group = route(o.job_type, o.worker_id, o.id)
            if group is None:
                unrouted.append(o)
            else:
                messages.append(sealed_message(self._seal, to_message(o, now, group)))
                sent.append(o)
        if unrouted:
            log.warning(
                "%d occurrence(s) wait undispatched: no worker group runs their job type now",
                len(unrouted),
                extra={"action": "unrouted", "job_type": unrouted[0].job_type},
            )
        return messages, sent, unrouted

    async def _settle_done_in_flight(self) -> None:
        """Settle the publications that have ended (oldest first, up to the first still
        running); a failed one raises here."""
        while self._in_flight and self._in_flight[0].done():
            await self._settle_in_flight(len(self._in_flight) - 1)

    async def _displaced(self, displacing: dict[UUID, UUID]) -> None:
        assert self._displace is not None
        try:
            await self._displace(displacing)
        except Exception:  # the older ones run on; the newer one runs anyway
            log.exception("cancelling the occurrences a CancelOther fire replaces failed")

    async def _settle_in_flight(self, keep: int, *, quiet: bool = False) -> None:
        """Wait until at most ``keep`` batches are being published; a failed publication
        raises here (the occurrences stay undispatched for the sweep), unless ``quiet``."""
        while len(self._in_flight) > keep:
            task = self._in_flight.popleft()
            try:
                await task
            except Exception as exc:
                if not quiet:
                    raise
                log.warning("publishing a dispatched batch failed: %s", exc)

    def _plain_fires(self, now: datetime) -> PlainFires:
        """What :meth:`_plan` decides for a plain one-time job, as facts for the store."""
        declared, defaults = self._workers.plain_fire_facts()
        return PlainFires(
            now=now,
            late_before=now - self._plan_settings.misfire_threshold,
            default_max_retries=self._plan_settings.default_max_retries,
            declared=declared,
            type_defaults=defaults,
            mark_skip=self._mark_on_commit,
        )

    def _plan(self, job: Job, active: int, now: datetime, horizon: datetime) -> FirePlan:
        job = with_type_defaults(job, self._workers.type_description(job.job_type))
        mark = self._mark_on_commit and job.concurrency_policy is ConcurrencyPolicy.SKIP
        plan = plan_fires(
            job,
            active,
            now,
            self._plan_settings,
            # ``no_worker`` only for a type no worker ever declared (of the job's group, if
            # it names one): a type whose workers are merely down waits for them.
            has_worker=self._workers.declared(job.job_type, job.worker_id),
            dispatched_at=now if mark else None,
            horizon=horizon,
            rng=self._rng.random,
        )
        return plan if self._stamp is None else self._stamp(plan)

    async def _publish(
        self, occurrences: Sequence[Occurrence], now: datetime, batch: UUID | None = None
    ) -> None:
        """Send a fired batch; then mark what was not inserted dispatched, and end the
        store's record of the batch (``batch``: not ended, the sweep sends it again)."""
        if not occurrences:
            return
        messages, sent, unrouted = self._addressed(occurrences, now)
        await self._broker.publish_jobs(messages, envelopes=self._workers.envelopes(messages))
        unmarked = [o for o in sent if o.dispatched_at is None]
        marked = [o for o in unrouted if o.dispatched_at is not None]
        if marked:  # marked in the dispatch transaction: unmark for the sweep
            await self._store.undispatch(marked)
        if unmarked or batch is not None:
            await self._store.mark_dispatched(unmarked, now, batch=batch)

    async def _update_index(
        self, entries: Sequence[IndexEntry], next_runs: dict[UUID, DueEntry | None]
    ) -> None:
        at = time.time()
        horizon = at + self._config.hot_window_seconds
        upserts: list[IndexEntry] = []
        removals: list[tuple[int, UUID]] = []
        for entry in entries:
            if entry.job_id not in next_runs:
                # Locked by another transaction: kept, and tried again shortly. (Dropped, it
                # waited for the loader's next sync: up to its interval late.) Entries are
                # read ``lead`` before their time: so is this one, the retry's time past it
                # (at the retry's time itself, it was read back at once while locked).
                retry = at + LOCKED_RETRY_SECONDS + self._lead
                upserts.append(IndexEntry(entry.job_id, entry.bucket, retry))
                continue
            nxt = next_runs[entry.job_id]
            due = None if nxt is None else nxt.due_at.timestamp()
            if nxt is not None and due is not None and due <= horizon:
                if due > at and (
                    abs(due - entry.due) < DEFERRED_TOLERANCE
                    or abs(due + self._lead - entry.due) < DEFERRED_TOLERANCE
                ):
                    # Fired ahead but left for its due time (a Skip-policy fire whose
                    # overlap is decided then): entered so that it is fired at its due time
                    # (and kept there when a fire within its reach looked at it early).
                    due += self._lead
                upserts.append(IndexEntry(entry.job_id, nxt.bucket, due))
            else:
                # Gone, finished, or beyond the window: the loader puts it back when it comes
                # due.
                removals.append((entry.bucket, entry.job_id))
        if removals:
            await self._index.remove(removals)
        if upserts:
            await self._index.upsert(upserts)
