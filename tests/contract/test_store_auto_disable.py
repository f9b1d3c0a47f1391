"""Store contract: the consecutive-failure count, auto-disable and probe results kept by
``apply_status``; the zombie query with per-job thresholds. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rota.core.autodisable import AutoDisableDefaults
from rota.core.ids import new_id
from rota.core.models import Job, Occurrence, OccurrenceStatus, StatusRecord, ZombiePolicy
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.ports import DisabledJob, JobQuery
from rota.stores.sql import SqlStore

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlStore]:
    """A store whose global defaults are 3 failures within 10 minutes."""
    instance = SqlStore(store_url, auto_disable=AutoDisableDefaults(3, 600.0, None))
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


def cron_job(**fields: object) -> Job:
    values: dict[str, object] = {
        "id": new_id(),
        "job_type": "sync",
        "cron_expression": "* * * * *",
        "next_run_at": T0 + HOUR,
    }
    values.update(fields)
    return Job(**values)  # type: ignore[arg-type]


class Runs:
    """Occurrences of one job, ended as a test says."""

    def __init__(self, store: SqlStore, job: Job) -> None:
        self.store = store
        self.job = job
        self.count = 0

    async def new(self) -> Occurrence:
        self.count += 1
        occ = new_occurrence(self.job, T0 + self.count * MINUTE, T0, PlanSettings())
        await self.store.insert_occurrences([occ])
        return occ

    async def end(
        self, status: S, at: datetime, exception: str | None = "ValueError: boom", **fields: object
    ) -> tuple[Occurrence, list[StatusRecord]]:
        occ = await self.new()
        records = [
            StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=at),
            StatusRecord(
                occurrence_id=occ.id,
                status=status,
                timestamp=at,
                exception=None if status is S.COMPLETED else exception,
                **fields,  # type: ignore[arg-type]
            ),
        ]
        return occ, records

    async def apply(self, status: S, at: datetime, **fields: Any) -> list[DisabledJob]:
        _, records = await self.end(status, at, **fields)
        result = await self.store.apply_status(records)
        return list(result.disabled)


async def test_failures_count_and_a_success_resets(store: SqlStore) -> None:
    job = cron_job()
    await store.create_jobs([job])
    runs = Runs(store, job)
    await runs.apply(S.FAILED, T0)
    await runs.apply(S.TIMED_OUT, T0 + MINUTE)
    stored = await store.get_job(job.id)
    assert (stored.consecutive_failures, stored.last_failure_at) == (2, T0 + MINUTE)
    # Neither a retried attempt nor a cancellation counts either way.
    await runs.apply(S.FAILED, T0 + 2 * MINUTE, retry_at=T0 + HOUR)
    await runs.apply(S.CANCELLED, T0 + 2 * MINUTE)
    assert (await store.get_job(job.id)).consecutive_failures == 2
    await runs.apply(S.COMPLETED, T0 + 3 * MINUTE)
    stored = await store.get_job(job.id)
    assert stored.consecutive_failures == 0
    assert stored.is_active
    assert stored.disabled_reason is None
    assert (stored.success_count, stored.failure_count) == (1, 2)


async def test_a_failure_after_the_window_starts_a_new_count(store: SqlStore) -> None:
    job = cron_job()
    await store.create_jobs([job])
    runs = Runs(store, job)
    await runs.apply(S.FAILED, T0)
    await runs.apply(S.FAILED, T0 + 5 * MINUTE)
    await runs.apply(S.FAILED, T0 + 16 * MINUTE)  # 11 min after the last: more than 10
    stored = await store.get_job(job.id)
    assert (stored.consecutive_failures, stored.is_active) == (1, True)


async def test_the_threshold_disables_the_job_in_the_same_transaction(store: SqlStore) -> None:
    job = cron_job()
    other = cron_job()
    await store.create_jobs([job, other])
    runs = Runs(store, job)
    await runs.apply(S.FAILED, T0)
    await runs.apply(S.FAILED, T0 + MINUTE)
    assert (await store.get_job(job.id)).is_active
    disabled = await runs.apply(
        S.FAILED, T0 + 2 * MINUTE, exception="KeyError: 'customer'\nTraceback …"
    )
    stored = await store.get_job(job.id)
    assert not stored.is_active
    assert stored.next_run_at is None
    assert stored.disabled_at == T0 + 2 * MINUTE
    assert stored.disabled_reason == (
        "3 consecutive failures within 10 min; last: KeyError: 'customer'"
    )
    assert [(d.job_id, d.bucket) for d in disabled] == [(job.id, job.bucket)]
    assert (await store.get_job(other.id)).is_active
    # The dispatcher does not fire it, the loader does not load it.
    assert {e.job_id for e in await store.due_jobs(T0 + 2 * HOUR, None, 10)} == {other.id}
    assert [j.id for j in (await store.list_jobs(JobQuery(auto_disabled=True))).items] == [job.id]
    assert job.id not in {
        j.id for j in (await store.list_jobs(JobQuery(auto_disabled=False))).items
    }
    # A further failure of an occurrence still in flight counts, but disables nothing new.
    assert await runs.apply(S.FAILED, T0 + 3 * MINUTE) == []
    stored = await store.get_job(job.id)
    assert (stored.consecutive_failures, stored.disabled_at) == (4, T0 + 2 * MINUTE)


async def test_one_batch_with_many_outcomes_is_folded_in_order(store: SqlStore) -> None:
    job, healthy = cron_job(), cron_job()
    await store.create_jobs([job, healthy])
    runs, ok = Runs(store, job), Runs(store, healthy)
    batch: list[StatusRecord] = []
    for i, status in enumerate([S.FAILED, S.COMPLETED, S.FAILED, S.TIMED_OUT, S.FAILED]):
        batch += (await runs.end(status, T0 + i * MINUTE))[1]
        batch += (await ok.end(S.COMPLETED, T0 + i * MINUTE))[1]
    result = await store.apply_status(batch)
    assert [d.job_id for d in result.disabled] == [job.id]
    stored = await store.get_job(job.id)
    assert (stored.consecutive_failures, stored.is_active) == (3, False)
    assert stored.disabled_at == T0 + 4 * MINUTE
    assert (await store.get_job(healthy.id)).consecutive_failures == 0


async def test_job_threshold_overrides_the_default_and_zero_never_disables(
    store: SqlStore,
) -> None:
    strict, never = cron_job(auto_disable_threshold=1), cron_job(auto_disable_threshold=0)
    wide = cron_job(auto_disable_window_seconds=7200.0)
    await store.create_jobs([strict, never, wide])
    assert len(await Runs(store, strict).apply(S.FAILED, T0)) == 1
    assert (await store.get_job(strict.id)).disabled_reason == (
        "1 consecutive failures within 10 min; last: ValueError: boom"
    )
    runs = Runs(store, never)
    for i in range(5):
        assert await runs.apply(S.FAILED, T0 + i * MINUTE) == []
    assert (await store.get_job(never.id)).consecutive_failures == 5
    runs = Runs(store, wide)
    for i in range(3):
        await runs.apply(S.FAILED, T0 + i * 50 * MINUTE)  # 50 min apart: within 2 h
    stored = await store.get_job(wide.id)
    assert (stored.consecutive_failures, stored.is_active) == (3, False)
    assert stored.disabled_reason is not None
    assert "within 120 min" in stored.disabled_reason


async def test_an_unknown_occurrence_failed_by_its_zombie_policy_counts(store: SqlStore) -> None:
    job = cron_job(auto_disable_threshold=1)
    await store.create_jobs([job])
    occ = await Runs(store, job).new()
    records = [
        StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=T0),
        StatusRecord(occurrence_id=occ.id, status=S.UNKNOWN, timestamp=T0 + MINUTE),
        StatusRecord(
            occurrence_id=occ.id, status=S.FAILED, timestamp=T0 + MINUTE, exception="zombie: x"
        ),
    ]
    result = await store.apply_status(records)
    assert [d.job_id for d in result.disabled] == [job.id]


async def test_a_probe_success_enables_the_job_and_a_failure_disables_it_again(
    store: SqlStore,
) -> None:
    disabled_at = T0 - HOUR
    state = {
        "is_active": True,
        "probing": True,
        "consecutive_failures": 3,
        "last_failure_at": disabled_at,
        "disabled_reason": "3 consecutive failures within 10 min; last: boom",
        "disabled_at": disabled_at,
    }
    good, bad = cron_job(**state), cron_job(**state)
    await store.create_jobs([good, bad])
    assert await Runs(store, good).apply(S.COMPLETED, T0) == []
    stored = await store.get_job(good.id)
    assert (stored.is_active, stored.probing, stored.consecutive_failures) == (True, False, 0)
    assert (stored.disabled_reason, stored.disabled_at) == (None, None)

    # One failure is enough while probing (the count is within the window: 4).
    disabled = await Runs(store, bad).apply(S.FAILED, T0, exception="OSError: still down")
    assert len(disabled) == 1
    stored = await store.get_job(bad.id)
    assert (stored.is_active, stored.probing, stored.next_run_at) == (False, False, None)
    assert stored.disabled_at == T0
    assert (
        stored.disabled_reason == "probe run failed after the cooldown; last: OSError: still down"
    )


async def test_a_completion_while_disabled_resets_the_count_but_keeps_it_disabled(
    store: SqlStore,
) -> None:
    job = cron_job(
        is_active=False,
        next_run_at=None,
        consecutive_failures=3,
        disabled_reason="3 consecutive failures within 10 min; last: boom",
        disabled_at=T0,
    )
    await store.create_jobs([job])
    await Runs(store, job).apply(S.COMPLETED, T0 + MINUTE)
    stored = await store.get_job(job.id)
    assert (stored.consecutive_failures, stored.is_active) == (0, False)
    assert stored.disabled_reason is not None


async def test_update_job_writes_the_state_only_when_asked(store: SqlStore) -> None:
    job = cron_job()
    await store.create_jobs([job])
    await Runs(store, job).apply(S.FAILED, T0)
    stale = replace(job, description="changed")  # read before the failure: count 0
    stored = await store.update_job(stale, expected_version=1)
    assert (stored.description, stored.consecutive_failures) == ("changed", 1)
    cleared = replace(stored, consecutive_failures=0, last_failure_at=None, probing=True)
    stored = await store.update_job(cleared, expected_version=1, with_state=True)
    assert (stored.consecutive_failures, stored.last_failure_at, stored.probing) == (0, None, True)


async def test_job_settings_round_trip(store: SqlStore) -> None:
    job = cron_job(
        auto_disable_threshold=7,
        auto_disable_window_seconds=90.0,
        auto_disable_cooldown_seconds=300.0,
        zombie_policy=ZombiePolicy.FAIL,
        zombie_threshold_seconds=45.0,
    )
    await store.create_jobs([job])
    stored = await store.get_job(job.id)
    assert (
        stored.auto_disable_threshold,
        stored.auto_disable_window_seconds,
        stored.auto_disable_cooldown_seconds,
        stored.zombie_policy,
        stored.zombie_threshold_seconds,
    ) == (7, 90.0, 300.0, ZombiePolicy.FAIL, 45.0)
    changed = replace(stored, zombie_policy=ZombiePolicy.REQUEUE, auto_disable_threshold=None)
    stored = await store.update_job(changed, expected_version=1)
    assert (stored.zombie_policy, stored.auto_disable_threshold) == (ZombiePolicy.REQUEUE, None)


# --- the zombie query -------------------------------------------------------------------------


async def test_stale_occurrences_use_the_jobs_thresholds_and_policies(store: SqlStore) -> None:
    default = cron_job()
    quick = cron_job(zombie_threshold_seconds=10.0, zombie_policy=ZombiePolicy.FAIL)
    patient = cron_job(zombie_threshold_seconds=600.0)
    await store.create_jobs([default, quick, patient])
    occs = {}
    for name, job in (("default", default), ("quick", quick), ("patient", patient)):
        occ = await Runs(store, job).new()
        await store.mark_dispatched([occ.id], T0)
        await store.apply_status(
            [StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=T0)]
        )
        occs[name] = occ

    async def stale(seconds: float) -> dict[str, ZombiePolicy | None]:
        found = await store.stale_occurrences(
            T0 + timedelta(seconds=seconds),
            running_threshold=30.0,
            queued_threshold=1800.0,
            limit=10,
        )
        names = {o.id: n for n, o in occs.items()}
        return {names[s.occurrence.id]: s.zombie_policy for s in found}

    assert await stale(5) == {}
    assert await stale(11) == {"quick": ZombiePolicy.FAIL}
    assert await stale(31) == {"quick": ZombiePolicy.FAIL, "default": None}
    assert set(await stale(601)) == {"quick", "default", "patient"}
    found = await store.stale_occurrences(
        T0 + HOUR, running_threshold=30.0, queued_threshold=1800.0, limit=2
    )
    assert len(found) == 2


async def test_stale_occurrences_find_queued_ones_dispatched_long_ago(store: SqlStore) -> None:
    job = cron_job()
    patient = cron_job(zombie_threshold_seconds=3600.0)
    await store.create_jobs([job, patient])
    runs = Runs(store, job)
    lost, recent, never = await runs.new(), await runs.new(), await runs.new()
    own = await Runs(store, patient).new()
    await store.mark_dispatched([lost.id, own.id], T0)
    await store.mark_dispatched([recent.id], T0 + 20 * MINUTE)

    async def stale(at: datetime) -> set[object]:
        found = await store.stale_occurrences(
            at, running_threshold=30.0, queued_threshold=1800.0, limit=10
        )
        assert all(s.occurrence.status is S.QUEUED for s in found)
        return {s.occurrence.id for s in found}

    assert await stale(T0 + 29 * MINUTE) == set()
    assert await stale(T0 + 31 * MINUTE) == {lost.id}  # never dispatched: never a zombie
    assert await stale(T0 + 51 * MINUTE) == {lost.id, recent.id}
    assert await stale(T0 + 61 * MINUTE) == {lost.id, recent.id, own.id}
    assert never.id not in await stale(T0 + 10 * HOUR)
