"""The executor test set-up shared by ``test_executor.py`` and ``test_executor_claims.py``: an
in-process broker, an :class:`Observer` of what executors publish, and a :class:`Harness` that
starts executors (stopped, and their local stores closed, after the test)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from rota.brokers.inprocess import InProcessBroker
from rota.core.ids import new_id
from rota.core.models import JobMessage, LogRecord, OccurrenceStatus, StatusRecord
from rota.core.ports import Broker
from rota.sdk.registry import AnyJobDefinition, JobRegistry
from rota.worker.executor import Executor
from rota.worker.localstore import LocalStore
from tests.executors import make_executor

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WORKER = "test-worker"
DEADLINE = 5.0


class Observer:
    """Collects what the executor published on the status and log channels."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker
        self.status: list[StatusRecord] = []
        self.logs: list[LogRecord] = []
        self.status_messages = 0
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._collect_status()),
            asyncio.create_task(self._collect_logs()),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _collect_status(self) -> None:
        async for batch in self.broker.consume_status(10_000, 0.001):
            self.status.extend(batch.items)
            await batch.ack()
            self._changed.set()

    async def _collect_logs(self) -> None:
        async for batch in self.broker.consume_logs(10_000, 0.001):
            self.logs.extend(batch.items)
            await batch.ack()
            self._changed.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(DEADLINE):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    def of(self, occurrence_id: UUID) -> list[StatusRecord]:
        return [r for r in self.status if r.occurrence_id == occurrence_id]

    def final(self, occurrence_id: UUID) -> StatusRecord | None:
        for record in reversed(self.of(occurrence_id)):
            # Unknown: an attempt interrupted by the worker's stop (its last record)
            if (
                record.status.is_terminal
                or record.retry_at is not None
                or record.status is OccurrenceStatus.UNKNOWN
            ):
                return record
        return None

    async def wait_final(self, occurrence_id: UUID) -> StatusRecord:
        await self.until(lambda: self.final(occurrence_id) is not None)
        record = self.final(occurrence_id)
        assert record is not None
        return record

    async def wait_status(self, occurrence_id: UUID, status: OccurrenceStatus) -> None:
        await self.until(lambda: any(r.status is status for r in self.of(occurrence_id)))


@pytest.fixture
async def broker() -> AsyncIterator[InProcessBroker]:
    broker = InProcessBroker()
    await broker.start()
    yield broker
    await broker.close()


@pytest.fixture
async def observer(broker: InProcessBroker) -> AsyncIterator[Observer]:
    observer = Observer(broker)
    observer.start()
    yield observer
    await observer.stop()


class Harness:
    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker
        self.executors: list[Executor] = []
        self.stores: list[LocalStore] = []

    async def store(self, path: Path) -> LocalStore:
        store = await LocalStore.open(path)
        self.stores.append(store)
        return store

    async def executor(
        self,
        *definitions: AnyJobDefinition,
        concurrency: int = 4,
        flush_interval: float = 0.005,
        extra_types: Sequence[str] = (),
        broker: Broker | None = None,
        **kwargs: Any,
    ) -> Executor:
        if extra_types:
            await self.broker.declare_worker_group(WORKER, list(extra_types))
        executor = make_executor(
            broker or self.broker,
            JobRegistry(definitions),
            worker_id=WORKER,
            instance_id="test-instance",
            concurrency=concurrency,
            sync_threads=2,
            flush_interval=flush_interval,
            **kwargs,
        )
        await executor.start()
        self.executors.append(executor)
        return executor

    async def publish(self, job_type: str, data: Any = None, **fields: Any) -> JobMessage:
        message = JobMessage(
            occurrence_id=fields.pop("occurrence_id", None) or new_id(),
            job_id=new_id(),
            job_type=job_type,
            job_data=data,
            scheduled_for=fields.pop("scheduled_for", NOW),
            timestamp=NOW,
            **{"worker_id": WORKER, **fields},
        )
        await self.broker.publish_jobs([message])
        return message


@pytest.fixture
async def harness(broker: InProcessBroker) -> AsyncIterator[Harness]:
    harness = Harness(broker)
    yield harness
    for executor in harness.executors:
        await executor.stop(0)
    for store in harness.stores:
        await store.close()
