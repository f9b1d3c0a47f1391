"""JobService on a real SQLite store with the in-memory index and coordination, fixed clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from rota.app.configs import jobs_config
from rota.app.settings import SchedulerSettings
from rota.coordination.memory import MemoryCoordination
from rota.core.errors import (
    BackendUnavailableError,
    ConflictError,
    CronError,
    NotFoundError,
    ValidationError,
)
from rota.core.ids import bucket_of
from rota.core.jobspec import JobSpec
from rota.core.models import (
    ConcurrencyPolicy,
    OccurrenceStatus,
    Priority,
    StatusRecord,
    WorkerInfo,
)
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.records import IndexEntry, OccurrenceQuery
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.jobs import JobService
from rota.stores.sql import SqlStore

T0 = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)  # a Monday, 30 s past noon
ALL_BUCKETS = list(range(16))


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class RecordingCoordination(MemoryCoordination):
    """The memory adapter, remembering every wake-up."""

    def __init__(self) -> None:
        super().__init__()
        self.woken: list[float] = []

    async def wake(self, due: float) -> None:
        self.woken.append(due)
        await super().wake(due)


class BrokenIndex(MemoryScheduleIndex):
    async def upsert(self, entries: Sequence[IndexEntry]) -> None:
        raise BackendUnavailableError("index down")


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def index() -> MemoryScheduleIndex:
    return MemoryScheduleIndex()


@pytest.fixture
def coordination() -> RecordingCoordination:
    return RecordingCoordination()


@pytest.fixture
def service(
    store: SqlStore, index: MemoryScheduleIndex, coordination: RecordingCoordination, clock: Clock
) -> JobService:
    return JobService(store, index, coordination, jobs_config(SchedulerSettings()), clock)


def every_minute(**kw: Any) -> JobSpec:
    return JobSpec(job_type="report", cron_expression="* * * * *", **kw)


async def indexed(index: MemoryScheduleIndex) -> dict[UUID, float]:
    entries = await index.due(ALL_BUCKETS, float("inf"), 1000)
    return {e.job_id: e.due for e in entries}


def worker(instance: str, group: str, *job_types: str) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance,
        worker_id=group,
        host="h",
        pid=1,
        job_types={t: {} for t in job_types},
        concurrency=1,
    )


# --- create ----------------------------------------------------------------------------------


async def test_create_cron_job_stores_it_and_indexes_a_hot_fire(
    service: JobService, index: MemoryScheduleIndex, coordination: RecordingCoordination
) -> None:
    job = await service.create_job(every_minute(tags="a, b,,a", job_data={"x": 1}))

    assert job.id.version == 7
    assert job.bucket == bucket_of(job.id, 16)
    assert job.next_run_at == datetime(2026, 1, 5, 12, 1, tzinfo=UTC)
    assert job.display_name == "report"
    assert job.tags == ("a", "b")
    assert job.created_at == job.updated_at == T0
    assert await service.get_job(job.id) == job
    assert await indexed(index) == {job.id: job.next_run_at.timestamp()}
    assert coordination.woken == [job.next_run_at.timestamp()]


async def test_far_future_and_inactive_jobs_stay_out_of_the_index(
    service: JobService, index: MemoryScheduleIndex, coordination: RecordingCoordination
) -> None:
    far = await service.create_job(JobSpec(job_type="t", cron_expression="0 0 1 1 *"))
    off = await service.create_job(every_minute(is_active=False))

    assert far.next_run_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert off.next_run_at is None
    assert await indexed(index) == {}
    assert coordination.woken == []


async def test_one_time_job_runs_at_its_time_even_if_past_and_naive_means_utc(
    service: JobService, index: MemoryScheduleIndex
) -> None:
    past = datetime(2026, 1, 5, 11, 0)  # naive
    job = await service.create_job(JobSpec(job_type="t", execute_at=past, time_zone="Asia/Tokyo"))

    assert job.execute_at == past.replace(tzinfo=UTC)
    assert job.next_run_at == job.execute_at
    assert job.cron_expression is None
    assert job.id in await indexed(index)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (JobSpec(job_type=" ", cron_expression="* * * * *"), "jobType"),
        (every_minute(priority=7), "priority"),
        (every_minute(concurrency_policy=5), "concurrentExecutionPolicy"),
        (every_minute(misfire_policy="sometimes"), "misfirePolicy"),
        (every_minute(max_retries=-1), "maxRetries"),
        (every_minute(timeout_seconds=0), "timeoutSeconds"),
        (every_minute(retry_delay_seconds=-5), "retryDelaySeconds"),
        (JobSpec(job_type="t", execute_at=T0, time_zone="Mars/Base"), "timeZone"),
    ],
)
async def test_invalid_specs_are_refused_with_the_field(
    service: JobService, spec: JobSpec, field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        await service.create_job(spec)
    assert info.value.field == field
    assert (await service.list_jobs()).items == []


async def test_bad_cron_and_zone_name_their_field(service: JobService) -> None:
    with pytest.raises(CronError) as bad_cron:
        await service.create_job(JobSpec(job_type="t", cron_expression="61 * * * *"))
    assert bad_cron.value.field == "cronExpression"
    assert bad_cron.value.part == "minute"

    with pytest.raises(CronError) as bad_zone:
        await service.create_job(every_minute(time_zone="Nowhere/City"))
    assert bad_zone.value.field == "timeZone"


async def test_bulk_create_is_all_or_nothing_and_names_the_position(
    service: JobService, index: MemoryScheduleIndex
) -> None:
    with pytest.raises(ValidationError) as info:
        await service.create_jobs([every_minute(), JobSpec(job_type="t", cron_expression="x")])
    assert info.value.field == "[1].cronExpression"
    assert (await service.list_jobs()).items == []

    created = await service.create_jobs([every_minute(), every_minute(display_name="second")])
    assert len(created) == 2
    listed = await service.list_jobs()
    assert {j.id for j in listed.items} == {j.id for j in created}
    assert set(await indexed(index)) == {j.id for j in created}


async def test_mapping_specs_are_accepted_and_unknown_keys_refused(service: JobService) -> None:
    job = await service.create_job({"job_type": "t", "cron_expression": "@daily"})
    assert job.next_run_at == datetime(2026, 1, 6, tzinfo=UTC)

    with pytest.raises(ValidationError) as info:
        await service.create_job({"job_type": "t", "cron_expression": "@daily", "colour": 1})
    assert info.value.field == "colour"


async def test_worker_id_is_resolved_from_the_one_group_declaring_the_type(
    service: JobService, coordination: RecordingCoordination
) -> None:
    await coordination.register_worker(worker("m-1", "mail", "send"), 60)
    await coordination.register_worker(worker("m-2", "mail", "send"), 60)
    await coordination.register_worker(worker("r-1", "reports", "report", "shared"), 60)
    await coordination.register_worker(worker("o-1", "other", "shared"), 60)

    async def resolved(job_type: str, worker_id: str | None = None) -> str | None:
        spec = JobSpec(job_type=job_type, worker_id=worker_id, cron_expression="@daily")
        return (await service.create_job(spec)).worker_id

    assert await resolved("send") == "mail"
    assert await resolved("shared") is None  # ambiguous
    assert await resolved("unknown") is None  # no worker yet: accepted anyway
    assert await resolved("send", "explicit") == "explicit"
    assert await service.resolve_worker_id("report", None) == "reports"
    assert await service.resolve_worker_id("shared", None) is None


# --- update ----------------------------------------------------------------------------------


async def test_non_versioned_change_keeps_version_and_schedule(
    service: JobService, clock: Clock
) -> None:
    job = await service.create_job(every_minute())
    clock.advance(600)

    changed = await service.update_job(
        job.id, {"display_name": "Daily", "description": "d", "tags": ["x"]}, by="ann"
    )

    assert changed.version == 1
    assert changed.display_name == "Daily"
    assert changed.tags == ("x",)
    assert changed.next_run_at == job.next_run_at
    assert changed.updated_at == clock.now
    assert changed.updated_by == "ann"
    assert await service.job_versions(job.id) == []


async def test_versioned_change_bumps_version_and_keeps_snapshot(service: JobService) -> None:
    job = await service.create_job(every_minute(job_data={"v": 1}))

    changed = await service.update_job(job.id, {"job_data": {"v": 2}})

    assert changed.version == 2
    assert (await service.get_job(job.id)).job_data == {"v": 2}
    versions = await service.job_versions(job.id)
    assert [v.version for v in versions] == [1]
    assert versions[0].snapshot["jobData"] == {"v": 1}


async def test_a_change_of_any_setting_is_a_new_version(service: JobService) -> None:
    job = await service.create_job(every_minute())

    changed = await service.update_job(
        job.id, {"priority": 4, "timeout_seconds": 12.5, "max_retries": 3}
    )

    assert changed.version == 2
    assert changed.priority is Priority.CRITICAL
    (old,) = await service.job_versions(job.id)
    assert (old.snapshot["priority"], old.snapshot["timeoutSeconds"]) == (2, None)
    assert old.snapshot["maxRetries"] == job.max_retries
    again = await service.update_job(job.id, {"misfire_policy": "skip"})
    assert again.version == 3


async def test_schedule_change_recomputes_next_fire_and_index(
    service: JobService, index: MemoryScheduleIndex, coordination: RecordingCoordination
) -> None:
    job = await service.create_job(every_minute())
    assert job.id in await indexed(index)

    far = await service.update_job(job.id, {"cron_expression": "0 0 1 1 *"})
    assert far.version == 2
    assert far.next_run_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert await indexed(index) == {}

    soon = await service.update_job(job.id, {"cron_expression": "*/10 * * * * *"})
    assert soon.next_run_at == datetime(2026, 1, 5, 12, 0, 40, tzinfo=UTC)
    assert await indexed(index) == {job.id: soon.next_run_at.timestamp()}
    assert coordination.woken[-1] == soon.next_run_at.timestamp()


async def test_deactivate_and_reactivate(
    service: JobService, index: MemoryScheduleIndex, clock: Clock
) -> None:
    job = await service.create_job(every_minute())

    off = await service.update_job(job.id, {"is_active": False})
    assert (off.is_active, off.next_run_at, off.version) == (False, None, 1)
    assert await indexed(index) == {}

    clock.advance(3600)  # missed fires while disabled are not owed
    on = await service.update_job(job.id, {"is_active": True})
    assert on.next_run_at == datetime(2026, 1, 5, 13, 1, tzinfo=UTC)
    assert job.id in await indexed(index)


async def test_one_time_job_switched_back_on_after_it_ran_does_not_run_again(
    service: JobService, store: SqlStore
) -> None:
    job = await service.create_job(JobSpec(job_type="t", execute_at=T0))
    assert job.execute_at is not None
    await store.insert_occurrences([new_occurrence(job, job.execute_at, T0, PlanSettings())])
    await service.update_job(job.id, {"is_active": False})

    again = await service.update_job(job.id, {"is_active": True})

    assert again.next_run_at is None


async def test_one_time_job_switched_on_before_it_ran_is_due(service: JobService) -> None:
    job = await service.create_job(JobSpec(job_type="t", execute_at=T0, is_active=False))
    assert job.next_run_at is None

    on = await service.update_job(job.id, {"is_active": True})

    assert on.next_run_at == T0


async def test_cron_with_execute_at_starts_at_execute_at(service: JobService) -> None:
    """The reference's sample job: both fields; the cron is the schedule, from executeAt on."""
    at = T0 + timedelta(hours=2)  # 14:00:30
    job = await service.create_job(every_minute(execute_at=at))
    assert (job.cron_expression, job.execute_at) == ("* * * * *", at)
    assert job.next_run_at == datetime(2026, 1, 5, 14, 1, tzinfo=UTC)
    on_a_fire = await service.create_job(every_minute(execute_at=at.replace(second=0)))
    assert on_a_fire.next_run_at == at.replace(second=0)  # a fire at executeAt itself counts
    past = await service.create_job(every_minute(execute_at=T0 - timedelta(days=1)))
    assert past.next_run_at == datetime(2026, 1, 5, 12, 1, tzinfo=UTC)  # as without it


