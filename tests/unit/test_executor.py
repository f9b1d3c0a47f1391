"""The executor on the in-process broker: what it reports for every kind of outcome."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
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
from rota.core import retry as retry_policy
from rota.core.errors import BackendUnavailableError, JobCancelledError, ValidationError
from rota.core.ids import new_id
from rota.core.models import (
    FailureType,
    JobMessage,
    OccurrenceStatus,
    StatusRecord,
)
from rota.core.wire import encode_status_records
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker import finals as finals_module
from rota.worker.executor import Executor
from rota.worker.localstore import LocalStore
from rota.worker.presence import WorkerPresence
from rota.worker.run import MAX_EXCEPTION_BYTES, format_exception, to_jsonable
from tests.executors import make_executor
from tests.helpers import eventually
from tests.priority_order import held_deliveries_start_by_priority
from tests.unit import executor_harness
from tests.unit.executor_harness import DEADLINE, NOW, WORKER, Harness, Observer
from tests.worker_broker import WAIT, FlakyBroker

S = OccurrenceStatus

# the shared fixtures, found by pytest under these names
broker = executor_harness.broker
observer = executor_harness.observer
harness = executor_harness.harness


class Report(rota.JobData):
    kind: str
    pages: int = 1


@pytest.fixture
def flaky(broker: InProcessBroker) -> FlakyBroker:
    return FlakyBroker(broker)


# --- handlers -----------------------------------------------------------------------------------


@rota.job("async-typed")
async def async_typed(ctx: rota.JobContext, data: Report) -> dict[str, Any]:
    return {"kind": data.kind, "pages": data.pages, "attempt": ctx.attempt}


@rota.job("async-plain")
async def async_plain(ctx: rota.JobContext) -> None:
    return None


@rota.job("sync-typed")
def sync_typed(ctx: rota.JobContext, data: Report) -> str:
    return f"{data.kind}:{threading.current_thread().name}"


@rota.job("sync-plain")
def sync_plain(ctx: rota.JobContext) -> None:
    return None


@rota.job("odd-result")
async def odd_result(ctx: rota.JobContext) -> object:
    return object()


@rota.job("boom", retry_delay=3)
async def boom(ctx: rota.JobContext) -> None:
    raise ValueError("boom")


@rota.job("boom-default")
def boom_default(ctx: rota.JobContext) -> None:
    raise RuntimeError("sync boom")


@rota.job("permanent")
async def permanent(ctx: rota.JobContext) -> None:
    raise rota.PermanentError("bad input, never retry")


def _retry_in_a_minute(ctx: rota.JobContext, exc: BaseException) -> datetime | None:
    return NOW + timedelta(minutes=1) if isinstance(exc, KeyError) else None


@rota.job("hooked", should_retry=_retry_in_a_minute)
async def hooked(ctx: rota.JobContext, data: dict[str, Any]) -> None:
    raise KeyError(data["key"]) if data["key"] else ValueError("no")


@rota.job("logging")
async def logging_job(ctx: rota.JobContext) -> str:
    ctx.log.info("hello %s", "world", extra={"step": 1})
    ctx.log.warning("careful")
    return "logged"


@rota.job("logging-sync")
def logging_sync(ctx: rota.JobContext) -> None:
    ctx.log.error("from a thread")


# --- outcomes -----------------------------------------------------------------------------------


async def test_async_handler_with_typed_data_completes(
    harness: Harness, observer: Observer
) -> None:
    await harness.executor(async_typed)
    message = await harness.publish("async-typed", {"kind": "sales", "pages": 3}, retry_count=1)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.COMPLETED
    assert record.result == {"kind": "sales", "pages": 3, "attempt": 2}
    assert record.attempt == 2
    assert record.instance_id == "test-instance"
    assert record.duration_ms is not None
    assert record.duration_ms >= 0
    assert record.exception is None
    assert record.timestamp.tzinfo is not None


async def test_sync_and_plain_handlers_complete(harness: Harness, observer: Observer) -> None:
    await harness.executor(async_plain, sync_typed, sync_plain)
    plain = await harness.publish("async-plain")
    typed = await harness.publish("sync-typed", {"kind": "k"})
    sync = await harness.publish("sync-plain", {"ignored": True})
    for message in (plain, typed, sync):
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    typed_record = observer.final(typed.occurrence_id)
    assert typed_record is not None
    assert typed_record.result.startswith("k:rota-")  # ran in the executor's thread pool
    assert observer.final(plain.occurrence_id).result is None  # type: ignore[union-attr]


async def test_non_json_result_is_converted_with_str(harness: Harness, observer: Observer) -> None:
    await harness.executor(odd_result)
    message = await harness.publish("odd-result")
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.COMPLETED
    assert isinstance(record.result, str)
    assert record.result.startswith("<object object")


def test_to_jsonable() -> None:
    assert to_jsonable(Report(kind="x")) == {"kind": "x", "pages": 1}
    assert to_jsonable({"at": NOW, 1: (2, 3)}) == {"at": "2026-03-01T12:00:00+00:00", "1": [2, 3]}
    assert to_jsonable({1, 2}) == str({1, 2})


async def test_invalid_data_fails_without_running(harness: Harness, observer: Observer) -> None:
    await harness.executor(async_typed)
    message = await harness.publish("async-typed", {"pages": "many"}, max_retries=3)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.FAILED
    assert record.failure_type is FailureType.INVALID_DATA
    assert record.retry_at is None
    assert "kind" in (record.exception or "")
    assert [r.status for r in observer.of(message.occurrence_id)] == [S.FAILED]


async def test_unknown_job_type_fails(harness: Harness, observer: Observer) -> None:
    await harness.executor(async_plain, extra_types=["ghost"])
    message = await harness.publish("ghost", max_retries=3)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.FAILED
    assert record.failure_type is FailureType.UNKNOWN_JOB_TYPE
    assert record.retry_at is None
    assert "ghost" in (record.exception or "")


async def test_exception_with_attempts_left_reports_retry_time(
    harness: Harness, observer: Observer
) -> None:
    await harness.executor(boom, clock=lambda: NOW)
    first = await harness.publish("boom", retry_count=0, max_retries=5)
    third = await harness.publish("boom", retry_count=2, max_retries=5)
    record = await observer.wait_final(first.occurrence_id)
    assert record.status is S.FAILED
    assert record.retry_at == NOW + timedelta(seconds=3)
    assert record.failure_type is None
    assert (record.exception or "").startswith("ValueError: boom\nTraceback")
    assert "in boom" in (record.exception or "")
    later = await observer.wait_final(third.occurrence_id)
    assert later.retry_at == NOW + timedelta(seconds=12)  # 3 s x 2^2
    assert later.attempt == 3


async def test_default_retry_delay_is_ten_seconds(harness: Harness, observer: Observer) -> None:
    await harness.executor(boom_default, clock=lambda: NOW)
    message = await harness.publish("boom-default", retry_count=1, max_retries=2)
    record = await observer.wait_final(message.occurrence_id)
    assert record.retry_at == NOW + timedelta(seconds=20)
    assert (record.exception or "").startswith("RuntimeError: sync boom")


async def test_no_attempts_left_means_no_retry(harness: Harness, observer: Observer) -> None:
    await harness.executor(boom, clock=lambda: NOW)
    message = await harness.publish("boom", retry_count=2, max_retries=2)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.FAILED
    assert record.retry_at is None
    assert record.failure_type is FailureType.RETRIES_EXHAUSTED


async def test_permanent_error_is_not_retried(harness: Harness, observer: Observer) -> None:
    await harness.executor(permanent)
    message = await harness.publish("permanent", max_retries=5)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.FAILED
    assert record.retry_at is None
    assert record.failure_type is FailureType.PERMANENT
    assert (record.exception or "").startswith("PermanentError: bad input")


async def test_should_retry_hook_overrides_the_policy(harness: Harness, observer: Observer) -> None:
    await harness.executor(hooked, clock=lambda: NOW)
    retried = await harness.publish("hooked", {"key": "k"}, max_retries=0)
    refused = await harness.publish("hooked", {"key": ""}, max_retries=5)
    assert (await observer.wait_final(retried.occurrence_id)).retry_at == NOW + timedelta(minutes=1)
    assert (await observer.wait_final(refused.occurrence_id)).retry_at is None


async def test_the_jobs_retry_delay_wins_over_the_job_types(
    harness: Harness, observer: Observer
) -> None:
    await harness.executor(boom, clock=lambda: NOW)  # the job type says 3 s
    first = await harness.publish("boom", max_retries=5, retry_delay_seconds=0.5)
    second = await harness.publish("boom", retry_count=1, max_retries=5, retry_delay_seconds=0.5)
    assert (await observer.wait_final(first.occurrence_id)).retry_at == NOW + timedelta(seconds=0.5)
    assert (await observer.wait_final(second.occurrence_id)).retry_at == NOW + timedelta(seconds=1)


def _message(retry_count: int, **fields: Any) -> JobMessage:
    return JobMessage(
        occurrence_id=new_id(),
        job_id=new_id(),
        job_type="any",
        job_data=None,
        scheduled_for=NOW,
        timestamp=NOW,
        retry_count=retry_count,
        max_retries=99,
        **{"worker_id": WORKER, **fields},
    )


def _bare_executor(broker: InProcessBroker, **kwargs: Any) -> Executor:
    return make_executor(
        broker,
        JobRegistry([]),
        worker_id=WORKER,
        instance_id="test-instance",
        concurrency=1,
        sync_threads=1,
        flush_interval=0.01,
        **kwargs,
    )


@pytest.mark.parametrize(("retry", "seconds"), [(1, 3.0), (2, 6.0), (3, 12.0), (5, 48.0)])
def test_retry_n_waits_base_times_two_to_the_n_minus_one(
    broker: InProcessBroker, retry: int, seconds: float
) -> None:
    executor = _bare_executor(broker)
    # the attempt that failed is attempt ``retry`` (retry count ``retry - 1``)
    assert executor.retry_delay(boom, _message(retry - 1)) == seconds


def test_retry_delay_without_any_base_is_ten_seconds(broker: InProcessBroker) -> None:
    executor = _bare_executor(broker)
    assert executor.retry_delay(boom_default, _message(0)) == retry_policy.DEFAULT_RETRY_DELAY
    assert executor.retry_delay(boom_default, _message(0, retry_delay_seconds=0.0)) == 0.0


def test_retry_delay_is_capped(broker: InProcessBroker) -> None:
    executor = _bare_executor(broker)
    capped = rota.job("capped", retry_delay=3, max_retry_delay=20)(boom.func)
    assert executor.retry_delay(capped, _message(2)) == 12.0
    assert executor.retry_delay(capped, _message(3)) == 20.0  # 24 s, capped
    assert executor.retry_delay(capped, _message(500)) == 20.0
    assert executor.retry_delay(boom, _message(500)) == retry_policy.MAX_RETRY_DELAY
    huge = _message(70, retry_delay_seconds=1e300)
    assert executor.retry_delay(boom, huge) == retry_policy.MAX_RETRY_DELAY


class _FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(("draw", "seconds"), [(0.0, 6.0), (0.5, 12.0), (0.75, 15.0)])
def test_retry_jitter_varies_the_delay_by_its_fraction(
    broker: InProcessBroker, draw: float, seconds: float
) -> None:
    jittery = rota.job("jittery", retry_delay=3, retry_jitter=0.5)(boom.func)
    executor = _bare_executor(broker, rng=_FixedRandom(draw))
    assert executor.retry_delay(jittery, _message(2)) == pytest.approx(seconds)  # 12 s ± 50 %


def test_retry_jitter_spreads_delays_within_bounds_and_under_the_cap(
    broker: InProcessBroker,
) -> None:
    jittery = rota.job("jittery", retry_delay=4, retry_jitter=0.5, max_retry_delay=5)(boom.func)
    executor = _bare_executor(broker, rng=random.Random(7))
    delays = [executor.retry_delay(jittery, _message(0)) for _ in range(200)]
    assert all(2.0 <= d <= 5.0 for d in delays)
    assert min(delays) < 3.0
    assert delays.count(5.0) > 20  # draws above 5 s are cut to the cap
    assert len(set(delays)) > 100


def test_exception_text_is_bounded() -> None:
    try:
        raise ValueError("x" * 20_000)
    except ValueError as exc:
        text = format_exception(exc)
    assert text.startswith("ValueError: xxx")
    assert len(text.encode()) == MAX_EXCEPTION_BYTES
    assert format_exception(KeyError()) == "KeyError"


# --- timeouts and cancellation -------------------------------------------------------------------


async def test_async_timeout_reports_timed_out(harness: Harness, observer: Observer) -> None:
    @rota.job("slow-async", timeout=0.05)
    async def slow(ctx: rota.JobContext) -> None:
        await asyncio.sleep(30)

    await harness.executor(slow)
    message = await harness.publish("slow-async", max_retries=3)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.TIMED_OUT
    assert record.failure_type is FailureType.TIMED_OUT
    assert record.retry_at is None
    assert "0.05" in (record.exception or "")


async def test_message_timeout_wins_and_sync_handler_sees_cancellation(
    harness: Harness, observer: Observer
) -> None:
    saw_cancel = threading.Event()

    @rota.job("slow-sync", timeout=60)
    def slow(ctx: rota.JobContext) -> None:
        if ctx.cancelled.wait(DEADLINE):
            saw_cancel.set()

    await harness.executor(slow)
    message = await harness.publish("slow-sync", timeout_seconds=0.05)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.TIMED_OUT
    assert await asyncio.to_thread(saw_cancel.wait, DEADLINE)


async def test_worker_default_timeout_applies_when_neither_job_nor_type_sets_one(
    harness: Harness, observer: Observer
) -> None:
    saw_cancel = threading.Event()
    returned = threading.Event()

    @rota.job("no-timeout-sync")
    def unbounded(ctx: rota.JobContext) -> str:
        if ctx.cancelled.wait(DEADLINE):
            saw_cancel.set()
        returned.set()
        return "too late"

    @rota.job("typed-timeout", timeout=30)
    async def bounded_by_type(ctx: rota.JobContext) -> str:
        await asyncio.sleep(0.3)
        return "in time"

    await harness.executor(unbounded, bounded_by_type, async_plain, default_timeout=0.1)
    slow = await harness.publish("no-timeout-sync", max_retries=3)
    record = await observer.wait_final(slow.occurrence_id)
    assert record.status is S.TIMED_OUT
    assert record.failure_type is FailureType.TIMED_OUT
    assert record.retry_at is None  # a timed-out attempt is not retried
    assert "0.1 s" in (record.exception or "")
    assert await asyncio.to_thread(saw_cancel.wait, DEADLINE)  # the sync handler saw the flag
    assert await asyncio.to_thread(returned.wait, DEADLINE)
    # Whatever the handler returned after its timeout is dropped: a later message's report
    # arrives on the same ordered channel with nothing more about the timed-out one before it.
    after = await harness.publish("async-plain")
    await observer.wait_final(after.occurrence_id)
    assert [r.status for r in observer.of(slow.occurrence_id) if r.status is not S.RUNNING] == [
        S.TIMED_OUT
    ]
    typed = await harness.publish("typed-timeout")
    assert (await observer.wait_final(typed.occurrence_id)).status is S.COMPLETED


async def test_a_handler_that_swallows_its_timeout_still_timed_out(
    harness: Harness, observer: Observer
) -> None:
    @rota.job("stubborn", timeout=0.05)
    async def stubborn(ctx: rota.JobContext) -> str:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        return "finished anyway"

    @rota.job("stubborn-raises", timeout=0.05)
    async def stubborn_raises(ctx: rota.JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise ValueError("cleanup failed") from None

    await harness.executor(stubborn, stubborn_raises)
    returned = await harness.publish("stubborn", max_retries=3)
    raised = await harness.publish("stubborn-raises", max_retries=3)
    for message in (returned, raised):
        record = await observer.wait_final(message.occurrence_id)
        assert record.status is S.TIMED_OUT
        assert record.result is None
        assert record.retry_at is None


def test_default_timeout_must_be_positive(broker: InProcessBroker) -> None:
    with pytest.raises(ValueError, match="default_timeout"):
        _bare_executor(broker, default_timeout=0)


async def test_user_timeout_error_is_a_failure(harness: Harness, observer: Observer) -> None:
    @rota.job("raises-timeout", timeout=30)
    async def raises(ctx: rota.JobContext) -> None:
        raise TimeoutError("upstream timed out")

    await harness.executor(raises)
    message = await harness.publish("raises-timeout")
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.FAILED
    assert (record.exception or "").startswith("TimeoutError: upstream timed out")


async def test_cancel_async_handler(harness: Harness, observer: Observer) -> None:
    started = asyncio.Event()

    @rota.job("cancel-me")
    async def long(ctx: rota.JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    executor = await harness.executor(long)
    message = await harness.publish("cancel-me")
    await asyncio.wait_for(started.wait(), DEADLINE)
    assert executor.load == 1
    assert executor.cancel(message.occurrence_id) is True
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.CANCELLED
    assert executor.load == 0
    assert executor.cancel(message.occurrence_id) is False


async def test_cancel_sync_handler_sets_its_event(harness: Harness, observer: Observer) -> None:
    started = threading.Event()

    @rota.job("cancel-sync")
    def long(ctx: rota.JobContext) -> None:
        started.set()
        ctx.cancelled.wait(DEADLINE)
        ctx.raise_if_cancelled()

    executor = await harness.executor(long)
    message = await harness.publish("cancel-sync")
    assert await asyncio.to_thread(started.wait, DEADLINE)
    assert executor.cancel(message.occurrence_id) is True
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.CANCELLED


async def test_check_cancelled_in_handler(harness: Harness, observer: Observer) -> None:
    @rota.job("checks")
    async def checks(ctx: rota.JobContext) -> None:
        raise JobCancelledError("stopped by the handler")

    await harness.executor(checks)
    message = await harness.publish("checks", max_retries=3)
    record = await observer.wait_final(message.occurrence_id)
    assert record.status is S.CANCELLED
    assert record.retry_at is None


async def test_cancel_before_the_message_arrives(harness: Harness, observer: Observer) -> None:
    ran = asyncio.Event()

    @rota.job("early")
    async def early(ctx: rota.JobContext) -> None:
        ran.set()

    executor = await harness.executor(early)
    occurrence_id = new_id()
    assert executor.cancel(occurrence_id) is False
    message = JobMessage(
        occurrence_id=occurrence_id,
        job_id=new_id(),
        job_type="early",
        job_data=None,
        scheduled_for=NOW,
        timestamp=NOW,
        worker_id=WORKER,
    )
    await harness.broker.publish_jobs([message])
    record = await observer.wait_final(occurrence_id)
    assert record.status is S.CANCELLED
    assert not ran.is_set()


# --- logs, packing, concurrency ------------------------------------------------------------------


async def test_logs_arrive_with_the_occurrence_id(harness: Harness, observer: Observer) -> None:
    await harness.executor(logging_job, logging_sync)
    message = await harness.publish("logging")
    sync = await harness.publish("logging-sync")
    await observer.wait_final(message.occurrence_id)
    await observer.wait_final(sync.occurrence_id)
    await observer.until(lambda: len(observer.logs) >= 3)
    mine = [r for r in observer.logs if r.occurrence_id == message.occurrence_id]
    assert [(r.level, r.message) for r in mine] == [("INFO", "hello world"), ("WARNING", "careful")]
    assert mine[0].data == {"step": 1}
    assert mine[0].category == "logging"
    theirs = [r for r in observer.logs if r.occurrence_id == sync.occurrence_id]
    assert [r.message for r in theirs] == ["from a thread"]


async def test_running_is_dropped_when_final_follows_in_the_same_flush(
    harness: Harness, observer: Observer, broker: InProcessBroker
) -> None:
    calls: list[int] = []
    original = broker.publish_status

    async def counting(records: Sequence[StatusRecord]) -> None:
        calls.append(len(records))
        await original(records)

    broker.publish_status = counting  # type: ignore[method-assign]
    await harness.executor(async_plain, flush_interval=0.2)
    messages = [await harness.publish("async-plain") for _ in range(20)]
    for message in messages:
        await observer.wait_final(message.occurrence_id)
    for message in messages:
        assert [r.status for r in observer.of(message.occurrence_id)] == [S.COMPLETED]
    assert sum(calls) == 20
    assert len(calls) < 20  # packed: many occurrences per message


async def test_running_is_sent_for_a_job_that_outlives_the_flush(
    harness: Harness, observer: Observer
) -> None:
    release = asyncio.Event()

    @rota.job("waits")
    async def waits(ctx: rota.JobContext) -> None:
        await release.wait()

    await harness.executor(waits, flush_interval=0.005)
    message = await harness.publish("waits")
    await observer.wait_status(message.occurrence_id, S.RUNNING)
    release.set()
    await observer.wait_final(message.occurrence_id)
    assert [r.status for r in observer.of(message.occurrence_id)] == [S.RUNNING, S.COMPLETED]


async def test_long_jobs_heartbeat_with_running(harness: Harness, observer: Observer) -> None:
    release = asyncio.Event()

    @rota.job("beats")
    async def beats(ctx: rota.JobContext) -> None:
        await release.wait()

    await harness.executor(beats, heartbeat_interval=0.02)
    message = await harness.publish("beats")
    await observer.until(
        lambda: sum(r.status is S.RUNNING for r in observer.of(message.occurrence_id)) >= 3
    )
    release.set()
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED


async def test_a_handler_finishing_in_the_grace_keeps_heartbeating(
    harness: Harness, observer: Observer
) -> None:
    """A stop lets a running handler finish; meanwhile its heartbeats go on (a worker that
    went quiet while draining was taken for a dead one and its job run again)."""
    release = asyncio.Event()

    @rota.job("drains")
    async def drains(ctx: rota.JobContext) -> None:
        await release.wait()

    executor = await harness.executor(drains, heartbeat_interval=0.02)
    message = await harness.publish("drains")
    await observer.wait_status(message.occurrence_id, S.RUNNING)
    stopping = asyncio.create_task(executor.stop(grace=30))
    before = sum(r.status is S.RUNNING for r in observer.of(message.occurrence_id))
    await observer.until(
        lambda: sum(r.status is S.RUNNING for r in observer.of(message.occurrence_id)) >= before + 3
    )
    release.set()
    await stopping
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED


async def test_concurrency_limit_is_honoured(harness: Harness, observer: Observer) -> None:
    running = 0
    peak = 0

    @rota.job("counted")
    async def counted(ctx: rota.JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    executor = await harness.executor(counted, concurrency=3)
    messages = [await harness.publish("counted") for _ in range(15)]
    for message in messages:
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert peak == 3
    assert executor.load == 0


async def test_concurrency_limit_for_sync_handlers(harness: Harness, observer: Observer) -> None:
    lock = threading.Lock()
    running = 0
    peak = 0

    @rota.job("counted-sync")
    def counted(ctx: rota.JobContext) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1

    await harness.executor(counted, concurrency=1)
    messages = [await harness.publish("counted-sync") for _ in range(5)]
    for message in messages:
        await observer.wait_final(message.occurrence_id)
    assert peak == 1


async def test_publish_failure_keeps_records_for_the_next_flush(
    harness: Harness, observer: Observer, broker: InProcessBroker
) -> None:
    original = broker.publish_status
    failures = 0

    async def flaky(records: Sequence[StatusRecord]) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise BackendUnavailableError("broker down")
        await original(records)

    broker.publish_status = flaky  # type: ignore[method-assign]
    await harness.executor(async_plain, boom, flush_interval=0.005)
    ok = await harness.publish("async-plain")
    bad = await harness.publish("boom")
    assert (await observer.wait_final(ok.occurrence_id)).status is S.COMPLETED
    assert (await observer.wait_final(bad.occurrence_id)).status is S.FAILED
    assert failures == 2


# --- stopping ------------------------------------------------------------------------------------


async def test_stop_lets_short_jobs_finish_and_cancels_long_ones(
    broker: InProcessBroker, observer: Observer
) -> None:
    started = asyncio.Event()
    long_started = asyncio.Event()

    @rota.job("short")
    async def short(ctx: rota.JobContext) -> str:
        started.set()
        await asyncio.sleep(0.05)
        return "done"

    @rota.job("long")
    async def long(ctx: rota.JobContext) -> None:
        long_started.set()
        await asyncio.sleep(30)

    harness = Harness(broker)
    executor = await harness.executor(short, long)
    quick = await harness.publish("short")
    slow = await harness.publish("long")
    await asyncio.wait_for(asyncio.gather(started.wait(), long_started.wait()), DEADLINE)
    began = time.monotonic()
    await executor.stop(grace=0.3)
    assert time.monotonic() - began < 2
    assert executor.load == 0
    # stop() flushed the reports: both finals are on the status channel
    quick_final = await observer.wait_final(quick.occurrence_id)
    assert quick_final.status is S.COMPLETED
    assert quick_final.result == "done"
    slow_final = await observer.wait_final(slow.occurrence_id)
    # interrupted, not cancelled: the scheduler gives it its next attempt
    assert slow_final.status is S.UNKNOWN
    assert slow_final.failure_type is FailureType.ZOMBIE
    assert slow_final.exception == (
        "interrupted: worker stopped; still running after its grace of 0.3 s"
    )


async def test_stop_cancels_sync_handlers_too(broker: InProcessBroker, observer: Observer) -> None:
    started = threading.Event()

    @rota.job("stuck")
    def stuck(ctx: rota.JobContext) -> None:
        started.set()
        ctx.cancelled.wait(DEADLINE)

    executor = await Harness(broker).executor(stuck)
    message = await Harness(broker).publish("stuck")
    assert await asyncio.to_thread(started.wait, DEADLINE)
    await executor.stop(grace=0.05)
    assert (await observer.wait_final(message.occurrence_id)).status is S.UNKNOWN


async def test_a_cancel_asked_before_the_stop_stays_cancelled(
    broker: InProcessBroker, observer: Observer
) -> None:
    """Only an attempt the stop cuts short is interrupted; one whose cancellation was asked
    (and that has not ended yet) ends Cancelled, final, as asked."""
    started = threading.Event()
    release = threading.Event()

    @rota.job("deaf")
    def deaf(ctx: rota.JobContext) -> None:
        started.set()
        release.wait(DEADLINE)  # does not look at ctx.cancelled

    executor = await Harness(broker).executor(deaf)
    message = await Harness(broker).publish("deaf")
    assert await asyncio.to_thread(started.wait, DEADLINE)
    assert executor.cancel(message.occurrence_id)
    try:
        await executor.stop(grace=0.05)
    finally:
        release.set()
    final = await observer.wait_final(message.occurrence_id)
    assert (final.status, final.exception) == (S.CANCELLED, "cancelled")


async def test_start_twice_is_refused(harness: Harness) -> None:
    executor = await harness.executor(async_plain)
    with pytest.raises(RuntimeError):
        await executor.start()


# --- the ack rule ----------------------------------------------------------------------------


async def test_handler_starts_at_once_and_the_ack_follows_its_running_flush(
    harness: Harness, observer: Observer, flaky: FlakyBroker
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @rota.job("acked-late")
    async def acked_late(ctx: rota.JobContext) -> None:
        started.set()
        await release.wait()

    gate = flaky.gate = asyncio.Event()
    executor = await harness.executor(acked_late, broker=flaky)
    message = await harness.publish("acked-late")
    await asyncio.wait_for(started.wait(), DEADLINE)
    await eventually(
        lambda: executor.reporter.pending == 0, WAIT, "the flush to take the Running record"
    )
    assert flaky.settles == []  # its flush waits at the gate: not acknowledged yet
    gate.set()
    await eventually(lambda: flaky.acked(message.occurrence_id), WAIT, "the ack")
    assert executor.load == 1  # a long job holds no delivery open
    await observer.wait_status(message.occurrence_id, S.RUNNING)
    assert [r.status for r in observer.of(message.occurrence_id)] == [S.RUNNING]
    release.set()
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert flaky.settles == [("ack", message.occurrence_id)]


async def test_without_a_store_the_ack_waits_for_a_successful_publish(
    harness: Harness, observer: Observer, flaky: FlakyBroker
) -> None:
    flaky.away = True
    executor = await harness.executor(async_plain, broker=flaky)
    message = await harness.publish("async-plain")
    await eventually(lambda: flaky.failed_publishes >= 2, WAIT, "failed publishes")
    assert flaky.settles == []
    assert executor.reporter.pending == 1  # its final, kept in memory
    flaky.away = False
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    await eventually(lambda: flaky.acked(message.occurrence_id), WAIT, "the ack")


async def test_a_publish_cut_short_by_a_lost_connection_does_not_end_the_reporter(
    harness: Harness, observer: Observer, flaky: FlakyBroker
) -> None:
    """aiormq ends the confirmations of a connection it found stuck with ``CancelledError``;
    the reporter keeps the records, goes on, and publishes them once the broker is back (the
    worker used to go silent for good: its reporter's task ended cancelled)."""
    flaky.lost = 2
    executor = await harness.executor(async_plain, broker=flaky)
    message = await harness.publish("async-plain")
    assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert flaky.lost == 0
    assert flaky.failed_publishes == 2
    await eventually(lambda: flaky.acked(message.occurrence_id), WAIT, "the ack")
    later = await harness.publish("async-plain")
    assert (await observer.wait_final(later.occurrence_id)).status is S.COMPLETED
    assert executor.reporter.pending == 0


# --- the outbox ------------------------------------------------------------------------------


def _first_seen(observer: Observer) -> list[UUID]:
    seen: list[UUID] = []
    for record in observer.status:
        if record.occurrence_id not in seen:
            seen.append(record.occurrence_id)
    return seen


async def test_broker_away_reports_go_to_the_outbox_and_are_replayed_in_order(
    harness: Harness, observer: Observer, flaky: FlakyBroker, tmp_path: Path
) -> None:
    store = await harness.store(tmp_path)
    flaky.away = True
    executor = await harness.executor(logging_job, broker=flaky, store=store, concurrency=1)
    early = [await harness.publish("logging") for _ in range(3)]
    # handed over to the outbox: acknowledged although nothing could be published
    await eventually(lambda: all(flaky.acked(m.occurrence_id) for m in early), WAIT, "the acks")
    await eventually(lambda: executor.reporter.outboxed >= 9, WAIT, "3 finals and 6 log lines kept")
    assert observer.status == []
    assert observer.logs == []
    assert (await store.outbox_size()).records >= 9
    flaky.away = False
    late = await harness.publish("logging")
    for message in [*early, late]:
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert _first_seen(observer) == [m.occurrence_id for m in [*early, late]]
    await observer.until(lambda: len(observer.logs) == 8)
    assert [r.occurrence_id for r in observer.logs[::2]] == [
        m.occurrence_id for m in [*early, late]
    ]
    assert [r.message for r in observer.logs[:2]] == ["hello world", "careful"]
    await eventually(lambda: executor.reporter.outbox_entries == 0, WAIT, "the outbox emptied")
    assert (await store.outbox_size()).entries == 0
    assert executor.reporter.replayed >= 9


async def test_the_outbox_survives_a_worker_restart(
    harness: Harness, observer: Observer, flaky: FlakyBroker, tmp_path: Path
) -> None:
    flaky.away = True
    store = await LocalStore.open(tmp_path)
    first = make_executor(
        flaky,
        JobRegistry([async_plain]),
        worker_id=WORKER,
        instance_id="first",
        concurrency=2,
        sync_threads=1,
        flush_interval=0.005,
        store=store,
    )
    await first.start()
    message = await harness.publish("async-plain")
    await eventually(lambda: flaky.acked(message.occurrence_id), WAIT, "the ack")
    await first.stop(grace=1)
    await store.close()
    assert observer.status == []  # nothing published, nothing lost: it is on disk

    flaky.away = False
    store = await harness.store(tmp_path)
    assert (await store.outbox_size()).records == 1
    await harness.executor(async_plain, broker=flaky, store=store)
    record = await observer.wait_final(message.occurrence_id)
    assert (record.status, record.instance_id) == (S.COMPLETED, "first")

    async def emptied() -> bool:
        return (await store.outbox_size()).entries == 0

    await eventually(emptied, WAIT, "the outbox emptied")


# --- finalized attempts ----------------------------------------------------------------------


async def test_a_delivery_of_a_finalized_attempt_is_acked_and_not_run(
    harness: Harness, observer: Observer, flaky: FlakyBroker, tmp_path: Path
) -> None:
    runs: Counter[tuple[UUID, int]] = Counter()

    @rota.job("once")
    async def once(ctx: rota.JobContext) -> None:
        runs[ctx.occurrence_id, ctx.attempt] += 1

    store = await harness.store(tmp_path)
    executor = await harness.executor(once, broker=flaky, store=store)
    message = await harness.publish("once")
    await observer.wait_final(message.occurrence_id)
    await harness.broker.publish_jobs([message])  # the same message again (a republish)
    await eventually(lambda: executor.stats.duplicates_skipped == 1, WAIT, "the duplicate skipped")
    await eventually(lambda: len(flaky.settles) == 2, WAIT, "both acked")
    assert flaky.settles == [("ack", message.occurrence_id)] * 2
    retry = replace(message, retry_count=1)  # the next attempt is another matter
    await harness.broker.publish_jobs([retry])
    await observer.until(lambda: (message.occurrence_id, 2) in runs)
    assert runs == {(message.occurrence_id, 1): 1, (message.occurrence_id, 2): 1}

    async def recorded() -> bool:  # by the flush that published the final
        return await store.finalized_attempt(message.occurrence_id) == 2

    await eventually(recorded, WAIT, "attempt 2 recorded as finalized")
    assert (await harness.broker.queue_depths())["rota.jobs.test-worker"] == 0


async def _run_once_and_restart(
    harness: Harness, observer: Observer, tmp_path: Path, counted: AnyJobDefinition
) -> tuple[JobMessage, LocalStore]:
    store = await LocalStore.open(tmp_path)
    first = make_executor(
        harness.broker,
        JobRegistry([counted]),
        worker_id=WORKER,
        instance_id="first",
        concurrency=1,
        sync_threads=1,
        flush_interval=0.005,
        store=store,
    )
    await first.start()
    message = await harness.publish(counted.name)
    await observer.wait_final(message.occurrence_id)
    await first.stop(grace=1)
    await store.close()
    return message, await harness.store(tmp_path)


async def test_finalized_attempts_are_remembered_across_a_restart(
    harness: Harness, observer: Observer, tmp_path: Path
) -> None:
    runs = 0

    @rota.job("counted-once")
    async def counted(ctx: rota.JobContext) -> None:
        nonlocal runs
        runs += 1

    message, store = await _run_once_and_restart(harness, observer, tmp_path, counted)
    executor = await harness.executor(counted, store=store)
    await harness.broker.publish_jobs([message])
    await eventually(lambda: executor.stats.duplicates_skipped == 1, WAIT, "the duplicate skipped")
    assert runs == 1


async def test_a_redelivery_is_checked_against_the_store(
    harness: Harness, observer: Observer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finals_module, "_MAX_REMEMBERED_FINALS", 0)  # memory forgets at once
    runs = 0

    @rota.job("counted-redelivered")
    async def counted(ctx: rota.JobContext) -> None:
        nonlocal runs
        runs += 1

    message, store = await _run_once_and_restart(harness, observer, tmp_path, counted)
    await harness.broker.publish_jobs([message])
    consumer = harness.broker.consume_jobs(WORKER, 1)  # take it and give it back: redelivered
    await (await anext(consumer)).reject(requeue=True)
    await consumer.aclose()
    executor = await harness.executor(counted, store=store)
    await eventually(lambda: executor.stats.duplicates_skipped == 1, WAIT, "the redelivery skipped")
    assert runs == 1


# --- job type concurrency --------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_job_type_concurrency_is_validated(value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        rota.job("bad", concurrency=value)
    assert info.value.field == "concurrency"


async def test_a_job_type_limit_holds_without_blocking_other_types(
    harness: Harness, observer: Observer
) -> None:
    release = asyncio.Event()
    running = peak = 0

    @rota.job("one-at-a-time", concurrency=1)
    async def limited(ctx: rota.JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    assert limited.describe()["concurrency"] == 1
    assert async_plain.describe()["concurrency"] is None
    executor = await harness.executor(limited, async_plain, concurrency=4)
    waiting = [await harness.publish("one-at-a-time") for _ in range(3)]
    others = [await harness.publish("async-plain") for _ in range(3)]
    for message in others:  # they pass the held ones
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert (peak, executor.load, executor.held) == (1, 1, 2)
    release.set()
    for message in waiting:
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert peak == 1
    assert executor.held == 0


async def test_a_delivery_held_too_long_goes_back_to_the_broker(
    harness: Harness, observer: Observer, flaky: FlakyBroker
) -> None:
    release = asyncio.Event()
    runs: Counter[UUID] = Counter()

    @rota.job("slow-turns", concurrency=1)
    async def slow(ctx: rota.JobContext) -> None:
        runs[ctx.occurrence_id] += 1
        await release.wait()

    executor = await harness.executor(
        slow, broker=flaky, concurrency=2, hand_back_after=0.02, heartbeat_interval=0.01
    )
    first = await harness.publish("slow-turns")
    second = await harness.publish("slow-turns")
    await eventually(
        lambda: ("requeue", second.occurrence_id) in flaky.settles, WAIT, "a hand-back"
    )
    assert executor.stats.handed_back >= 1
    release.set()
    for message in (first, second):
        assert (await observer.wait_final(message.occurrence_id)).status is S.COMPLETED
    assert runs == {first.occurrence_id: 1, second.occurrence_id: 1}


async def test_a_held_delivery_whose_channel_died_is_not_run(
    harness: Harness, observer: Observer, flaky: FlakyBroker
) -> None:
    """The broker redelivers it (maybe to another worker): running it here too would run it
    twice."""
    release = asyncio.Event()
    runs: Counter[UUID] = Counter()

    @rota.job("one-lane", concurrency=1)
    async def lane(ctx: rota.JobContext) -> None:
        runs[ctx.occurrence_id] += 1
        await release.wait()

    executor = await harness.executor(lane, broker=flaky, concurrency=2)
    first = await harness.publish("one-lane")
    second = await harness.publish("one-lane")
    await eventually(lambda: executor.held == 1, WAIT, "the second held behind the first")
    flaky.dead.add(second.occurrence_id)
    release.set()
    assert (await observer.wait_final(first.occurrence_id)).status is S.COMPLETED
    await eventually(lambda: executor.held == 0, WAIT, "the dead delivery dropped")
    assert executor.stats.dropped_dead == 1
    assert runs == {first.occurrence_id: 1}
    assert second.occurrence_id not in {oid for _, oid in flaky.settles}


# --- stopping: what did not start goes back ---------------------------------------------------


async def test_stop_hands_back_what_did_not_start(
    harness: Harness, observer: Observer, flaky: FlakyBroker, broker: InProcessBroker
) -> None:
    started = asyncio.Event()

    @rota.job("hog", concurrency=1)
    async def hog(ctx: rota.JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    executor = await harness.executor(hog, broker=flaky, concurrency=2)
    messages = [await harness.publish("hog") for _ in range(4)]
    await asyncio.wait_for(started.wait(), DEADLINE)
    await eventually(lambda: executor.held == 2, WAIT, "two held (the prefetch is full)")
    assert (await broker.queue_depths())["rota.jobs.test-worker"] == 1
    await executor.stop(grace=0.05)
    assert (await observer.wait_final(messages[0].occurrence_id)).status is S.UNKNOWN
    assert sorted(flaky.settles) == sorted(
        [("ack", messages[0].occurrence_id)] + [("requeue", m.occurrence_id) for m in messages[1:3]]
    )
    assert (await broker.queue_depths())["rota.jobs.test-worker"] == 3  # all back, ready
    assert {r.occurrence_id for r in observer.status} == {messages[0].occurrence_id}


async def test_a_copy_of_a_held_delivery_replaces_it(
    harness: Harness, observer: Observer, flaky: FlakyBroker
) -> None:
    release = asyncio.Event()
    runs: Counter[tuple[UUID, int]] = Counter()

    @rota.job("copied", concurrency=1)
    async def copied(ctx: rota.JobContext) -> None:
        runs[ctx.occurrence_id, ctx.attempt] += 1
        await release.wait()

    executor = await harness.executor(copied, broker=flaky, concurrency=3)
    blocker = await harness.publish("copied")
    held = await harness.publish("copied")
    await eventually(lambda: executor.held == 1, WAIT, "one held")
    await harness.broker.publish_jobs([held])  # the same message again: replaces the held one
    await eventually(lambda: flaky.acked(held.occurrence_id), WAIT, "the older copy acked")
    await harness.broker.publish_jobs([replace(held, retry_count=1)])  # a later attempt wins
    await eventually(
        lambda: flaky.settles.count(("ack", held.occurrence_id)) == 2, WAIT, "both acked"
    )
    assert executor.held == 1
    await harness.broker.publish_jobs([held])  # an earlier attempt than the held one: dropped
    await eventually(lambda: flaky.settles.count(("ack", held.occurrence_id)) == 3, WAIT, "dropped")
    release.set()
    assert (await observer.wait_final(held.occurrence_id)).attempt == 2
    await observer.wait_final(blocker.occurrence_id)
    assert runs == {(blocker.occurrence_id, 1): 1, (held.occurrence_id, 2): 1}


async def test_an_unreadable_outbox_entry_is_dropped_not_blocking(
    harness: Harness, observer: Observer, tmp_path: Path
) -> None:
    store = await harness.store(tmp_path)
    await store.save(outbox=[("status", b"not json", 1)])
    early = StatusRecord(occurrence_id=new_id(), status=S.COMPLETED, timestamp=NOW)
    await store.save(outbox=[("status", encode_status_records([early]), 1)])
    executor = await harness.executor(async_plain, store=store)
    message = await harness.publish("async-plain")
    await observer.wait_final(message.occurrence_id)
    assert _first_seen(observer) == [early.occurrence_id, message.occurrence_id]
    assert executor.reporter.replayed == 1
    assert (await store.outbox_size()).entries == 0


# --- the cancellation channel -----------------------------------------------------------------


async def test_a_cancellation_sent_through_coordination_stops_the_running_job(
    harness: Harness, observer: Observer
) -> None:
    started = asyncio.Event()

    @rota.job("cancel-me")
    async def endless(ctx: rota.JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    coordination = MemoryCoordination()
    executor = await harness.executor(endless)
    presence = WorkerPresence(
        coordination,
        executor,
        JobRegistry([endless]),
        worker_id="test-worker",
        concurrency=4,
        heartbeat_seconds=5,
    )
    await presence.start()
    try:
        message = await harness.publish("cancel-me")
        await asyncio.wait_for(started.wait(), DEADLINE)
        await coordination.cancel([message.occurrence_id], "cancelled: by hand")
        final = await observer.wait_final(message.occurrence_id)
        assert (final.status, final.exception) == (S.CANCELLED, "cancelled: by hand")
        # One sent before its message arrives is remembered: it never runs.
        early = new_id()
        await coordination.cancel([early])
        late = await harness.publish("cancel-me", occurrence_id=early)
        assert (await observer.wait_final(late.occurrence_id)).status is S.CANCELLED
    finally:
        await presence.stop()


async def test_held_deliveries_start_highest_priority_first(harness: Harness) -> None:
    await held_deliveries_start_by_priority(harness.broker, harness.executor)


async def test_a_short_run_s_final_report_carries_its_running_report_s_time(
    harness: Harness, observer: Observer
) -> None:
    """A run shorter than the flush interval: its Running report is folded into its final
    one (one record sent), which carries the Running report's time as ``started_at``."""
    await harness.executor(async_plain, flush_interval=0.5)
    message = await harness.publish("async-plain")
    final = await observer.wait_final(message.occurrence_id)
    assert [r.status for r in observer.of(message.occurrence_id)] == [S.COMPLETED]
    assert final.started_at is not None
    assert final.started_at <= final.timestamp


async def test_a_late_copy_of_an_older_job_version_does_not_change_what_runs(
    harness: Harness, observer: Observer
) -> None:
    """The job was edited during the hold and its message sent again; the older copy comes
    after the newer one (no word from the cancellation channel): the newer copy is the one
    held, and it runs with its own data."""
    await harness.executor(async_typed)
    due = datetime.now(UTC) + timedelta(seconds=0.5)
    oid = new_id()
    new = await harness.publish(
        "async-typed", {"kind": "new"}, occurrence_id=oid, scheduled_for=due, job_version=2
    )
    await harness.publish(
        "async-typed", {"kind": "old"}, occurrence_id=oid, scheduled_for=due, job_version=1
    )
    final = await observer.wait_final(new.occurrence_id)
    assert final.status is S.COMPLETED
    assert final.result == {"kind": "new", "pages": 1, "attempt": 1}
    assert [r.status for r in observer.of(oid)] == [S.COMPLETED]
