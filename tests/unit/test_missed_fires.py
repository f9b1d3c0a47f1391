"""The missed-fire check on a real SQLite store with a fixed clock: a cron fire not recorded
within the grace raises ``fire_overdue`` naming the job and the fire, through the silence
monitor's alerts; recorded fires (run or Skipped) resolve it; disabled, new, edited jobs and
``execute_at`` are honoured; one store read per round."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

import msgspec
import pytest

from rota.core.ids import new_id
from rota.core.models import ConcurrencyPolicy, Job, OccurrenceStatus
from rota.core.planning import FirePlan, PlanSettings, first_run_at, new_occurrence, plan_fires
from rota.core.records import OccurrenceQuery, WatchedSchedule
from rota.services.missed import FireWatch, FireWatchConfig, overdue_fire
from rota.services.silence import FIRE_OVERDUE, Alert, SilenceConfig, SilenceMonitor
from rota.stores.sql import SqlStore

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
GRACE = 3.0
PLAN = PlanSettings()


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Counting(SqlStore):
    """The SQLite store, counting the missed-fire reads."""

    reads = 0

    async def watched_schedules(
        self,
        buckets: Sequence[int],
        since: datetime,
        until: datetime,
        limit: int,
        after: UUID | None = None,
    ) -> list[WatchedSchedule]:
        self.reads += 1
        return await super().watched_schedules(buckets, since, until, limit, after)


class Setup:
    def __init__(self, store: Counting, clock: Clock, page_size: int = 500) -> None:
        self.store = store
        self.clock = clock
        self.buckets = [0]
        self.paused: str | None = None
        self.raised: list[Alert] = []
        self.resolved: list[Alert] = []
        self.sent: list[Alert] = []
        self.monitor = SilenceMonitor(
            store,
            SilenceConfig(),
            instance_id="rota-a",
            buckets=lambda: self.buckets,
            last_tick=time.time,
            clock=clock,
            on_raised=self.raised.append,
            on_resolved=self.resolved.append,
            notify=self._send,
        )
        self.watch = FireWatch(
            store,
            FireWatchConfig(grace_seconds=GRACE, lookback_seconds=600, page_size=page_size),
            self.monitor,
            instance_id="rota-a",
            buckets=lambda: self.buckets,
            paused=lambda: self.paused,
            clock=clock,
        )

    async def _send(self, alert: Alert) -> None:
        self.sent.append(alert)

    async def job(self, cron: str = "* * * * * *", **fields: object) -> Job:
        """A cron job created now (its first fire computed as the service does)."""
        job = Job(
            id=new_id(),
            job_type="tick",
            cron_expression=cron,
            created_at=self.clock.now,
            updated_at=self.clock.now,
            **fields,  # type: ignore[arg-type]
        )
        job = msgspec.structs.replace(job, next_run_at=first_run_at(job, self.clock.now))
        await self.store.create_jobs([job])
        return job

    async def dispatch(self, *jobs: Job) -> None:
        """The dispatcher's work at the current time: every fire up to now recorded."""

        def planner(job: Job, active: int, now: datetime) -> FirePlan:
            return plan_fires(job, active, now, PLAN)

        await self.store.dispatch_due([j.id for j in jobs], self.clock.now, planner)

    def overdue(self) -> dict[UUID, Alert]:
        return {a.job_id: a for a in self.monitor.active if a.kind == FIRE_OVERDUE and a.job_id}


@pytest.fixture
async def counting(url: str) -> AsyncIterator[Counting]:
    store = Counting(url)
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def setup(counting: Counting) -> Setup:
    return Setup(counting, Clock(T0))


async def test_a_fire_not_recorded_within_the_grace_raises_an_alert_naming_it(
    setup: Setup,
) -> None:
    job = await setup.job(display_name="heartbeat")
    setup.clock.now = T0 + (GRACE + 0.5) * SECOND  # T0+1 s is due, within the grace
    assert await setup.watch.check() == []
    setup.clock.now = T0 + (GRACE + 1.5) * SECOND  # T0+1 s is now past the grace
    [alert] = await setup.watch.check()
    assert alert.kind == FIRE_OVERDUE
    assert alert.key == f"fire:{job.id}"
    assert (alert.job_id, alert.job_type) == (job.id, "tick")
    assert alert.expected_at == T0 + SECOND
    assert alert.instance_id == "rota-a"
    assert f"job heartbeat ({job.id})" in alert.message
    assert (T0 + SECOND).isoformat() in alert.message
    assert "not recorded 3.5 s later" in alert.message
    assert setup.overdue() == {job.id: alert}
    assert setup.raised == [alert]
    assert setup.watch.overdue == 1
    await setup.watch.check()  # raised once, while it lasts
    assert setup.raised == [alert]
    assert setup.sent == [alert]  # the webhook, as for the other silence alerts