async def test_execute_at_added_to_a_cron_job_delays_its_fires(service: JobService) -> None:
    job = await service.create_job(every_minute())
    at = T0 + timedelta(hours=1)

    changed = await service.update_job(job.id, {"execute_at": at})

    assert changed.cron_expression == "* * * * *"
    assert changed.next_run_at == datetime(2026, 1, 5, 13, 1, tzinfo=UTC)
    assert changed.version == 2


async def test_switch_from_cron_to_one_time(service: JobService) -> None:
    job = await service.create_job(every_minute())
    at = T0 + timedelta(hours=1)

    changed = await service.update_job(job.id, {"execute_at": at, "cron_expression": None})
    assert (changed.cron_expression, changed.execute_at, changed.next_run_at) == (None, at, at)
    assert changed.version == 2


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"id": "x"}, "id"),
        ({"version": 9}, "version"),
        ({"job_type": None}, "jobType"),
        ({"is_active": "yes"}, "isActive"),
        ({"cron_expression": "not cron"}, "cronExpression"),
        ({"priority": -1}, "priority"),
    ],
)
async def test_invalid_changes_are_refused_and_nothing_changes(
    service: JobService, changes: dict[str, Any], field: str
) -> None:
    job = await service.create_job(every_minute())

    with pytest.raises(ValidationError) as info:
        await service.update_job(job.id, changes)

    assert info.value.field == field
    assert await service.get_job(job.id) == job


