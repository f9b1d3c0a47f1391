"""Auto-disable: the pure rules, and the job service's side (manual re-enable and disable,
probe runs after the cooldown) on a real SQLite store with a fixed clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from msgspec.structs import replace

from rota.app.configs import jobs_config
from rota.app.settings import SchedulerSettings
from rota.coordination.memory import MemoryCoordination
from rota.core.autodisable import (
    AutoDisableDefaults,
    disable_reason,
    effective,
    exception_head,
    next_count,
    probe_due,
)
from rota.core.ids import new_id
from rota.core.jobspec import JobSpec
from rota.core.models import Job, OccurrenceStatus, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.jobs import JobService
from rota.services.probes import ProbeReleaser
from rota.stores.sql import SqlStore

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
ALL = list(range(16))


# --- pure rules -------------------------------------------------------------------------------


def test_next_count_restarts_after_the_window() -> None:
    assert next_count(0, None, T0, 60) == 1
    assert next_count(2, T0, T0 + timedelta(seconds=60), 60) == 3
    assert next_count(2, T0, T0 + timedelta(seconds=61), 60) == 1
    assert next_count(2, T0, T0 - timedelta(seconds=5), 60) == 3  # out of order: continues
    assert next_count(0, T0, T0, 60) == 1  # reset by a success: starts again


def test_reason_names_count_window_and_the_last_exception_head() -> None:
    text = "ValueError: bad row\nTraceback (most recent call last):\n  File …"
    assert disable_reason(5, 3600, text) == (
        "5 consecutive failures within 60 min; last: ValueError: bad row"
    )
    assert disable_reason(2, 90, None) == (
        "2 consecutive failures within 90 s; last: no exception recorded"
    )
    assert len(exception_head("x" * 1000)) == 200


def test_effective_settings_fall_back_to_the_defaults() -> None:
    defaults = AutoDisableDefaults(5, 3600.0, 600.0)
    job = Job(id=new_id(), job_type="t", cron_expression="* * * * *", auto_disable_threshold=0)
    assert effective(job, defaults) == effective(job, defaults).__class__(0, 3600.0, 600.0)


def test_probe_due_only_after_the_cooldown_for_auto_disabled_recurring_jobs() -> None:
    defaults = AutoDisableDefaults(5, 3600.0, 600.0)
    job = Job(
        id=new_id(),
        job_type="t",
        cron_expression="* * * * *",
        is_active=False,
        disabled_reason="5 consecutive failures",
        disabled_at=T0,
    )
    assert not probe_due(job, defaults, T0 + timedelta(seconds=599))
    assert probe_due(job, defaults, T0 + timedelta(seconds=600))
    assert not probe_due(job, AutoDisableDefaults(5, 3600.0, None), T0 + timedelta(days=9))
    own = replace(job, auto_disable_cooldown_seconds=60.0)
    assert probe_due(own, AutoDisableDefaults(), T0 + timedelta(seconds=60))
    manual = replace(job, disabled_reason=None, disabled_at=None)
    assert not probe_due(manual, defaults, T0 + timedelta(days=1))
    one_time = replace(job, cron_expression=None, execute_at=T0)
    assert not probe_due(one_time, defaults, T0 + timedelta(days=1))


# --- the job service --------------------------------------------------------------------------


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def index() -> MemoryScheduleIndex:
    return MemoryScheduleIndex()


@pytest.fixture
async def service(url: str, clock: Clock, index: MemoryScheduleIndex) -> AsyncIterator[JobService]:
    settings = SchedulerSettings(
        auto_disable_threshold=2, auto_disable_window_seconds=600, auto_disable_cooldown_seconds=300
    )
    store = SqlStore(url, auto_disable=settings.auto_disable)
    await store.open()
    yield JobService(store, index, MemoryCoordination(), jobs_config(settings), clock)
    await store.close()


async def fail_twice(service: JobService, job: Job, at: datetime) -> None:
    store = service._store
    for i in range(2):
        occ = new_occurrence(job, at + timedelta(seconds=i), at, PlanSettings())
        await store.insert_occurrences([occ])
        end = StatusRecord(
            occurrence_id=occ.id, status=S.FAILED, timestamp=at, exception="RuntimeError: no"
        )
        result = await store.apply_status([end])
        await service.drop_disabled([(d.bucket, d.job_id) for d in result.disabled])


async def test_auto_disabled_job_is_re_enabled_by_hand(
    service: JobService, clock: Clock, index: MemoryScheduleIndex
) -> None:
    job = await service.create_job(JobSpec(job_type="sync", cron_expression="* * * * *"))
    assert await index.size(ALL) == 1
    await fail_twice(service, job, T0)
    disabled = await service.get_job(job.id)
    assert not disabled.is_active
    assert disabled.disabled_reason is not None
    assert await index.size(ALL) == 0  # it left the schedule index

    clock.now = T0 + timedelta(minutes=1)
    enabled = await service.update_job(job.id, {"is_active": True})
    assert enabled.is_active
    assert enabled.next_run_at == datetime(2030, 1, 1, 12, 2, tzinfo=UTC)
    assert (enabled.disabled_reason, enabled.disabled_at, enabled.probing) == (None, None, False)
    assert (enabled.consecutive_failures, enabled.last_failure_at) == (0, None)
    assert await index.size(ALL) == 1


async def test_other_changes_leave_the_auto_disable_state_alone(service: JobService) -> None:
    job = await service.create_job(JobSpec(job_type="sync", cron_expression="* * * * *"))
    await fail_twice(service, job, T0)
    changed = await service.update_job(job.id, {"description": "x", "auto_disable_threshold": 9})
    assert not changed.is_active
    assert changed.disabled_reason is not None
    assert changed.consecutive_failures == 2
    assert changed.auto_disable_threshold == 9
    manual = await service.update_job(job.id, {"is_active": False})
    assert (manual.disabled_reason, manual.disabled_at) == (None, None)  # no probe for it


async def test_a_probe_run_is_let_through_after_the_cooldown(
    service: JobService, clock: Clock, index: MemoryScheduleIndex
) -> None:
    job = await service.create_job(JobSpec(job_type="sync", cron_expression="* * * * *"))
    other = await service.create_job(
        JobSpec(job_type="sync", cron_expression="* * * * *", auto_disable_cooldown_seconds=900)
    )
    await fail_twice(service, job, T0)
    await fail_twice(service, other, T0)
    probes = ProbeReleaser(service, interval_seconds=1)
    clock.now = T0 + timedelta(seconds=299)
    assert await probes.release() == 0
    clock.now = T0 + timedelta(seconds=300)
    assert await probes.release() == 1
    probing = await service.get_job(job.id)
    assert (probing.is_active, probing.probing) == (True, True)
    assert probing.disabled_reason is not None  # kept until the probe succeeds
    assert probing.next_run_at == datetime(2030, 1, 1, 12, 6, tzinfo=UTC)
    assert [e.job_id for e in await index.due(ALL, 1e12, 10)] == [job.id]
    assert not (await service.get_job(other.id)).is_active  # its own cooldown is longer
    assert await probes.release() == 0  # let through once
    assert probes.released == 1


async def test_validation_of_the_new_job_fields(service: JobService) -> None:
    from rota.core.errors import ValidationError

    spec = {"job_type": "t", "cron_expression": "* * * * *"}
    for field, value, api in [
        ("auto_disable_threshold", -1, "autoDisableThreshold"),
        ("auto_disable_window_seconds", 0, "autoDisableWindowSeconds"),
        ("zombie_policy", "explode", "zombiePolicy"),
        ("zombie_threshold_seconds", -5, "zombieThresholdSeconds"),
    ]:
        with pytest.raises(ValidationError) as raised:
            await service.create_job({**spec, field: value})
        assert raised.value.field == api
    job = await service.create_job({**spec, "zombie_policy": "fail"})
    assert job.zombie_policy is not None
    assert job.zombie_policy.value == "fail"
