"""Store contract: the consecutive-failure count, auto-disable and probe results kept by
``apply_status``; the zombie query with per-job thresholds. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from msgspec.structs import replace

from rota.app.configs import jobs_config
from rota.app.settings import SchedulerSettings
from rota.coordination.memory import MemoryCoordination
from rota.core.autodisable import AutoDisableDefaults
from rota.core.ids import new_id
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    Occurrence,
    OccurrenceStatus,
    StatusRecord,
    ZombiePolicy,
)
from rota.core.planning import FirePlan, PlanSettings, new_occurrence, plan_fires
from rota.core.ports import Store
from rota.core.records import DisabledJob, JobQuery, ProbeScan
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.jobs import JobService
from rota.stores.sql import SqlStore

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
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

    def __init__(self, store: Store, job: Job) -> None:
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


async def test_failures_count_and_a_success_resets(store: Store) -> None:
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


async def test_a_failure_after_the_window_starts_a_new_count(store: Store) -> None:
    job = cron_job()
    await store.create_jobs([job])
    runs = Runs(store, job)
    await runs.apply(S.FAILED, T0)
    await runs.apply(S.FAILED, T0 + 5 * MINUTE)
    await runs.apply(S.FAILED, T0 + 16 * MINUTE)  # 11 min after the last: more than 10
    stored = await store.get_job(job.id)
    assert (stored.consecutive_failures, stored.is_active) == (1, True)


async def test_the_threshold_disables_the_job_in_the_same_transaction(store: Store) -> None:
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


async def test_one_batch_with_many_outcomes_is_folded_in_order(store: Store) -> None:
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
    store: Store,
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


async def test_an_unknown_occurrence_failed_by_its_zombie_policy_counts(store: Store) -> None:
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
    store: Store,
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
    store: Store,
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


async def test_update_job_writes_the_state_only_when_asked(store: Store) -> None:
    job = cron_job()
    await store.create_jobs([job])
    await Runs(store, job).apply(S.FAILED, T0)
    stale = replace(job, description="changed")  # read before the failure: count 0
    stored = await store.update_job(stale, expected_version=1)
    assert (stored.description, stored.consecutive_failures) == ("changed", 1)
    cleared = replace(stored, consecutive_failures=0, last_failure_at=None, probing=True)
    stored = await store.update_job(cleared, expected_version=1, with_state=True)
    assert (stored.consecutive_failures, stored.last_failure_at, stored.probing) == (0, None, True)


async def test_job_settings_round_trip(store: Store) -> None:
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


async def test_stale_occurrences_use_the_jobs_thresholds_and_policies(store: Store) -> None:
    default = cron_job()
    quick = cron_job(zombie_threshold_seconds=10.0, zombie_policy=ZombiePolicy.FAIL)
    patient = cron_job(zombie_threshold_seconds=600.0)
    await store.create_jobs([default, quick, patient])
    occs = {}
    for name, job in (("default", default), ("quick", quick), ("patient", patient)):
        occ = await Runs(store, job).new()
        await store.mark_dispatched([occ], T0)
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


async def test_stale_occurrences_find_queued_ones_dispatched_long_ago(store: Store) -> None:
    job = cron_job()
    patient = cron_job(zombie_threshold_seconds=3600.0)
    await store.create_jobs([job, patient])
    runs = Runs(store, job)
    lost, recent, never = await runs.new(), await runs.new(), await runs.new()
    own = await Runs(store, patient).new()
    await store.mark_dispatched([lost, own], T0)
    await store.mark_dispatched([recent], T0 + 20 * MINUTE)

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


# --- probes after the cooldown ----------------------------------------------------------------

REASON = "3 consecutive failures within 10 min; last: boom"


def disabled_job(disabled_at: datetime | None = T0, **fields: object) -> Job:
    state: dict[str, object] = {
        "is_active": False,
        "next_run_at": None,
        "consecutive_failures": 3,
        "disabled_reason": REASON,
        "disabled_at": disabled_at,
    }
    return cron_job(**(state | fields))


async def test_due_probes_finds_every_job_past_its_cooldown_page_by_page(
    store: Store,
) -> None:
    ten_minutes = AutoDisableDefaults(3, 600.0, 600.0)
    due = [disabled_job(T0 - HOUR) for _ in range(5)]
    own_cooldown = disabled_job(T0 - 2 * MINUTE, auto_disable_cooldown_seconds=60.0)
    not_yet = [
        disabled_job(T0 - 5 * MINUTE),  # the default cooldown has 5 minutes to go
        disabled_job(T0 - HOUR, auto_disable_cooldown_seconds=7200.0),
    ]
    never = [
        disabled_job(None, disabled_reason=None),  # disabled by hand
        disabled_job(T0 - HOUR, is_active=True, probing=True, next_run_at=T0),  # probing
        disabled_job(T0 - HOUR, cron_expression=None, execute_at=T0 - HOUR),  # one-time
        cron_job(),  # active
    ]
    await store.create_jobs([*due, own_cooldown, *not_yet, *never])
    found: list[UUID] = []
    after = None
    pages = 0
    while True:
        scan = await store.due_probes(T0, ten_minutes, after=after, limit=2)
        found += [job.id for job in scan.due]
        pages += 1
        if scan.after is None:
            break
        after = scan.after
    assert sorted(found) == sorted([j.id for j in due] + [own_cooldown.id])
    assert pages >= 4  # 8 candidates, 2 at a time: not only the first page
    # Without a default cooldown only a job's own cooldown lets a probe through.
    scan = await store.due_probes(T0, AutoDisableDefaults(3, 600.0, None))
    assert ([j.id for j in scan.due], scan.after) == ([own_cooldown.id], None)


async def test_a_probe_release_applies_only_to_the_state_it_saw(store: Store) -> None:
    job = disabled_job(T0 - HOUR, description="kept")
    await store.create_jobs([job])
    nxt = T0 + MINUTE

    async def release(seen: datetime, version: int = 1) -> Job | None:
        return await store.release_probe(
            job.id, seen_disabled_at=seen, seen_version=version, next_run_at=nxt, at=T0
        )

    # A server that read an older disable (the job was disabled again since) does nothing.
    assert await release(T0 - 2 * HOUR) is None
    assert await release(T0 - HOUR, version=0) is None  # the definition changed since
    stored = await store.get_job(job.id)
    assert (stored.is_active, stored.probing, stored.next_run_at) == (False, False, None)
    # An edit of a field that is not versioned, made after the scan, is not written over.
    await store.update_job(replace(stored, description="edited"), expected_version=1)
    released = await release(T0 - HOUR)
    assert released is not None
    assert (released.is_active, released.probing, released.next_run_at) == (True, True, nxt)
    assert (released.disabled_reason, released.disabled_at) == (REASON, T0 - HOUR)
    assert released.description == "edited"
    # A second server with the same view: already released.
    assert await release(T0 - HOUR) is None
    # A probe that failed meanwhile (a new disabled_at) is not released by a stale view.
    disabled = await Runs(store, job).apply(S.FAILED, T0 + 2 * MINUTE)
    assert [d.job_id for d in disabled] == [job.id]
    assert await release(T0 - HOUR) is None
    stored = await store.get_job(job.id)
    assert (stored.is_active, stored.probing, stored.disabled_at) == (False, False, T0 + 2 * MINUTE)
    # Disabled by hand (no reason): never released.
    manual = replace(stored, disabled_reason=None, disabled_at=None)
    await store.update_job(manual, expected_version=1, with_state=True)
    assert await release(T0 + 2 * MINUTE) is None
    assert (
        await store.release_probe(
            new_id(), seen_disabled_at=T0, seen_version=1, next_run_at=nxt, at=T0
        )
        is None
    )


async def test_release_probes_leaves_a_job_disabled_by_hand_meanwhile(store_url: str) -> None:
    """The scan sees an auto-disabled job; before the release, someone disables it by hand
    through the API: the release must not turn it back on."""
    job = disabled_job(datetime.now(UTC) - HOUR)
    other = disabled_job(datetime.now(UTC) - HOUR)

    class RacingStore(SqlStore):
        async def due_probes(
            self,
            now: datetime,
            defaults: AutoDisableDefaults,
            *,
            after: UUID | None = None,
            limit: int = 500,
        ) -> ProbeScan:
            scan = await super().due_probes(now, defaults, after=after, limit=limit)
            await jobs.update_job(job.id, {"is_active": False})
            return scan

    racing = RacingStore(store_url)
    await racing.open()
    try:
        await racing.create_jobs([job, other])
        settings = SchedulerSettings(auto_disable_cooldown_seconds=60)
        jobs = JobService(
            racing,
            MemoryScheduleIndex(),
            MemoryCoordination(),
            jobs_config(settings),
            lambda: datetime.now(UTC),
        )
        released = await jobs.release_probes()
        assert [j.id for j in released] == [other.id]
        stored = await racing.get_job(job.id)
        assert (stored.is_active, stored.probing, stored.disabled_reason) == (False, False, None)
        assert (await racing.get_job(other.id)).probing
    finally:
        await racing.close()


async def test_a_probing_job_runs_one_occurrence_at_a_time_whatever_its_policy(
    store: Store,
) -> None:
    """While its probe is Queued or Running, a probing job's fires are Skipped (overlap),
    even with the Queue policy that would otherwise hold them: one probe run, not several."""
    settings = PlanSettings()

    def planner(job: Job, active: int, now: datetime) -> FirePlan:
        return plan_fires(job, active, now, settings)

    fields = {"concurrency_policy": ConcurrencyPolicy.QUEUE, "next_run_at": T0}
    probing = cron_job(**fields, probing=True, disabled_reason=REASON, disabled_at=T0 - HOUR)
    plain = cron_job(**fields)
    await store.create_jobs([probing, plain])
    await Runs(store, probing).new()  # the probe, still Queued
    await Runs(store, plain).new()
    result = await store.dispatch_due([probing.id, plain.id], T0, planner)
    assert [(o.job_id, o.skip_reason) for o in result.skipped] == [(probing.id, "overlap")]
    assert [o.job_id for o in result.held] == [plain.id]
    assert result.queued == []
    # With no probe active the fire runs (the probe itself).
    idle = cron_job(**fields, probing=True, disabled_reason=REASON, disabled_at=T0 - HOUR)
    await store.create_jobs([idle])
    result = await store.dispatch_due([idle.id], T0, planner)
    assert [o.job_id for o in result.queued] == [idle.id]