async def test_update_of_missing_job_is_not_found(service: JobService) -> None:
    job = await service.create_job(every_minute())
    await service.delete_job(job.id)
    with pytest.raises(NotFoundError):
        await service.update_job(job.id, {"display_name": "x"})


# --- delete ----------------------------------------------------------------------------------


async def test_delete_removes_job_and_index_entry(
    service: JobService, index: MemoryScheduleIndex
) -> None:
    job = await service.create_job(every_minute())
    other = await service.create_job(every_minute())

    await service.delete_job(job.id)

    with pytest.raises(NotFoundError):
        await service.get_job(job.id)
    with pytest.raises(NotFoundError):
        await service.delete_job(job.id)
    assert set(await indexed(index)) == {other.id}


async def test_durations_must_be_finite_and_at_most_ten_years(service: JobService) -> None:
    for value in (315_576_001.0, float("inf"), float("nan")):
        with pytest.raises(ValidationError) as info:
            await service.create_job(every_minute(retry_delay_seconds=value))
        assert info.value.field == "retryDelaySeconds"
    job = await service.create_job(every_minute(zombie_threshold_seconds=315_576_000))
    with pytest.raises(ValidationError) as updated:
        await service.update_job(job.id, {"auto_disable_cooldown_seconds": 1e12})
    assert updated.value.field == "autoDisableCooldownSeconds"


