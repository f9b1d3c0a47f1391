"""The executor's claim of each attempt across its worker group (rota.worker.claims): a copy
delivered to another instance is acknowledged and not run; a lost or unreachable claim memory
keeps redelivered copies from running."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from msgspec.structs import replace

import rota
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.models import UNKNOWN_HOLDER, JobMessage, OccurrenceStatus
from rota.core.ports import Broker
from rota.core.records import ClaimBatch, ClaimOutcome, ClaimRequest
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker import hold as hold_module
from rota.worker.claims import CLAIM_EPOCH, AttemptClaims
from rota.worker.executor import Executor
from tests.executors import make_executor
from tests.helpers import eventually
from tests.unit import executor_harness
from tests.unit.executor_harness import NOW, WORKER, Harness, Observer
from tests.worker_broker import WAIT, FlakyBroker

S = OccurrenceStatus


# the shared fixtures, found by pytest under these names
broker = executor_harness.broker
observer = executor_harness.observer
harness = executor_harness.harness

TTL = 3600.0

runs: Counter[tuple[UUID, int]] = Counter()


@rota.job("claimed")
async def claimed(ctx: rota.JobContext) -> str:
    runs[ctx.occurrence_id, ctx.attempt] += 1
    return "ran"


def _executor(
    via: Broker,
    definition: AnyJobDefinition,
    claims: AttemptClaims,
    *,
    worker_id: str = WORKER,
    concurrency: int = 2,
    hold_capacity: int = 0,
    heartbeat_interval: float = 0.05,
) -> Executor:
    return make_executor(
        via,
        JobRegistry([definition]),
        worker_id=worker_id,
        instance_id=claims.instance_id,
        concurrency=concurrency,
        hold_capacity=hold_capacity,
        sync_threads=1,
        flush_interval=0.005,
        heartbeat_interval=heartbeat_interval,
        claims=claims,
    )


def _message(job_type: str, **fields: Any) -> JobMessage:
    return JobMessage(
        occurrence_id=new_id(),
        job_id=new_id(),
        job_type=job_type,
        job_data=None,
        scheduled_for=NOW,
        timestamp=NOW,
        **{"worker_id": WORKER, **fields},
    )


async def _redelivered(bus: InProcessBroker, message: JobMessage) -> None:
    """Publish ``message`` and make its delivery a redelivery (taken and given back, as a
    consumer whose channel died does)."""
    await bus.declare_worker_group(WORKER, [message.job_type])
    await bus.publish_jobs([message])
    consumer = bus.consume_jobs(WORKER, 1)
    delivery = await anext(consumer)
    await delivery.reject(requeue=True)
    await consumer.aclose()


async def test_two_instances_given_the_same_attempt_run_it_once(
    harness: Harness, observer: Observer
) -> None:
    """Two instances each get a copy of the same message at once (sent to two groups' queues,
    the in-process stand-in for a copy reaching another instance): one claims and runs it, the
    other acknowledges its copy without running it."""
    runs.clear()
    coordination = MemoryCoordination()
    a = _executor(harness.broker, claimed, AttemptClaims(coordination, "a", ttl=TTL))
    b = _executor(
        harness.broker, claimed, AttemptClaims(coordination, "b", ttl=TTL), worker_id="twin"
    )
    harness.executors += [a, b]
    for executor in (a, b):
        await executor.start()
    messages = [await harness.publish("claimed") for _ in range(20)]
    await harness.broker.publish_jobs([replace(m, worker_id="twin") for m in messages])
    for message in messages:
        await observer.wait_final(message.occurrence_id)
    await eventually(
        lambda: a.stats.claimed_elsewhere + b.stats.claimed_elsewhere == 20, WAIT, "copies skipped"
    )
    assert runs == {(m.occurrence_id, 1): 1 for m in messages}
    for message in messages:  # not redelivered copies: nothing reported for them
        assert [r.status for r in observer.of(message.occurrence_id)] == [S.COMPLETED]
    depths = await harness.broker.queue_depths()
    assert depths["rota.jobs.test-worker"] == depths["rota.jobs.twin"] == 0


async def test_a_redelivered_copy_claimed_elsewhere_reports_its_holder(
    harness: Harness, observer: Observer
) -> None:
    """The holder may have died before its Running report went out: the copy is reported
    Running for the holder as of its claim, so zombie detection sees it; it is not run."""
    runs.clear()
    coordination = MemoryCoordination()
    message = _message("claimed")
    held = await coordination.claim_attempts("gone", [ClaimRequest(message.occurrence_id, 1)], TTL)
    await _redelivered(harness.broker, message)
    flaky = FlakyBroker(harness.broker)
    executor = _executor(flaky, claimed, AttemptClaims(coordination, "b", ttl=TTL))
    harness.executors.append(executor)
    await executor.start()
    await observer.wait_status(message.occurrence_id, S.RUNNING)
    await eventually(lambda: flaky.acked(message.occurrence_id), WAIT, "the copy acknowledged")
    (record,) = observer.of(message.occurrence_id)
    assert (record.instance_id, record.attempt) == ("gone", 1)
    assert record.timestamp == datetime.fromtimestamp(held.claims[0].claimed_at, UTC)
    assert executor.stats.claimed_elsewhere == 1
    assert runs == {}


async def test_its_own_claim_is_no_duplicate(harness: Harness, observer: Observer) -> None:
    """An instance that claimed the attempt but did not run it (its claim's reply lost and the
    call retried, say) runs it."""
    runs.clear()
    coordination = MemoryCoordination()
    message = _message("claimed")
    await coordination.claim_attempts("a", [ClaimRequest(message.occurrence_id, 1)], TTL)
    executor = _executor(harness.broker, claimed, AttemptClaims(coordination, "a", ttl=TTL))
    harness.executors.append(executor)
    await executor.start()
    await harness.broker.publish_jobs([message])
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert runs == {(message.occurrence_id, 1): 1}


async def test_a_new_attempt_is_claimed_anew(harness: Harness, observer: Observer) -> None:
    """A retry or a zombie's new attempt is another key: its holder may be anyone."""
    runs.clear()
    coordination = MemoryCoordination()
    message = _message("claimed", retry_count=1)
    await coordination.claim_attempts("gone", [ClaimRequest(message.occurrence_id, 1)], TTL)
    executor = _executor(harness.broker, claimed, AttemptClaims(coordination, "b", ttl=TTL))
    harness.executors.append(executor)
    await executor.start()
    await harness.broker.publish_jobs([message])
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert runs == {(message.occurrence_id, 2): 1}


