"""The embedded runtime end to end in one process: dispatcher, tracker, executor, store."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from uuid import UUID

import pytest

from rota.app.runtime import _WAITING_FOR_INPUT, Runtime
from rota.core.models import ConcurrencyPolicy, OccurrenceStatus
from rota.core.records import OccurrenceQuery
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus


@pytest.fixture
async def runtime(runtime_factory: RuntimeFactory) -> Runtime:
    overrides = {"scheduler.sweeper_interval_seconds": 0.5}
    return await runtime_factory(overrides, ["tests.integration.runtime_jobs"])


async def occurrences(rt: Runtime, job_id: UUID) -> list[object]:
    page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=1000))
    return list(page.items)


async def statuses(rt: Runtime, job_id: UUID) -> list[OccurrenceStatus]:
    page = await rt.store.list_occurrences(OccurrenceQuery(job_id=job_id, limit=1000))
    return [o.status for o in page.items]


async def test_cron_job_completes_with_result_logs_and_stats(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job({"job_type": "it.fast", "cron_expression": "*/1 * * * * *"})

    async def two_done() -> bool:
        return (await statuses(runtime, job.id)).count(S.COMPLETED) >= 2

    await eventually(two_done, 15, "two completed fires")
    page = await runtime.store.list_occurrences(
        OccurrenceQuery(job_id=job.id, statuses=(S.COMPLETED,))
    )
    occ = await runtime.store.get_occurrence(page.items[0].id)
    assert occ.result == "fast"
    assert occ.duration_ms is not None
    assert occ.duration_ms >= 0
    assert occ.start_time is not None
    assert occ.start_time >= occ.scheduled_for
    assert [c.to_status for c in occ.status_changes][-1] is S.COMPLETED

    async def logged() -> bool:
        lines = await runtime.store.occurrence_logs(occ.id)
        return any("fast ran" in record.message for _, record in lines)

    await eventually(logged, 10, "the handler's log line")
    stats = await runtime.store.get_job(job.id)
    assert stats.total_executions >= 2
    assert stats.success_rate == 100.0


async def test_sync_handler_runs_in_a_thread(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job({"job_type": "it.sync", "execute_at": runtime.jobs.now()})

    async def done() -> bool:
        return await statuses(runtime, job.id) == [S.COMPLETED]

    await eventually(done, 10, "sync job completed")
    [occ] = await occurrences(runtime, job.id)
    assert occ.result == 42  # type: ignore[attr-defined]


async def test_dispatcher_wakes_early_for_an_earlier_job(runtime: Runtime) -> None:
    # Something due in an hour makes the dispatcher sleep long; a job due in 0.3 s must still
    # run on time because creating it wakes the dispatcher.
    now = runtime.jobs.now()
    await runtime.jobs.create_job({"job_type": "it.fast", "execute_at": now + timedelta(hours=1)})
    created = time.time()

    def asleep() -> bool:  # an iteration that began after the far job has gone to sleep
        dispatcher = runtime.dispatcher
        return dispatcher.stats.last_tick > created and dispatcher._target is not None

    await eventually(asleep, 10, "the dispatcher to go to sleep towards the far job")
    due = runtime.jobs.now() + timedelta(milliseconds=300)
    job = await runtime.jobs.create_job({"job_type": "it.fast", "execute_at": due})

    async def done() -> bool:
        return await statuses(runtime, job.id) == [S.COMPLETED]

    await eventually(done, 10, "the early job")
    [occ] = await occurrences(runtime, job.id)
    lateness = occ.start_time - due  # type: ignore[attr-defined]
    assert timedelta(0) <= lateness < timedelta(milliseconds=250)


async def test_unknown_job_type_is_skipped_with_no_worker(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job(
        {"job_type": "nobody.declares.this", "execute_at": runtime.jobs.now()}
    )

    async def skipped() -> bool:
        return await statuses(runtime, job.id) == [S.SKIPPED]

    await eventually(skipped, 10, "a Skipped occurrence")
    [occ] = await occurrences(runtime, job.id)
    assert occ.skip_reason == "no_worker"  # type: ignore[attr-defined]


async def test_skip_policy_records_overlaps(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job({"job_type": "it.slow", "cron_expression": "*/1 * * * * *"})

    async def overlapped() -> bool:
        return S.SKIPPED in await statuses(runtime, job.id)

    await eventually(overlapped, 15, "an overlap")
    await runtime.jobs.update_job(job.id, {"is_active": False})
    page = await runtime.store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=1000))
    skipped = [o for o in page.items if o.status is S.SKIPPED]
    assert {o.skip_reason for o in skipped} == {"overlap"}
    running = [o for o in page.items if o.status in (S.QUEUED, S.RUNNING)]
    assert len(running) <= 1


async def test_queue_policy_runs_one_at_a_time(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job(
        {
            "job_type": "it.slow",
            "cron_expression": "*/1 * * * * *",
            "concurrency_policy": ConcurrencyPolicy.QUEUE,
        }
    )
    seen_running: list[int] = []

    async def two_completed() -> bool:
        current = await statuses(runtime, job.id)
        seen_running.append(current.count(S.RUNNING))
        return current.count(S.COMPLETED) >= 2

    await eventually(two_completed, 20, "two queued runs completed")
    await runtime.jobs.update_job(job.id, {"is_active": False})
    assert max(seen_running) == 1
    assert S.SKIPPED not in await statuses(runtime, job.id)


async def test_manual_trigger_runs_now(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job(
        {"job_type": "it.fast", "execute_at": runtime.jobs.now() + timedelta(days=1)}
    )
    occ = await runtime.jobs.trigger(job.id, reason="because")

    async def done() -> bool:
        return (await runtime.store.get_occurrence(occ.id)).status is S.COMPLETED

    await eventually(done, 10, "the triggered occurrence")
    stored = await runtime.store.get_occurrence(occ.id)
    assert stored.trigger_reason == "because"


async def test_job_type_defaults_apply_to_scheduled_and_manual_runs(runtime: Runtime) -> None:
    job = await runtime.jobs.create_job(
        {"job_type": "it.defaults", "execute_at": runtime.jobs.now()}
    )

    async def done() -> bool:
        return await statuses(runtime, job.id) == [S.COMPLETED]

    await eventually(done, 10, "the scheduled run")
    manual = await runtime.jobs.trigger(job.id, reason="by hand")
    for occ in [*(await occurrences(runtime, job.id)), manual]:
        assert occ.max_retries == 2  # type: ignore[attr-defined]
        assert occ.timeout_seconds == 5  # type: ignore[attr-defined]


async def test_a_run_publishes_its_change_events(runtime: Runtime) -> None:
    feed = runtime.coordination.events()
    job = await runtime.jobs.create_job({"job_type": "it.fast", "cron_expression": "0 0 1 1 *"})
    await runtime.jobs.trigger(job.id, reason="events")
    seen: list[tuple[str, dict[str, object]]] = []

    async def until_completed() -> None:
        async for _, event in feed:
            seen.append((event.type, dict(event.data)))
            done = [d for t, d in seen if t == "occurrence.updated" and d["status"] == 2]
            if done and any(t == "occurrence.log" for t, _ in seen):
                return

    await asyncio.wait_for(until_completed(), 15)
    await feed.aclose()  # type: ignore[attr-defined]
    types = [t for t, _ in seen]
    assert types[0] == "job.created"
    assert seen[0][1] == {"jobId": str(job.id)}
    created = next(d for t, d in seen if t == "occurrence.created")
    assert created["jobId"] == str(job.id)
    assert created["jobType"] == "it.fast"
    updates = [d for t, d in seen if t == "occurrence.updated"]
    assert all(d["occurrenceId"] == created["occurrenceId"] for d in updates)
    assert updates[-1]["statusName"] == "Completed"
    assert updates[-1]["workerId"] == "embedded"
    assert str(updates[-1]["instanceId"]).startswith("embedded-")
    log_event = next(d for t, d in seen if t == "occurrence.log")
    assert log_event["occurrenceId"] == created["occurrenceId"]
    assert "fast ran" in str(log_event["message"])
    exposition = runtime.metrics.exposition().decode()
    published = re.search(r"^rota_events_published_total (\S+)$", exposition, re.M)
    assert published is not None
    assert float(published[1]) >= len(seen)
    assert "rota_events_dropped_total 0.0" in exposition


async def test_a_stopped_dispatcher_fires_nothing_until_resumed(runtime: Runtime) -> None:
    from rota.core.models import DispatcherState
    from rota.services.control import switch_dispatcher

    state = await switch_dispatcher(
        runtime.store, paused=True, reason="maintenance", by="ops", now=runtime.jobs.now()
    )
    runtime.apply_dispatcher_state(state)
    assert runtime.dispatcher.paused_reason == "maintenance"
    job = await runtime.jobs.create_job({"job_type": "it.fast", "cron_expression": "* * * * * *"})
    assert job.next_run_at is not None
    first_due = job.next_run_at.timestamp()
    ticks: set[float] = set()

    def passed_twice() -> bool:  # two paused iterations began after a fire fell due
        if (tick := runtime.dispatcher.stats.last_tick) > first_due:
            ticks.add(tick)
        return len(ticks) >= 2

    await eventually(passed_twice, 15, "two dispatcher iterations with a fire due")
    assert await occurrences(runtime, job.id) == []

    # Another server's switch reaches this one through the store.
    await runtime.store.set_dispatcher_state(DispatcherState(paused=False))
    assert not (await runtime.follow_dispatcher_state()).paused
    assert runtime.dispatcher.paused_reason is None

    async def fired() -> bool:
        return S.COMPLETED in await statuses(runtime, job.id)

    await eventually(fired, 15, "a fire after resuming")

    runtime.dispatcher.pause("paused here by other means")  # not by the switch: it stays
    assert not (await runtime.follow_dispatcher_state()).paused
    assert runtime.dispatcher.paused_reason == "paused here by other means"
    runtime.dispatcher.resume()


async def test_an_iteration_under_way_when_the_dispatcher_stops_commits_nothing(
    runtime: Runtime,
) -> None:
    # An iteration that passed its pause check before the pause came goes on to fire a
    # batch (here called directly, as that iteration would): it commits nothing, and the
    # job stays due for when the dispatcher is resumed.
    dispatcher = runtime.dispatcher
    dispatcher.pause("maintenance")
    job = await runtime.jobs.create_job({"job_type": "it.fast", "execute_at": runtime.jobs.now()})
    assert await dispatcher.dispatch_due(dispatcher._buckets()) == 0
    assert await occurrences(runtime, job.id) == []
    dispatcher.resume()

    async def fired() -> bool:
        return S.COMPLETED in await statuses(runtime, job.id)

    await eventually(fired, 15, "the fire after resuming")


async def test_the_stop_lets_its_loops_end_by_themselves(runtime: Runtime) -> None:
    """Told to stop, the periodic loops end by themselves (a task cancelled inside a statement
    leaves its connection to be closed behind it); only those waiting for input are cancelled."""
    tasks = list(runtime._tasks)
    waiting = {f"rota-{name}" for name in _WAITING_FOR_INPUT}
    assert {t.get_name() for t in tasks} > waiting
    await runtime.stop(grace=2)
    assert all(t.done() for t in tasks)
    cancelled = sorted(t.get_name() for t in tasks if t.cancelled() and t.get_name() not in waiting)
    assert cancelled == []


async def test_the_stop_lets_a_consumer_store_the_batch_it_holds(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    tracker = next(t for t in runtime._tasks if t.get_name() == "rota-status-tracker")
    ended: list[float] = []
    tracker.add_done_callback(lambda _: ended.append(loop.time()))
    released: list[float] = []

    def release() -> None:
        released.append(loop.time())
        runtime.tracker.stats.holding = False

    runtime.tracker.stats.holding = True  # as while it stores a batch
    loop.call_later(0.3, release)
    await runtime.stop(grace=5)
    assert released, "the stop returned while the tracker held a batch"
    assert ended[0] >= released[0]
