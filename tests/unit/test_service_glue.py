"""The glue between services that the composition root connects: what follows an applied
status batch (:class:`StatusReactions`), the dispatchers' stop switch followed here
(:class:`DispatcherSwitchFollower`) and the ``worker.changed`` events of the roster
(:class:`RosterWatcher`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from uuid import UUID

import pytest

from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.events import Event
from rota.core.ids import new_id
from rota.core.models import DispatcherState, OccurrenceStatus, WorkerInfo
from rota.core.records import AppliedChange, DisabledJob, StatusResult
from rota.services.control import DispatcherSwitchFollower
from rota.services.events import EventPublisher
from rota.services.reactions import StatusReactions
from rota.services.workers import RosterWatcher, WorkerDirectory
from tests.helpers import eventually

S = OccurrenceStatus


class Dispatcher:
    def __init__(self) -> None:
        self.woken: list[float | None] = []
        self.paused: str | None = None

    def wake(self, due: float | None = None) -> None:
        self.woken.append(due)

    def pause(self, reason: str) -> None:
        self.paused = reason

    def resume(self) -> None:
        self.paused = None


class Jobs:
    def __init__(self) -> None:
        self.dropped: list[tuple[int, UUID]] = []

    async def drop_disabled(self, entries: Sequence[tuple[int, UUID]]) -> None:
        self.dropped.extend(entries)


def change(
    to: OccurrenceStatus, source: OccurrenceStatus = S.RUNNING, *, queue_policy: bool = False
) -> AppliedChange:
    return AppliedChange(
        occurrence_id=new_id(),
        job_id=new_id(),
        from_status=source,
        to_status=to,
        attempt=1,
        queue_policy=queue_policy,
    )


def reactions(
    dispatcher: Dispatcher, jobs: Jobs, seen: list[StatusResult]
) -> tuple[StatusReactions, EventPublisher]:
    events = EventPublisher(MemoryCoordination())
    return StatusReactions(
        events=events, dispatcher=dispatcher, jobs=jobs, on_status=seen.append
    ), events


async def test_a_retry_wakes_the_dispatcher_and_the_batch_is_counted() -> None:
    dispatcher, seen = Dispatcher(), list[StatusResult]()
    react, events = reactions(dispatcher, Jobs(), seen)
    result = StatusResult(applied=[change(S.FAILED), change(S.QUEUED, S.FAILED)])
    react(result)
    assert seen == [result]
    assert dispatcher.woken == [None]
    assert events.stats.published == 0  # emitted, published later by the publisher's loop


async def test_a_final_status_wakes_the_dispatcher_only_for_a_queue_policy_job() -> None:
    skip, queue = Dispatcher(), Dispatcher()
    reactions(skip, Jobs(), [])[0](StatusResult(applied=[change(S.COMPLETED)]))
    ended = [change(S.RUNNING, S.QUEUED, queue_policy=True), change(S.FAILED, queue_policy=True)]
    reactions(queue, Jobs(), [])[0](StatusResult(applied=ended))
    assert (skip.woken, queue.woken) == ([], [None])  # its start wakes nothing; its end does


async def test_auto_disabled_jobs_leave_the_index_in_the_background(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = Jobs()
    react, _ = reactions(Dispatcher(), jobs, [])
    job_id = new_id()
    react(StatusResult(disabled=[DisabledJob(job_id=job_id, bucket=3, reason="5 failures")]))
    await eventually(lambda: jobs.dropped == [(3, job_id)], 5, "the index entry dropped")
    [record] = [r for r in caplog.records if r.name == "rota.services.reactions"]
    assert (record.levelno, record.getMessage()) == (
        logging.WARNING,
        "job auto-disabled: 5 failures",
    )


class SwitchStore:
    def __init__(self) -> None:
        self.state = DispatcherState()

    async def dispatcher_state(self) -> DispatcherState:
        return self.state

    async def set_dispatcher_state(self, state: DispatcherState) -> None:
        self.state = state


async def test_the_switch_pauses_and_resumes_only_its_own_pause() -> None:
    store, dispatcher = SwitchStore(), Dispatcher()
    follower = DispatcherSwitchFollower(store, dispatcher)  # type: ignore[arg-type]
    store.state = DispatcherState(paused=True, reason="deploy", by="ops")
    assert (await follower.follow()).paused
    assert dispatcher.paused == "deploy"
    store.state = DispatcherState()
    await follower.follow()
    assert dispatcher.paused is None
    dispatcher.pause("by other means")
    follower.apply(DispatcherState())
    assert dispatcher.paused == "by other means"


async def test_the_switch_is_read_every_interval_until_stopped() -> None:
    store, dispatcher = SwitchStore(), Dispatcher()
    follower = DispatcherSwitchFollower(store, dispatcher, interval=0.01)  # type: ignore[arg-type]
    task = asyncio.create_task(follower.run())
    store.state = DispatcherState(paused=True, reason="stop")
    await eventually(lambda: dispatcher.paused == "stop", 5, "the pause read")
    follower.stop()
    await asyncio.wait_for(task, 5)


def worker(instance: str) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance, worker_id="reports", host="h", pid=1, job_types={}, concurrency=4
    )


class Events(EventPublisher):
    def __init__(self) -> None:
        super().__init__(MemoryCoordination())
        self.emitted: list[tuple[str, str]] = []

    def emit(self, events: Iterable[Event]) -> None:
        self.emitted += [(e.data["change"], e.data["instanceId"]) for e in events]


async def test_the_roster_watcher_reports_changes_since_its_last_reading_when_reporting() -> None:
    coordination = MemoryCoordination()
    await coordination.register_worker(worker("a"), 60)
    events, reporting = Events(), [False]
    watcher = RosterWatcher(WorkerDirectory(coordination), events, lambda: reporting[0])
    await watcher.check()
    await coordination.register_worker(worker("b"), 60)
    await watcher.check()  # not the reporter: read, nothing emitted
    assert events.emitted == []
    reporting[0] = True
    await coordination.register_worker(worker("c"), 60)
    await watcher.check()
    assert events.emitted == [("joined", "c")]


class Away(MemoryCoordination):
    async def workers(self) -> list[WorkerInfo]:
        raise BackendUnavailableError("registry away")


async def test_the_roster_watcher_logs_an_unavailable_registry_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="rota.services.workers")
    watcher = RosterWatcher(WorkerDirectory(Away()), Events(), lambda: True, interval=0.01)
    task = asyncio.create_task(watcher.run())

    def records() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "rota.services.workers"]

    await eventually(lambda: len(records()) >= 2, 5, "two failed readings")
    watcher.stop()
    await asyncio.wait_for(task, 5)
    assert {r.levelno for r in records()} == {logging.DEBUG}
    assert "registry away" in records()[0].getMessage()