async def test_fires_resuming_resolve_it(setup: Setup) -> None:
    job = await setup.job()
    setup.clock.now = T0 + 10 * SECOND
    await setup.watch.check()
    assert job.id in setup.overdue()
    await setup.dispatch(job)  # the dispatcher is back: T0+1 … T0+10 recorded
    assert await setup.watch.check() == []
    assert setup.overdue() == {}
    [resolved] = setup.resolved
    assert resolved.job_id == job.id
    assert resolved.resolved_at == T0 + 10 * SECOND
    assert setup.monitor.recent == [resolved]
    assert setup.watch.overdue == 0
    # and it is raised again only for a new missing fire
    setup.clock.now = T0 + (10 + GRACE + 1.5) * SECOND
    [again] = await setup.watch.check()
    assert again.expected_at == T0 + 11 * SECOND


async def test_fires_recorded_on_time_raise_nothing(setup: Setup) -> None:
    job = await setup.job()
    for second in range(1, 20):
        setup.clock.now = T0 + second * SECOND
        await setup.dispatch(job)
        assert await setup.watch.check() == []
    assert setup.raised == []


async def test_a_skipped_fire_counts_as_recorded(setup: Setup, counting: Counting) -> None:
    # Skip policy with an occurrence still running: each fire is recorded Skipped (overlap).
    job = await setup.job(concurrency_policy=ConcurrencyPolicy.SKIP)
    setup.clock.now = T0 + SECOND
    await setup.dispatch(job)
    setup.clock.now = T0 + 10 * SECOND
    await setup.dispatch(job)
    page = await counting.list_occurrences(OccurrenceQuery(job_id=job.id))
    statuses = sorted((o.scheduled_for, o.status) for o in page.items)
    assert statuses[0] == (T0 + SECOND, OccurrenceStatus.QUEUED)
    assert {s for _, s in statuses[1:]} == {OccurrenceStatus.SKIPPED}
    assert len(statuses) == 10
    assert await setup.watch.check() == []


async def test_a_manual_run_is_no_fire(setup: Setup, counting: Counting) -> None:
    job = await setup.job()
    setup.clock.now = T0 + 10 * SECOND
    manual = new_occurrence(job, setup.clock.now - 4 * SECOND, setup.clock.now, PLAN,
                            trigger_reason="manual")  # fmt: skip
    await counting.insert_occurrences([manual])
    [alert] = await setup.watch.check()
    assert alert.expected_at == T0 + SECOND


async def test_disabled_jobs_expect_no_fire(setup: Setup) -> None:
    await setup.job(is_active=False)
    setup.clock.now = T0 + 60 * SECOND
    assert await setup.watch.check() == []


async def test_fires_are_expected_only_after_a_job_is_created_or_changed(setup: Setup) -> None:
    setup.clock.now = T0 + 30 * SECOND
    new = await setup.job()
    edited = await setup.job("*/2 * * * * *")
    setup.clock.now = T0 + (30 + GRACE) * SECOND
    assert await setup.watch.check() == []  # nothing due before their creation
    # an edit moves the start: the fires before it are not expected any more
    setup.clock.now = T0 + 50 * SECOND
    changed = msgspec.structs.replace(
        edited, cron_expression="0 * * * * *", updated_at=setup.clock.now
    )
    await setup.store.update_job(changed, expected_version=edited.version)
    found = await setup.watch.check()
    assert [a.job_id for a in found] == [new.id]
    assert found[0].expected_at == T0 + 31 * SECOND
    setup.clock.now = T0 + (60 + GRACE + 1) * SECOND
    found = await setup.watch.check()
    assert {a.job_id: a.expected_at for a in found} == {
        new.id: T0 + 31 * SECOND,  # its first missing fire, still
        edited.id: T0 + 60 * SECOND,
    }


async def test_no_fire_is_expected_before_execute_at(setup: Setup) -> None:
    job = await setup.job(execute_at=T0 + 20 * SECOND)
    setup.clock.now = T0 + (19 + GRACE) * SECOND
    assert await setup.watch.check() == []
    setup.clock.now = T0 + (21 + GRACE) * SECOND
    [alert] = await setup.watch.check()
    assert (alert.job_id, alert.expected_at) == (job.id, T0 + 20 * SECOND)