async def test_after_a_loss_of_the_claim_memory_a_redelivered_copy_does_not_run(
    harness: Harness, observer: Observer, tmp_path: Path
) -> None:
    """A worker that knew an older epoch (kept in its local store) notices the loss: a
    redelivered message is reported Running by an unknown holder and not run (zombie detection
    gives it a new attempt); a first delivery runs; the new epoch is kept."""
    runs.clear()
    coordination = MemoryCoordination()
    store = await harness.store(tmp_path)
    await store.set_meta(CLAIM_EPOCH, "an-older-token")
    flaky = FlakyBroker(harness.broker)
    claims = AttemptClaims(coordination, "b", ttl=TTL, store=store)
    executor = _executor(flaky, claimed, claims)
    harness.executors.append(executor)
    copy = _message("claimed")
    await _redelivered(harness.broker, copy)
    await executor.start()
    await observer.wait_status(copy.occurrence_id, S.RUNNING)
    await eventually(lambda: flaky.acked(copy.occurrence_id), WAIT, "the copy acknowledged")
    (record,) = observer.of(copy.occurrence_id)
    # for the unknown holder: the store settles it (docs/reliability.md, "One run per attempt")
    assert (record.status, record.instance_id) == (S.RUNNING, UNKNOWN_HOLDER)
    first = await harness.publish("claimed")
    assert (await observer.wait_final(first.occurrence_id)).status is S.COMPLETED
    assert runs == {(first.occurrence_id, 1): 1}
    assert claims.losses == 1
    assert await store.get_meta(CLAIM_EPOCH) == claims.known_epoch != "an-older-token"


