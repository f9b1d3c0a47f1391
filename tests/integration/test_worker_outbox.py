"""The worker's delivery handling on the real RabbitMQ of this machine (a vhost per test run,
a name prefix per test): the ack rule (a long job holds no unacknowledged delivery: the
consumer-timeout safety), finalized attempts, the outbox, and messages given back at stop."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from uuid import UUID

import pytest

import rota
from rota.brokers.rabbitmq import RabbitMQBroker
from rota.core.ids import new_id
from rota.core.models import JobMessage, OccurrenceStatus, StatusRecord
from rota.core.ports import Broker
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker.executor import Executor
from rota.worker.localstore import LocalStore
from tests.contract.rabbitmq_fixtures import rabbitmq_url  # noqa: F401 (session fixture)
from tests.executors import make_executor
from tests.helpers import eventually
from tests.priority_order import held_deliveries_start_by_priority
from tests.worker_broker import FlakyBroker

S = OccurrenceStatus
GROUP = "it-worker"
WAIT = 10.0
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def rabbit(rabbitmq_url: str) -> AsyncIterator[RabbitMQBroker]:  # noqa: F811
    prefix = f"rota-w{uuid.uuid4().hex[:8]}"
    broker = RabbitMQBroker(rabbitmq_url, prefix=prefix, publish_timeout=5, operation_timeout=5)
    await broker.start()
    yield broker
    await broker.close()


@pytest.fixture
def vhost(rabbitmq_url: str) -> str:  # noqa: F811
    return unquote(urlsplit(rabbitmq_url).path[1:])


async def queue_counts(vhost: str, queue: str) -> tuple[int, int]:
    """``(ready, unacknowledged)`` of a queue, as ``rabbitmqctl list_queues`` reports them."""
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "list_queues", "-p", vhost, "--quiet", "--no-table-headers",
        "name", "messages_ready", "messages_unacknowledged",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    for line in out.decode().splitlines():
        name, ready, unacked = line.split("\t")
        if name == queue:
            return int(ready), int(unacked)
    raise AssertionError(f"queue {queue} not found in {out.decode()!r}")


class Collector:
    """Status records published on the broker, in order."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.status: list[StatusRecord] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Collector:
        self._task = asyncio.create_task(self._collect())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _collect(self) -> None:
        async for batch in self.broker.consume_status(1000, 0.01):
            self.status.extend(batch.items)
            await batch.ack()

    def of(self, occurrence_id: UUID) -> list[S]:
        return [r.status for r in self.status if r.occurrence_id == occurrence_id]

    async def final(self, occurrence_id: UUID) -> S:
        await eventually(
            lambda: any(s.is_terminal or s is S.UNKNOWN for s in self.of(occurrence_id)),
            WAIT,
            "a final (or interrupted)",
        )
        return self.of(occurrence_id)[-1]


class Worker:
    """Executors of the test (stopped at the end) on local stores in ``tmp_path``."""

    def __init__(self, broker: Broker, tmp_path: Path) -> None:
        self.broker = broker
        self.path = tmp_path / "state"
        self.stores: dict[Executor, LocalStore] = {}

    async def start(
        self, *definitions: AnyJobDefinition, concurrency: int = 2, broker: Broker | None = None
    ) -> Executor:
        store = await LocalStore.open(self.path)
        executor = make_executor(
            broker or self.broker,
            JobRegistry(definitions),
            worker_id=GROUP,
            instance_id=f"it-{len(self.stores)}",
            concurrency=concurrency,
            sync_threads=1,
            flush_interval=0.01,
            store=store,
        )
        self.stores[executor] = store
        await executor.start()
        return executor

    async def stop(self, executor: Executor, grace: float) -> None:
        await executor.stop(grace)
        await self.stores.pop(executor).close()

    async def close(self) -> None:
        for executor in list(self.stores):
            await self.stop(executor, 0)


@pytest.fixture
async def worker(rabbit: RabbitMQBroker, tmp_path: Path) -> AsyncIterator[Worker]:
    made = Worker(rabbit, tmp_path)
    yield made
    await made.close()


def job_message(job_type: str, **fields: Any) -> JobMessage:
    return JobMessage(
        occurrence_id=new_id(),
        job_id=new_id(),
        job_type=job_type,
        job_data=None,
        scheduled_for=NOW,
        timestamp=NOW,
        **{"worker_id": GROUP, **fields},
    )