async def test_job_data_nested_too_deeply_is_refused_on_jobdata(
    store: SqlStore, index: MemoryScheduleIndex, coordination: RecordingCoordination, clock: Clock
) -> None:
    """Job data from any caller (the API, a code declaration) is measured without recursion:
    even far past the interpreter's recursion limit it is a ValidationError, not a crash."""
    service = JobService(
        store, index, coordination, jobs_config(SchedulerSettings()), clock, max_json_depth=3
    )
    fits: Any = {"a": [[1]]}
    job = await service.create_job(every_minute(job_data=fits))
    over: Any = {"a": [[[1]]]}
    far: Any = 1
    for _ in range(50_000):
        far = [far]
    for data in (over, far):
        with pytest.raises(ValidationError, match="nested more than 3 levels") as created:
            await service.create_job(every_minute(job_data=data))
        assert created.value.field == "jobData"
    with pytest.raises(ValidationError) as bulk:
        await service.create_jobs([every_minute(), every_minute(job_data=over)])
    assert bulk.value.field == "[1].jobData"
    with pytest.raises(ValidationError) as updated:
        await service.update_job(job.id, {"job_data": far})
    assert updated.value.field == "jobData"
    with pytest.raises(ValidationError) as triggered:
        await service.trigger(job.id, job_data=far)
    assert triggered.value.field == "jobData"
    assert (await service.get_job(job.id)).job_data == fits
    assert (await store.list_occurrences(OccurrenceQuery(job_id=job.id))).items == []