async def test_a_paused_dispatcher_is_named_on_each_job(setup: Setup) -> None:
    jobs = [await setup.job() for _ in range(3)]
    setup.paused = "maintenance window"
    setup.clock.now = T0 + (GRACE + 1.5) * SECOND
    found = await setup.watch.check()
    assert sorted(a.job_id for a in found if a.job_id) == sorted(j.id for j in jobs)
    assert all("(the dispatcher is paused: maintenance window)" in a.message for a in found)


async def test_only_the_jobs_of_its_buckets(setup: Setup) -> None:
    mine = await setup.job(bucket=0)
    theirs = await setup.job(bucket=1)
    setup.clock.now = T0 + 10 * SECOND
    assert [a.job_id for a in await setup.watch.check()] == [mine.id]
    setup.buckets = [1]  # the bucket moved: its alert goes, the other server raises it
    assert [a.job_id for a in await setup.watch.check()] == [theirs.id]
    assert [a.job_id for a in setup.resolved] == [mine.id]
    setup.buckets = []
    assert await setup.watch.check() == []
    assert setup.overdue() == {}


async def test_two_servers_share_the_jobs_by_bucket(setup: Setup, counting: Counting) -> None:
    jobs = [await setup.job(bucket=b % 4) for b in range(8)]
    other = Setup(counting, setup.clock)
    setup.buckets, other.buckets = [0, 2], [1, 3]
    setup.clock.now = T0 + 10 * SECOND
    mine = {a.job_id for a in await setup.watch.check()}
    theirs = {a.job_id for a in await other.watch.check()}
    assert mine == {j.id for j in jobs if j.bucket in (0, 2)}
    assert theirs == {j.id for j in jobs if j.bucket in (1, 3)}  # each job once, by one server


async def test_one_store_read_per_round_whatever_the_number_of_jobs(
    setup: Setup, counting: Counting
) -> None:
    for _ in range(40):
        await setup.job()
    setup.clock.now = T0 + 10 * SECOND
    assert len(await setup.watch.check()) == 40
    assert counting.reads == 1
    paged = Setup(counting, setup.clock, page_size=15)
    assert len(await paged.watch.check()) == 40
    assert counting.reads == 1 + 3  # pages of 15


async def test_the_silence_monitors_own_kinds_are_left_alone(setup: Setup) -> None:
    await setup.job()
    setup.clock.now = T0 + 10 * SECOND
    await setup.watch.check()
    stalled = Alert(
        kind="dispatcher_stalled",
        key="dispatcher:rota-a",
        message="stalled",
        raised_at=setup.clock.now,
        instance_id="rota-a",
    )
    setup.monitor.settle("dispatcher_stalled", [stalled], setup.clock.now)
    setup.buckets = []
    await setup.watch.check()
    assert [a.kind for a in setup.monitor.active] == ["dispatcher_stalled"]


def test_the_first_fire_after_the_latest_recorded_one() -> None:
    schedule = WatchedSchedule(
        job_id=new_id(),
        job_type="tick",
        display_name="",
        cron_expression="*/10 * * * * *",
        time_zone="UTC",
        execute_at=None,
        created_at=T0,
        updated_at=T0,
        last_fire=T0 + 20 * SECOND,
    )
    since = T0 - 60 * SECOND
    assert overdue_fire(schedule, since, T0 + 29 * SECOND) is None
    assert overdue_fire(schedule, since, T0 + 30 * SECOND) == T0 + 30 * SECOND
    assert overdue_fire(replace(schedule, last_fire=None), since, T0 + 30 * SECOND) == (
        T0 + 10 * SECOND
    )
    broken = replace(schedule, cron_expression="not a cron")
    assert overdue_fire(broken, since, T0 + 60 * SECOND) is None


def test_an_interval_jobs_expected_fire() -> None:
    """Every 90 s from its start: the fire after the latest recorded one is expected."""
    schedule = WatchedSchedule(
        job_id=new_id(),
        job_type="tick",
        display_name="",
        cron_expression=None,
        interval_seconds=90,
        time_zone="UTC",
        execute_at=None,
        created_at=T0,
        updated_at=T0,
        start_at=T0,
        last_fire=T0 + 90 * SECOND,
    )
    since = T0 - 60 * SECOND
    assert overdue_fire(schedule, since, T0 + 179 * SECOND) is None
    assert overdue_fire(schedule, since, T0 + 180 * SECOND) == T0 + 180 * SECOND
    assert overdue_fire(replace(schedule, last_fire=None), since, T0 + 180 * SECOND) == (
        T0 + 90 * SECOND  # start_at itself is a fire, but none is expected at the creation
    )
