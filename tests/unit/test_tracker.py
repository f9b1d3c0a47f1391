"""The status tracker and log collector keep consuming when their broker consumer cannot start
or breaks: they start it again with backoff and lose nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from rota.brokers.inprocess import InProcessBroker
from rota.core.ids import new_id
from rota.core.models import Job, LogRecord, OccurrenceStatus, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from rota.services.tracker import LogCollector, StatusTracker
from rota.stores.sql import SqlStore
from tests.helpers import eventually
from tests.worker_broker import WAIT, FlakyBroker

NOW = datetime(2030, 1, 1, tzinfo=UTC)


async def test_consumers_that_fail_to_start_are_started_again(store: SqlStore) -> None:
    job = Job(id=new_id(), job_type="T", cron_expression="* * * * *")
    await store.create_jobs([job])
    occurrence = new_occurrence(job, NOW, NOW, PlanSettings())
    await store.insert_occurrences([occurrence])
    broker = FlakyBroker(InProcessBroker())
    await broker.start()
    broker.consumer_failures = 4  # both consumers fail twice before they start
    tracker = StatusTracker(store, broker, batch_size=100, max_wait=0.01)
    collector = LogCollector(store, broker, batch_size=100, max_wait=0.01)
    tasks = [asyncio.create_task(tracker.run()), asyncio.create_task(collector.run())]
    try:
        await broker.publish_status(
            [
                StatusRecord(
                    occurrence_id=occurrence.id,
                    status=OccurrenceStatus.COMPLETED,
                    timestamp=NOW,
                    attempt=1,
                )
            ]
        )
        await broker.publish_logs(
            [LogRecord(occurrence_id=occurrence.id, timestamp=NOW, level="INFO", message="hi")]
        )

        async def stored() -> bool:
            current = await store.get_occurrence(occurrence.id)
            return current.status is OccurrenceStatus.COMPLETED and bool(
                await store.occurrence_logs(occurrence.id)
            )

        await eventually(stored, WAIT, "the status and the log line stored after the restarts")
        assert broker.consumer_failures == 0
        assert tracker.stats.errors + collector.stats.errors == 4
        assert not any(task.done() for task in tasks)  # still consuming
    finally:
        tracker.stop()
        collector.stop()
        await broker.close()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