async def test_job_data_over_the_limit_is_refused_on_jobdata(
    store: SqlStore, index: MemoryScheduleIndex, coordination: RecordingCoordination, clock: Clock
) -> None:
    service = JobService(
        store, index, coordination, jobs_config(SchedulerSettings()), clock, max_job_data_bytes=100
    )
    fits = {"text": "a" + "é" * 44}  # {"text":""} is 11 bytes, + 1 + 88: exactly 100
    over = {"text": "é" * 45}  # 101
    job = await service.create_job(every_minute(job_data=fits))
    assert job.job_data == fits

    with pytest.raises(ValidationError) as created:
        await service.create_job(every_minute(job_data=over))
    assert created.value.field == "jobData"
    assert "101 bytes" in created.value.message
    assert "limit is 100" in created.value.message
    with pytest.raises(ValidationError) as bulk:
        await service.create_jobs([every_minute(), every_minute(job_data="x" * 101)])
    assert bulk.value.field == "[1].jobData"
    with pytest.raises(ValidationError) as updated:
        await service.update_job(job.id, {"job_data": ["y" * 100]})
    assert updated.value.field == "jobData"
    with pytest.raises(ValidationError) as triggered:
        await service.trigger(job.id, job_data=over)
    assert triggered.value.field == "jobData"

    assert [j.id for j in (await service.list_jobs()).items] == [job.id]
    assert (await service.get_job(job.id)).job_data == fits
    assert (await store.list_occurrences(OccurrenceQuery(job_id=job.id))).items == []


# --- trigger ---------------------------------------------------------------------------------


async def test_trigger_inserts_an_undispatched_queued_occurrence_and_wakes(
    service: JobService, store: SqlStore, coordination: RecordingCoordination, clock: Clock
) -> None:
    await coordination.register_worker(worker("w-1", "tests", "t"), 60)
    job = await service.create_job(JobSpec(job_type="t", cron_expression="0 0 1 1 *", job_data=[1]))

    occurrence = await service.trigger(job.id, reason="by hand", job_data={"once": True})

    stored = await store.get_occurrence(occurrence.id)
    assert stored.status is OccurrenceStatus.QUEUED
    assert stored.dispatched_at is None
    assert stored.scheduled_for == clock.now
    assert stored.trigger_reason == "by hand"
    assert stored.job_data == {"once": True}
    assert [c.to_status for c in stored.status_changes] == [OccurrenceStatus.QUEUED]
    assert coordination.woken == [clock.now.timestamp()]
    assert [o.id for o in await store.undispatched(clock.now, 10)] == [occurrence.id]


async def test_trigger_uses_job_data_and_a_default_reason(
    service: JobService, store: SqlStore
) -> None:
    job = await service.create_job(every_minute(job_data={"d": 1}))
    occurrence = await service.trigger(job.id)
    stored = await store.get_occurrence(occurrence.id)
    assert stored.job_data == {"d": 1}
    assert stored.trigger_reason == "manual"