class Unreachable(MemoryCoordination):
    """Claims fail (``down``) or never answer (``hang``) until healed."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.hang = False

    async def claim_attempts(
        self,
        owner: str,
        requests: Sequence[ClaimRequest],
        ttl: float,
        *,
        known_epoch: str | None = None,
    ) -> ClaimBatch:
        if self.hang:
            await asyncio.Event().wait()
        if self.down:
            raise BackendUnavailableError("Redis unavailable (test)")
        return await super().claim_attempts(owner, requests, ttl, known_epoch=known_epoch)


async def test_an_unreachable_claim_memory_runs_first_deliveries_only(
    harness: Harness, observer: Observer
) -> None:
    """Without an answer (an error, or none within the timeout) a first delivery runs and is
    claimed once the memory answers again; a redelivered one is not run."""
    runs.clear()
    coordination = Unreachable()
    coordination.hang = True
    flaky = FlakyBroker(harness.broker)
    claims = AttemptClaims(coordination, "a", ttl=TTL, timeout=0.05)
    executor = _executor(flaky, claimed, claims)
    harness.executors.append(executor)
    copy = _message("claimed")
    await _redelivered(harness.broker, copy)
    await executor.start()
    first = await harness.publish("claimed")
    assert (await observer.wait_final(first.occurrence_id)).status is S.COMPLETED
    await eventually(lambda: flaky.acked(copy.occurrence_id), WAIT, "the copy acknowledged")
    # Its report went out before the ack; the observer reads the status queue on its own time.
    await observer.wait_status(copy.occurrence_id, S.RUNNING)
    reported = [(r.status, r.instance_id) for r in observer.of(copy.occurrence_id)]
    assert reported == [(S.RUNNING, UNKNOWN_HOLDER)]
    assert runs == {(first.occurrence_id, 1): 1}
    assert claims.unavailable >= 1

    assert claims.unconfirmed == 1
    coordination.hang = coordination.down = False  # back: the first run's claim is written
    await eventually(lambda: claims.unconfirmed == 0, WAIT, "the claim written by the renewal")
    request = ClaimRequest(first.occurrence_id, 1)
    other = await coordination.claim_attempts("probe", [request], TTL)
    assert (other.claims[0].outcome, other.claims[0].owner) == (ClaimOutcome.TAKEN, "a")
    assert claims.conflicts == 0


async def test_claims_of_one_burst_go_in_one_call() -> None:
    coordination = MemoryCoordination()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    messages = [_message("claimed") for _ in range(20)]
    verdicts = await asyncio.gather(*(claims.claim(m, careful=False) for m in messages))
    assert [v.outcome for v in verdicts] == ["claimed"] * 20
    assert claims.calls == 1
    again = await asyncio.gather(*(claims.claim(m, careful=True) for m in messages[:3]))
    assert [(v.run, v.outcome) for v in again] == [(True, "owned")] * 3
    assert claims.calls == 2


async def test_claim_many_answers_as_claim_does_one_call_a_batch() -> None:
    coordination = MemoryCoordination()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    messages = [_message("claimed") for _ in range(501)]
    verdicts = await claims.claim_many([(m, False) for m in messages])
    assert [(v.run, v.outcome, v.owner) for v in verdicts] == [(True, "claimed", "a")] * 501
    assert claims.calls == 2  # 500 a call
    other = AttemptClaims(coordination, "b", ttl=TTL)
    mixed = await other.claim_many([(messages[0], False), (_message("claimed"), True)])
    assert [(v.run, v.outcome, v.owner) for v in mixed] == [
        (False, "taken", "a"),
        (True, "claimed", "b"),
    ]
    down = AttemptClaims(Unreachable(), "c", ttl=TTL, timeout=0.05)
    blind = await down.claim_many([(_message("claimed"), False), (_message("claimed"), True)])
    assert [(v.run, v.outcome) for v in blind] == [(True, "unavailable"), (False, "unavailable")]
    assert down.unconfirmed == 1  # the first delivery runs, its claim written later


async def test_deliveries_due_now_are_claimed_together_before_they_wait_for_a_slot(
    harness: Harness, observer: Observer
) -> None:
    """A burst due now is claimed in one call when it arrives, not one call per slot freed:
    with two slots, twenty deliveries cost one or two claim calls, and each runs once. (No
    heartbeat during the test: its renewal would be a call of its own.)"""
    runs.clear()
    coordination = Recording()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    messages = [await harness.publish("claimed") for _ in range(20)]
    executor = _executor(
        harness.broker, claimed, claims, concurrency=2, hold_capacity=30, heartbeat_interval=60
    )
    harness.executors.append(executor)
    await executor.start()
    for message in messages:
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert sorted(coordination.asked) == sorted(m.occurrence_id for m in messages)
    assert claims.calls <= 2
    assert all(runs[m.occurrence_id, 1] == 1 for m in messages)


# --- claimed ahead: a held delivery (sent before its due time) ------------------------------


class Recording(MemoryCoordination):
    """The in-memory claim memory, noting the attempts claimed (renewals of nothing aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[UUID] = []

    async def claim_attempts(
        self, owner: str, requests: Sequence[ClaimRequest], ttl: float, **kw: Any
    ) -> ClaimBatch:
        self.asked += [r.occurrence_id for r in requests]
        return await super().claim_attempts(owner, requests, ttl, **kw)


async def test_a_held_delivery_is_claimed_while_it_waits_and_starts_at_its_due_instant(
    harness: Harness, observer: Observer
) -> None:
    runs.clear()
    coordination = Recording()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    executor = _executor(harness.broker, claimed, claims)
    harness.executors.append(executor)
    await executor.start()
    due = datetime.now(UTC) + timedelta(seconds=1)
    message = await harness.publish("claimed", scheduled_for=due)
    oid = message.occurrence_id
    await eventually(lambda: oid in coordination.asked, WAIT, "the claim made while held")
    assert datetime.now(UTC) < due
    assert executor.early == 1
    other = await coordination.claim_attempts(
        "b", [ClaimRequest(message.occurrence_id, message.attempt, False)], TTL
    )
    assert (other.claims[0].outcome, other.claims[0].owner) == (ClaimOutcome.TAKEN, "a")
    assert other.claims[0].claimed_at < due.timestamp()
    final = await observer.wait_final(message.occurrence_id)
    assert final.status is S.COMPLETED
    running = [r for r in observer.of(message.occurrence_id) if r.status is S.RUNNING]
    # a short run's Running report is folded into its final one, which carries its time
    started = running[0].timestamp if running else final.started_at
    assert started is not None
    assert started >= due  # started at its due instant, not before
    assert runs[message.occurrence_id, 1] == 1


async def test_the_claims_made_ahead_are_given_up_when_held_deliveries_go_back_at_stop(
    harness: Harness, observer: Observer
) -> None:
    """Stopped before their due instant, the worker gives its held deliveries back to the
    broker and gives up their claims: the instance they go to next claims and runs them at
    once, instead of finding them taken by a worker that is gone."""
    coordination = Recording()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    executor = _executor(harness.broker, claimed, claims)
    await executor.start()
    due = datetime.now(UTC) + timedelta(seconds=60)
    messages = [await harness.publish("claimed", scheduled_for=due) for _ in range(2)]
    await eventually(lambda: executor.early == 2, WAIT, "both held (the prefetch)")
    ids = {m.occurrence_id for m in messages}
    await eventually(lambda: ids <= set(coordination.asked), WAIT, "their claims made")
    await executor.stop(0)
    assert executor.stats.handed_back == 2
    requests = [ClaimRequest(m.occurrence_id, m.attempt, False) for m in messages]
    after = await coordination.claim_attempts("b", requests, TTL)
    assert [c.outcome for c in after.claims] == [ClaimOutcome.CLAIMED] * 2
    assert observer.status == []  # nothing reported: they run elsewhere


async def test_a_held_copy_superseded_by_an_edit_is_dropped_and_its_claim_given_up(
    harness: Harness, observer: Observer
) -> None:
    """The job was edited before the due time and its message sent again (a newer job
    version): the instance holding the old copy drops it without a report and gives up its
    claim, so whichever instance holds the new copy claims and runs it; an old copy that
    arrives later is dropped on arrival."""
    runs.clear()
    coordination = Recording()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    executor = _executor(harness.broker, claimed, claims)
    harness.executors.append(executor)
    await executor.start()
    due = datetime.now(UTC) + timedelta(seconds=60)
    old = await harness.publish("claimed", scheduled_for=due, job_version=1)
    oid = old.occurrence_id
    await eventually(lambda: oid in coordination.asked, WAIT, "the old copy claimed ahead")
    executor.supersede(oid, 2)
    assert executor.stats.superseded == 1
    assert executor.early == 0
    request = ClaimRequest(oid, old.attempt, False)

    async def given_up() -> bool:
        batch = await coordination.claim_attempts("b", [request], TTL)
        return batch.claims[0].outcome is ClaimOutcome.CLAIMED

    await eventually(given_up, WAIT, "the claim given up (another instance claims it)")
    await coordination.release_attempts("b", [(oid, old.attempt)])
    await harness.broker.publish_jobs([old])  # an old copy arriving late: dropped on arrival
    await eventually(lambda: executor.stats.superseded == 2, WAIT, "the late old copy dropped")
    assert executor.early == 0
    assert observer.status == []  # nothing reported for the dropped copies
    soon = datetime.now(UTC) + timedelta(seconds=0.3)
    new = await harness.publish("claimed", scheduled_for=soon, job_version=2, occurrence_id=oid)
    assert (await observer.wait_final(new.occurrence_id)).status is S.COMPLETED
    assert runs == {(oid, 1): 1}


async def test_a_held_delivery_whose_channel_died_has_its_claim_given_up_long_before_due(
    harness: Harness, observer: Observer
) -> None:
    """The broker connection is lost while a delivery is held: the broker delivers it again,
    maybe to another instance, which must find the claim made ahead given up within a
    heartbeat, not at the due time."""
    coordination = Recording()
    claims = AttemptClaims(coordination, "a", ttl=TTL)
    flaky = FlakyBroker(harness.broker)
    executor = _executor(flaky, claimed, claims)
    harness.executors.append(executor)
    await executor.start()
    due = datetime.now(UTC) + timedelta(seconds=60)
    message = await harness.publish("claimed", scheduled_for=due)
    oid = message.occurrence_id
    await eventually(lambda: oid in coordination.asked, WAIT, "the claim made ahead")
    flaky.dead.add(oid)
    await eventually(lambda: executor.early == 0, WAIT, "the dead delivery dropped")
    assert executor.stats.dropped_dead == 1
    request = ClaimRequest(oid, message.attempt, False)

    async def given_up() -> bool:
        batch = await coordination.claim_attempts("b", [request], TTL)
        return batch.claims[0].outcome is ClaimOutcome.CLAIMED

    await eventually(given_up, WAIT, "the claim given up")
    assert datetime.now(UTC) < due
    assert observer.status == []


# --- a group due together: readied ahead, started in one loop --------------------------------


@pytest.fixture
def ready_well_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups readied half a second before their instant, not 10 ms: a loaded machine can run
    the hold's timer later than 10 ms ahead, and a group whose timer comes after its instant is
    started one by one, never readied (what these tests are about)."""
    monkeypatch.setattr(hold_module, "READY", 0.5)


@pytest.mark.usefixtures("ready_well_ahead")
async def test_a_group_due_together_starts_in_one_loop_at_its_instant(
    harness: Harness, observer: Observer
) -> None:
    """Twenty deliveries due at the same instant, claimed while held: each is readied ahead
    and started by the flow's one loop (none by the one-by-one path), at or after the instant,
    each once."""
    runs.clear()
    claims = AttemptClaims(Recording(), "a", ttl=TTL)
    executor = _executor(harness.broker, claimed, claims, concurrency=20, hold_capacity=20)
    harness.executors.append(executor)
    await executor.start()
    in_one_loop: list[int] = []
    start_ready = executor._intake._flow.start_ready

    def counting(entries: Any, make: Any, clock: Any) -> list[Any]:
        rest = start_ready(entries, make, clock)
        in_one_loop.append(len(entries) - len(rest))
        return rest

    executor._intake._flow.start_ready = counting  # type: ignore[method-assign]
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    messages = [await harness.publish("claimed", scheduled_for=due) for _ in range(20)]
    finals = [await observer.wait_final(m.occurrence_id) for m in messages]
    assert [f.status for f in finals] == [S.COMPLETED] * 20
    assert in_one_loop == [20]
    for final in finals:
        assert final.started_at is not None
        assert final.started_at >= due
    assert sorted(runs.values()) == [1] * 20
    assert executor.early == 0


@pytest.mark.usefixtures("ready_well_ahead")
async def test_a_delivery_cancelled_after_its_group_was_readied_does_not_run(
    harness: Harness, observer: Observer
) -> None:
    """The cancel comes right after the group was readied (from within the hold's call, so
    before its due instant whatever the machine's load): it is reported Cancelled with the
    reason given and not run; the other one of the group runs."""
    runs.clear()
    claims = AttemptClaims(Recording(), "a", ttl=TTL)
    executor = _executor(harness.broker, claimed, claims)
    harness.executors.append(executor)
    await executor.start()
    ready = executor._intake._ready
    cancelled_ids: list[UUID] = []

    def then_cancel(deliveries: Any) -> list[object]:
        tokens = ready(deliveries)
        assert all(token is not None for token in tokens)  # both were readied
        for oid in cancelled_ids:
            assert executor.cancel(oid, "changed my mind")
        return tokens

    executor._intake._hold._ready = then_cancel
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    kept = await harness.publish("claimed", scheduled_for=due)
    cancelled = await harness.publish("claimed", scheduled_for=due)
    cancelled_ids.append(cancelled.occurrence_id)
    final = await observer.wait_final(cancelled.occurrence_id)
    assert (final.status, final.exception) == (S.CANCELLED, "changed my mind")
    assert (await observer.wait_final(kept.occurrence_id)).status is S.COMPLETED
    assert runs == {(kept.occurrence_id, 1): 1}


@rota.job("blocking")
async def blocking(ctx: rota.JobContext) -> None:
    started_order.append(ctx.occurrence_id)
    await release_blocking.wait()


started_order: list[UUID] = []
release_blocking = asyncio.Event()


async def test_a_group_larger_than_the_free_slots_starts_its_highest_priorities(
    harness: Harness, observer: Observer
) -> None:
    """Two slots, four deliveries due together, the two low-priority ones held first: the
    two high-priority ones take the slots; the others start as those end."""
    started_order.clear()
    release_blocking.clear()
    claims = AttemptClaims(Recording(), "a", ttl=TTL)
    executor = _executor(harness.broker, blocking, claims, hold_capacity=4)
    harness.executors.append(executor)
    await executor.start()
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    low = [await harness.publish("blocking", scheduled_for=due, priority=0) for _ in range(2)]
    high = [await harness.publish("blocking", scheduled_for=due, priority=4) for _ in range(2)]
    await eventually(lambda: len(started_order) == 2, WAIT, "two started")
    assert set(started_order) == {m.occurrence_id for m in high}
    release_blocking.set()
    for m in low + high:
        assert (await observer.wait_final(m.occurrence_id)).status is S.COMPLETED
    assert set(started_order[2:]) == {m.occurrence_id for m in low}