async def ready_is(broker: RabbitMQBroker, count: int) -> None:
    queue = broker.names.job_queue(GROUP)

    async def check() -> bool:
        return (await broker.queue_depths()).get(queue) == count

    await eventually(check, WAIT, f"{count} messages ready in {queue}")


async def test_a_long_job_runs_with_no_unacknowledged_delivery(
    rabbit: RabbitMQBroker, worker: Worker, vhost: str
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @rota.job("it.long")
    async def long(ctx: rota.JobContext) -> str:
        started.set()
        await release.wait()
        return "done"

    executor = await worker.start(long)
    message = job_message("it.long")
    async with Collector(rabbit) as collector:
        await rabbit.publish_jobs([message])
        await asyncio.wait_for(started.wait(), WAIT)
        await eventually(
            lambda: collector.of(message.occurrence_id) == [S.RUNNING], WAIT, "Running"
        )
        queue = rabbit.names.job_queue(GROUP)

        async def settled() -> bool:
            return await queue_counts(vhost, queue) == (0, 0)

        await eventually(settled, WAIT, "no message ready or unacknowledged")
        assert executor.load == 1  # still running, after a second and more of rabbitmqctl
        release.set()
        assert await collector.final(message.occurrence_id) is S.COMPLETED


async def test_a_redelivered_message_of_a_finalized_attempt_is_acked_and_not_run(
    rabbit: RabbitMQBroker, worker: Worker, vhost: str
) -> None:
    runs = 0

    @rota.job("it.once")
    async def once(ctx: rota.JobContext) -> None:
        nonlocal runs
        runs += 1

    message = job_message("it.once")
    async with Collector(rabbit) as collector:
        first = await worker.start(once)
        await rabbit.publish_jobs([message])
        assert await collector.final(message.occurrence_id) is S.COMPLETED
        await worker.stop(first, grace=1)

        await rabbit.publish_jobs([message])  # again, and handed back once: redelivered
        consumer = rabbit.consume_jobs(GROUP, 1)
        delivery = await asyncio.wait_for(anext(consumer), WAIT)
        await delivery.reject(requeue=True)
        await consumer.aclose()  # type: ignore[attr-defined]

        flaky = FlakyBroker(rabbit)
        second = await worker.start(once, broker=flaky)
        await eventually(
            lambda: second.stats.duplicates_skipped == 1, WAIT, "the redelivery skipped"
        )
        await eventually(lambda: flaky.acked(message.occurrence_id), WAIT, "its ack")

        async def settled() -> bool:
            return await queue_counts(vhost, rabbit.names.job_queue(GROUP)) == (0, 0)

        await eventually(settled, WAIT, "nothing ready or unacknowledged")
        assert runs == 1
        assert collector.of(message.occurrence_id) == [S.COMPLETED]


async def test_the_outbox_replays_in_order_after_publish_failures(
    rabbit: RabbitMQBroker, worker: Worker
) -> None:
    @rota.job("it.quick")
    async def quick(ctx: rota.JobContext) -> None:
        ctx.log.info("ran")

    flaky = FlakyBroker(rabbit)
    flaky.away = True
    executor = await worker.start(quick, concurrency=1, broker=flaky)
    early = [job_message("it.quick") for _ in range(3)]
    async with Collector(rabbit) as collector:
        await rabbit.publish_jobs(early)
        await eventually(lambda: all(flaky.acked(m.occurrence_id) for m in early), WAIT, "acks")
        await eventually(lambda: executor.reporter.outboxed >= 6, WAIT, "3 finals, 3 lines kept")
        assert (await rabbit.queue_depths())[rabbit.names.status_queue] == 0
        flaky.away = False
        late = job_message("it.quick")
        await rabbit.publish_jobs([late])
        for message in [*early, late]:
            assert await collector.final(message.occurrence_id) is S.COMPLETED
        seen: list[UUID] = []
        for record in collector.status:
            if record.occurrence_id not in seen:
                seen.append(record.occurrence_id)
        assert seen == [m.occurrence_id for m in [*early, late]]
        await eventually(lambda: executor.reporter.outbox_entries == 0, WAIT, "the outbox emptied")


async def test_stop_gives_back_prefetched_messages(
    rabbit: RabbitMQBroker, worker: Worker, vhost: str
) -> None:
    started = asyncio.Event()

    @rota.job("it.hog")
    async def hog(ctx: rota.JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    flaky = FlakyBroker(rabbit)
    executor = await worker.start(hog, concurrency=1, broker=flaky)
    messages = [job_message("it.hog") for _ in range(3)]
    async with Collector(rabbit) as collector:
        await rabbit.publish_jobs(messages)
        await asyncio.wait_for(started.wait(), WAIT)
        await eventually(lambda: flaky.acked(messages[0].occurrence_id), WAIT, "the first acked")
        await ready_is(rabbit, 1)  # the second is prefetched: held, unacked, not started
        await worker.stop(executor, grace=0.05)
        assert await collector.final(messages[0].occurrence_id) is S.UNKNOWN  # interrupted
        await ready_is(rabbit, 2)
        assert await queue_counts(vhost, rabbit.names.job_queue(GROUP)) == (2, 0)
        assert collector.of(messages[1].occurrence_id) == []


async def test_stop_gives_back_messages_held_for_their_job_type(
    rabbit: RabbitMQBroker, worker: Worker, vhost: str
) -> None:
    started = asyncio.Event()

    @rota.job("it.single", concurrency=1)
    async def single(ctx: rota.JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    flaky = FlakyBroker(rabbit)
    executor = await worker.start(single, concurrency=2, broker=flaky)
    messages = [job_message("it.single") for _ in range(4)]
    async with Collector(rabbit) as collector:
        await rabbit.publish_jobs(messages)
        await asyncio.wait_for(started.wait(), WAIT)
        await eventually(lambda: executor.held == 2, WAIT, "two held")
        await ready_is(rabbit, 1)
        await worker.stop(executor, grace=0.05)
        requeued = {oid for kind, oid in flaky.settles if kind == "requeue"}
        assert requeued == {m.occurrence_id for m in messages[1:3]}
        assert await collector.final(messages[0].occurrence_id) is S.UNKNOWN  # interrupted
        await ready_is(rabbit, 3)
        assert await queue_counts(vhost, rabbit.names.job_queue(GROUP)) == (3, 0)
        assert all(collector.of(m.occurrence_id) == [] for m in messages[1:])


async def test_closing_intake_gives_back_what_the_consumer_buffered(
    rabbit: RabbitMQBroker, vhost: str
) -> None:
    """What a stopping worker relies on: messages RabbitMQ pushed into the consumer's buffer
    (prefetched, never yielded) go back when intake is closed; a yielded one stays the
    worker's to settle, and goes back when it is given back."""
    await rabbit.declare_worker_group(GROUP, ["it.buffered"])
    messages = [job_message("it.buffered") for _ in range(3)]
    await rabbit.publish_jobs(messages)
    consumer = rabbit.consume_jobs(GROUP, 3)
    taken = await asyncio.wait_for(anext(consumer), WAIT)
    queue = rabbit.names.job_queue(GROUP)

    async def all_delivered() -> bool:
        return await queue_counts(vhost, queue) == (0, 3)

    await eventually(all_delivered, WAIT, "three in the consumer, unacknowledged")
    await consumer.aclose()  # type: ignore[attr-defined]
    await ready_is(rabbit, 2)
    assert await queue_counts(vhost, queue) == (2, 1)  # the yielded one is still ours
    await taken.reject(requeue=True)
    await ready_is(rabbit, 3)


async def test_a_delivery_is_not_live_once_its_channel_is_gone(
    rabbit: RabbitMQBroker, vhost: str
) -> None:
    """After a lost connection the broker redelivers the message; the old delivery says so,
    so a worker holding it does not run it as well."""
    await rabbit.declare_worker_group(GROUP, ["it.lost"])
    await rabbit.publish_jobs([job_message("it.lost")])
    consumer = rabbit.consume_jobs(GROUP, 1)
    taken = await asyncio.wait_for(anext(consumer), WAIT)
    assert taken.is_live
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "close_all_connections", "-p", vhost, "test: channel lost",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    await eventually(lambda: not taken.is_live, WAIT, "the delivery to see its channel gone")
    again = await asyncio.wait_for(anext(consumer), 30)  # the robust connection comes back
    assert again.message.occurrence_id == taken.message.occurrence_id
    assert again.redelivered
    assert again.is_live
    await again.ack()
    await consumer.aclose()  # type: ignore[attr-defined]


async def test_held_deliveries_start_highest_priority_first(
    rabbit: RabbitMQBroker, worker: Worker
) -> None:
    await held_deliveries_start_by_priority(rabbit, worker.start)