async def test_trigger_with_skip_policy_refuses_overlap_unless_forced(
    service: JobService, store: SqlStore, clock: Clock, coordination: RecordingCoordination
) -> None:
    await coordination.register_worker(worker("w-1", "reports", "report"), 60)
    job = await service.create_job(every_minute())
    first = await service.trigger(job.id)
    clock.advance(1)

    with pytest.raises(ConflictError):
        await service.trigger(job.id)

    forced = await service.trigger(job.id, force=True)
    assert forced.id != first.id

    for occ in (first, forced):
        await store.apply_status(
            [StatusRecord(occurrence_id=occ.id, status=OccurrenceStatus.COMPLETED, timestamp=T0)]
        )
    clock.advance(1)
    assert (await service.trigger(job.id)).status is OccurrenceStatus.QUEUED


async def test_trigger_with_queue_policy_queues_behind(
    service: JobService, clock: Clock, coordination: RecordingCoordination
) -> None:
    await coordination.register_worker(worker("w-1", "reports", "report"), 60)
    job = await service.create_job(every_minute(concurrency_policy=ConcurrencyPolicy.QUEUE))
    await service.trigger(job.id)
    clock.advance(1)
    second = await service.trigger(job.id)
    assert second.status is OccurrenceStatus.QUEUED


async def test_a_trigger_of_a_type_no_worker_ever_declared_is_skipped_no_worker(
    service: JobService, store: SqlStore, coordination: RecordingCoordination, clock: Clock
) -> None:
    job = await service.create_job(every_minute(concurrency_policy=ConcurrencyPolicy.QUEUE))
    assert [w.code for w in service.job_warnings(job)] == ["unknown_job_type"]
    skipped = await store.get_occurrence((await service.trigger(job.id, reason="by hand")).id)
    assert (skipped.status, skipped.skip_reason) == (OccurrenceStatus.SKIPPED, "no_worker")
    assert skipped.trigger_reason == "by hand"

    await coordination.register_worker(worker("w-1", "reports", "report"), 60)
    clock.advance(1)
    assert (await service.trigger(job.id)).status is OccurrenceStatus.QUEUED
    await coordination.unregister_worker("w-1")  # declared before, down now: it waits
    clock.advance(1)
    assert (await service.trigger(job.id)).status is OccurrenceStatus.QUEUED
    assert [w.code for w in service.job_warnings(job)] == ["no_live_worker"]


async def test_trigger_of_missing_job_is_not_found(service: JobService) -> None:
    job = await service.create_job(every_minute())
    await service.delete_job(job.id)
    with pytest.raises(NotFoundError):
        await service.trigger(job.id)


# --- preview and resilience ------------------------------------------------------------------


def test_preview_follows_the_time_zone(service: JobService) -> None:
    fires = service.preview("0 9 * * *", "Europe/Berlin", count=3)
    assert fires == [datetime(2026, 1, d, 8, 0, tzinfo=UTC) for d in (6, 7, 8)]

    after = datetime(2026, 7, 1, tzinfo=UTC)
    assert service.preview("0 9 * * *", "Europe/Berlin", after, 1) == [
        datetime(2026, 7, 1, 7, 0, tzinfo=UTC)
    ]


def test_preview_refuses_bad_input(service: JobService) -> None:
    with pytest.raises(ValidationError) as count:
        service.preview("* * * * *", count=0)
    assert count.value.field == "count"
    with pytest.raises(CronError) as zone:
        service.preview("* * * * *", "Bad/Zone")
    assert zone.value.field == "timeZone"


async def test_index_outage_does_not_fail_the_write(
    store: SqlStore, coordination: RecordingCoordination, clock: Clock
) -> None:
    service = JobService(
        store, BrokenIndex(), coordination, jobs_config(SchedulerSettings()), clock
    )

    job = await service.create_job(every_minute())

    assert await service.get_job(job.id) == job
    assert coordination.woken == []  # nothing indexed, nothing to wake for
