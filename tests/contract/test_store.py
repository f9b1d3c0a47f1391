"""The Store contract (rota.core.ports.Store), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID

import msgspec
import pytest
from msgspec.structs import replace

from rota.core.errors import BackendUnavailableError, ConflictError, NotFoundError, ValidationError
from rota.core.ids import new_id
from rota.core.jobfields import version_snapshot
from rota.core.models import (
    ConcurrencyPolicy,
    FailureType,
    Job,
    LogRecord,
    MisfirePolicy,
    Occurrence,
    OccurrenceStatus,
    Priority,
    SkipReason,
    StatusRecord,
)
from rota.core.planning import FirePlan, PlanSettings, new_occurrence, plan_fires
from rota.core.ports import Store
from rota.core.records import DueEntry, FirePlanner, JobQuery, OccurrenceQuery
from rota.stores.sql import SqlStore

S = OccurrenceStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=1)
SETTINGS = PlanSettings()
MINUTE = timedelta(minutes=1)


def make_job(**fields: object) -> Job:
    values: dict[str, object] = {
        "id": new_id(),
        "job_type": "send-email",
        "execute_at": T0,
        "next_run_at": T0,
    }
    values.update(fields)
    return Job(**values)  # type: ignore[arg-type]


def one_time(job: Job, active: int, now: datetime) -> FirePlan:
    """The real planner (one-time jobs need no cron)."""
    return plan_fires(job, active, now, SETTINGS)


def minutely(job: Job, active: int, now: datetime) -> FirePlan:
    """A tiny recurring planner: fires every minute from ``next_run_at`` up to now."""
    assert job.next_run_at is not None
    fires: list[Occurrence] = []
    fire = job.next_run_at
    while fire <= now:
        fires.append(new_occurrence(job, fire, now, SETTINGS))
        fire += MINUTE
    return FirePlan(occurrences=tuple(fires), next_run_at=fire, is_active=job.is_active)


def same_fire(job: Job, active: int, now: datetime) -> FirePlan:
    """Always plans the fire at T0 and leaves the job due: only the store can refuse a duplicate."""
    return FirePlan(
        occurrences=(new_occurrence(job, T0, now, SETTINGS),), next_run_at=T0, is_active=True
    )


def occurrence(job: Job, at: datetime = T0, **fields: object) -> Occurrence:
    return replace(new_occurrence(job, at, at, SETTINGS), **fields)  # type: ignore[arg-type]


def status(occ: Occurrence | UUID, st: S, at: datetime = NOW, **fields: object) -> StatusRecord:
    occurrence_id = occ if isinstance(occ, UUID) else occ.id
    return StatusRecord(occurrence_id=occurrence_id, status=st, timestamp=at, **fields)  # type: ignore[arg-type]


async def fired(store: Store, job: Job, planner: object = one_time) -> Occurrence:
    """Create ``job`` and dispatch it once; its single queued occurrence."""
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, planner)  # type: ignore[arg-type]
    assert len(result.queued) == 1
    return result.queued[0]


# --- connection -------------------------------------------------------------------------------


async def test_open_is_idempotent_and_ping_answers(store: Store) -> None:
    await store.open()
    await store.ping()
    await store.close()
    await store.close()
    await store.open()
    await store.ping()


@pytest.mark.parametrize(
    "url",
    ["postgresql://postgres@127.0.0.1:1/nowhere", "sqlite:////nonexistent-dir/deeper/rota.db"],
)
async def test_unreachable_database_raises_backend_unavailable(url: str) -> None:
    store = SqlStore(url)
    with pytest.raises(BackendUnavailableError):
        await store.open()
    await store.close()


# --- jobs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [42, 2.5, "text", True, None, [1, "a"], {"k": 1}])
async def test_any_json_value_reads_back_equal(store: Store, data: object) -> None:
    job = make_job(job_data=data)
    await store.create_jobs([job])
    assert (await store.get_job(job.id)).job_data == data


async def test_created_job_reads_back_equal(store: Store) -> None:
    job = make_job(
        worker_id="mailers",
        display_name="Nightly mail",
        description="Sends the digest",
        tags=("mail", "nightly"),
        job_data={"to": ["a@example.com"], "n": 3, "nested": {"ok": True, "x": None}},
        cron_expression="0 3 * * *",
        time_zone="Europe/Berlin",
        execute_at=None,
        is_active=False,
        priority=Priority.CRITICAL,
        concurrency_policy=ConcurrencyPolicy.QUEUE,
        misfire_policy=MisfirePolicy.CATCH_UP,
        timeout_seconds=12.5,
        max_retries=4,
        retry_delay_seconds=2.5,
        next_run_at=datetime(2030, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
        bucket=7,
        version=3,
        created_by="alice",
        updated_by="bob",
        total_executions=10,
        success_count=7,
        failure_count=3,
        average_duration_ms=42.5,
    )
    await store.create_jobs([job])
    stored = await store.get_job(job.id)
    assert stored == job
    assert stored.next_run_at is not None
    assert stored.next_run_at.tzinfo is UTC


async def test_get_missing_job_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.get_job(new_id())


async def test_duplicate_id_conflicts_and_inserts_nothing(store: Store) -> None:
    first = make_job()
    await store.create_jobs([first])
    other = make_job()
    with pytest.raises(ConflictError):
        await store.create_jobs([other, replace(first, display_name="again")])
    with pytest.raises(NotFoundError):
        await store.get_job(other.id)
    assert (await store.get_job(first.id)).display_name == ""


async def test_list_jobs_filters(store: Store) -> None:
    a = make_job(display_name="Daily REPORT", tags=("reports", "daily"))
    b = make_job(job_type="cleanup", description="removes 100% of temp files", tags=("ops",))
    c = make_job(job_type="cleanup", is_active=False, tags=("ops", "daily"))
    await store.create_jobs([a, b, c])

    async def ids(**query: object) -> list[UUID]:
        page = await store.list_jobs(JobQuery(**query))  # type: ignore[arg-type]
        return [j.id for j in page.items]

    assert await ids() == [c.id, b.id, a.id]
    assert await ids(search="report") == [a.id]
    assert await ids(search="CLEAN") == [c.id, b.id]
    assert await ids(search="100%") == [b.id]
    assert await ids(search="_") == []
    assert await ids(tag="daily") == [c.id, a.id]
    assert await ids(tag="dail") == []
    assert await ids(job_type="cleanup") == [c.id, b.id]
    assert await ids(is_active=False) == [c.id]
    assert await ids(tag="ops", is_active=True) == [b.id]
    assert await ids(ids=(a.id, c.id, new_id())) == [c.id, a.id]  # an unknown id is left out
    assert await ids(ids=(b.id,), is_active=False) == []


async def test_list_jobs_pages_newest_first(store: Store) -> None:
    created = [make_job() for _ in range(5)]
    await store.create_jobs(created)
    seen: list[UUID] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.list_jobs(JobQuery(limit=2, cursor=cursor))
        seen += [j.id for j in page.items]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [j.id for j in reversed(created)]
    assert pages == 3
    with pytest.raises(ValidationError):
        await store.list_jobs(JobQuery(cursor="not-a-cursor"))


async def test_update_replaces_definition_but_not_statistics(store: Store) -> None:
    job = make_job(tags=("old",), total_executions=5, success_count=4, failure_count=1)
    await store.create_jobs([job])
    changed = replace(
        job,
        display_name="renamed",
        tags=("new", "other"),
        is_active=False,
        next_run_at=None,
        total_executions=0,
        success_count=0,
        failure_count=0,
        updated_by="carol",
    )
    stored = await store.update_job(changed, expected_version=1)
    assert stored == replace(changed, total_executions=5, success_count=4, failure_count=1)
    assert await store.get_job(job.id) == stored
    assert await store.job_versions(job.id) == []
    assert [j.id for j in (await store.list_jobs(JobQuery(tag="new"))).items] == [job.id]
    assert (await store.list_jobs(JobQuery(tag="old"))).items == []


async def test_version_bump_keeps_snapshot_of_the_old_version(store: Store) -> None:
    job = make_job(job_data={"v": 1}, worker_id="w1")
    await store.create_jobs([job])
    v2 = await store.update_job(replace(job, job_data={"v": 2}, version=2), expected_version=1)
    assert v2.version == 2
    await store.update_job(replace(v2, display_name="same version"), expected_version=2)
    await store.update_job(replace(v2, job_type="other", version=3), expected_version=2)
    versions = await store.job_versions(job.id)
    assert [v.version for v in versions] == [1, 2]
    assert versions[0].snapshot == version_snapshot(job)
    assert {k: versions[0].snapshot[k] for k in ("jobData", "executeAt", "priority")} == {
        "jobData": {"v": 1},
        "executeAt": T0.isoformat(),
        "priority": 2,
    }
    assert versions[1].snapshot["jobData"] == {"v": 2}
    assert versions[0].created_at.tzinfo is UTC


async def test_update_with_stale_version_conflicts(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])
    await store.update_job(replace(job, version=2), expected_version=1)
    with pytest.raises(ConflictError):
        await store.update_job(replace(job, display_name="lost", version=2), expected_version=1)
    stored = await store.get_job(job.id)
    assert stored.display_name == ""
    assert stored.version == 2


async def test_update_missing_job_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.update_job(make_job(), expected_version=1)


async def test_delete_removes_job_and_versions_but_keeps_history(store: Store) -> None:
    job = make_job(tags=("t",))
    occ = await fired(store, job)
    await store.update_job(replace(await store.get_job(job.id), version=2), expected_version=1)
    await store.append_logs(
        [LogRecord(occurrence_id=occ.id, timestamp=NOW, level="info", message="hi")]
    )
    await store.delete_job(job.id)
    with pytest.raises(NotFoundError):
        await store.get_job(job.id)
    assert await store.job_versions(job.id) == []
    assert (await store.list_jobs(JobQuery(tag="t"))).items == []
    assert (await store.get_occurrence(occ.id)).job_id == job.id
    assert len(await store.occurrence_logs(occ.id)) == 1
    with pytest.raises(NotFoundError):
        await store.delete_job(job.id)


# --- scheduling -------------------------------------------------------------------------------


async def test_due_jobs_earliest_first_by_bucket_and_limit(store: Store) -> None:
    late = make_job(next_run_at=T0 + timedelta(seconds=30), bucket=1)
    early = make_job(next_run_at=T0 - timedelta(seconds=30), bucket=2)
    mid = make_job(next_run_at=T0, bucket=1)
    future = make_job(next_run_at=T0 + timedelta(hours=1), bucket=1)
    inactive = make_job(next_run_at=T0, is_active=False, bucket=1)
    finished = make_job(next_run_at=None, bucket=1)
    await store.create_jobs([late, early, mid, future, inactive, finished])
    until = T0 + MINUTE
    assert await store.due_jobs(until, None, 10) == [
        DueEntry(early.id, 2, early.next_run_at),  # type: ignore[arg-type]
        DueEntry(mid.id, 1, T0),
        DueEntry(late.id, 1, late.next_run_at),  # type: ignore[arg-type]
    ]
    assert [e.job_id for e in await store.due_jobs(until, [1], 10)] == [mid.id, late.id]
    assert [e.job_id for e in await store.due_jobs(until, None, 2)] == [early.id, mid.id]
    assert await store.due_jobs(until, [], 10) == []


async def test_dispatch_fires_one_time_job_once(store: Store) -> None:
    job = make_job(bucket=3, priority=Priority.HIGH, job_data={"k": "v"}, max_retries=2)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, one_time)
    assert result.held == []
    assert result.skipped == []
    [occ] = result.queued
    assert (occ.job_id, occ.scheduled_for, occ.status) == (job.id, T0, S.QUEUED)
    assert result.next_runs == {job.id: None}
    stored = await store.get_occurrence(occ.id)
    assert stored == occ
    assert [(c.from_status, c.to_status) for c in stored.status_changes] == [(None, S.QUEUED)]
    assert (stored.priority, stored.job_data, stored.max_retries) == (Priority.HIGH, {"k": "v"}, 2)
    assert (await store.get_job(job.id)).next_run_at is None
    assert await store.due_jobs(NOW + MINUTE, None, 10) == []
    again = await store.dispatch_due([job.id], NOW + MINUTE, one_time)
    assert again.queued == []
    assert again.next_runs == {job.id: None}
    assert await store.count_occurrences((S.QUEUED,)) == {S.QUEUED: 1}


async def test_dispatch_advances_recurring_job(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=T0 - 2 * MINUTE, bucket=5)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, minutely)
    assert [o.scheduled_for for o in result.queued] == [T0 - 2 * MINUTE, T0 - MINUTE, T0]
    assert result.next_runs == {job.id: DueEntry(job.id, 5, T0 + MINUTE)}
    stored = await store.get_job(job.id)
    assert stored.next_run_at == T0 + MINUTE
    assert stored.is_active


async def test_dispatch_fires_no_cron_job_before_its_execute_at(store: Store) -> None:
    """A cron job that starts at ``execute_at`` found due earlier (a stale ``next_run_at``):
    the store hands ``execute_at`` to the planner, which moves the job on without a fire."""
    start = T0 + 30 * MINUTE
    job = make_job(cron_expression="* * * * *", execute_at=start, next_run_at=T0, bucket=3)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, one_time)  # the real planner
    assert (result.queued, result.skipped) == ([], [])
    assert result.next_runs == {job.id: DueEntry(job.id, 3, start)}
    assert (await store.get_job(job.id)).next_run_at == start
    assert await store.count_occurrences((S.QUEUED, S.SKIPPED)) == {S.QUEUED: 0, S.SKIPPED: 0}


async def test_duplicate_fire_is_never_inserted_twice(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])
    first = await store.dispatch_due([job.id], NOW, same_fire)
    second = await store.dispatch_due([job.id], NOW, same_fire)
    assert len(first.queued) == 1
    assert second.queued == []
    assert second.held == []
    assert second.skipped == []
    page = await store.list_occurrences(OccurrenceQuery(job_id=job.id))
    assert [o.id for o in page.items] == [first.queued[0].id]
    assert len((await store.get_occurrence(first.queued[0].id)).status_changes) == 1


async def test_dispatch_passes_over_inactive_future_and_missing_jobs(store: Store) -> None:
    inactive = make_job(is_active=False)
    future = make_job(next_run_at=T0 + timedelta(hours=1), bucket=2)
    missing = new_id()
    await store.create_jobs([inactive, future])
    result = await store.dispatch_due([inactive.id, future.id, missing], NOW, one_time)
    assert result.queued == []
    assert result.skipped == []
    assert result.next_runs == {
        inactive.id: None,
        future.id: DueEntry(future.id, 2, T0 + timedelta(hours=1)),
        missing: None,
    }
    assert await store.count_occurrences() == dict.fromkeys(S, 0)


async def test_dispatch_records_skipped_fires(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])

    def overlap(job: Job, active: int, now: datetime) -> FirePlan:
        skipped = new_occurrence(job, T0, now, SETTINGS, skip_reason=SkipReason.OVERLAP)
        return FirePlan(occurrences=(skipped,), next_run_at=None, is_active=True)

    result = await store.dispatch_due([job.id], NOW, overlap)
    [occ] = result.skipped
    assert result.queued == []
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.skip_reason, stored.end_time) == (S.SKIPPED, "overlap", NOW)
    assert stored.status_changes[0].reason == "overlap"
    assert await store.undispatched(NOW + MINUTE, 10) == []


async def test_planner_sees_active_occurrence_count(store: Store) -> None:
    job = make_job(execute_at=None)
    await store.create_jobs([job])
    await store.insert_occurrences([occurrence(job, T0 - MINUTE), occurrence(job, T0 - 2 * MINUTE)])
    seen: list[int] = []

    def spy(job: Job, active: int, now: datetime) -> FirePlan:
        seen.append(active)
        return minutely(job, active, now)

    await store.dispatch_due([job.id], NOW, spy)
    assert seen == [2]


async def test_queue_policy_holds_later_occurrences(store: Store) -> None:
    job = make_job(
        execute_at=None, next_run_at=T0 - MINUTE, concurrency_policy=ConcurrencyPolicy.QUEUE
    )
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, minutely)
    [first] = result.queued
    [second] = result.held
    assert (first.scheduled_for, second.scheduled_for) == (T0 - MINUTE, T0)
    assert [o.id for o in await store.undispatched(NOW, 10)] == [first.id]
    await store.mark_dispatched([first], NOW)
    assert await store.undispatched(NOW, 10) == []
    await store.apply_status([status(first, S.RUNNING), status(first, S.COMPLETED)])
    assert [o.id for o in await store.undispatched(NOW, 10)] == [second.id]

    # A new fire while `second` is still active waits behind it.
    later = await store.dispatch_due([job.id], NOW + MINUTE, minutely)
    assert later.queued == []
    assert [o.scheduled_for for o in later.held] == [T0 + MINUTE]


async def test_buffer_one_holds_like_queue_and_allow_all_never_holds(store: Store) -> None:
    buffered = make_job(
        execute_at=None, next_run_at=T0 - MINUTE, concurrency_policy=ConcurrencyPolicy.BUFFER_ONE
    )
    parallel = make_job(
        execute_at=None, next_run_at=T0 - MINUTE, concurrency_policy=ConcurrencyPolicy.ALLOW_ALL
    )
    await store.create_jobs([buffered, parallel])
    result = await store.dispatch_due([buffered.id, parallel.id], NOW, minutely)
    assert [o.job_id for o in result.held] == [buffered.id]
    assert sorted(o.job_id == parallel.id for o in result.queued) == [False, True, True]
    assert result.displacing == {}
    first = next(o for o in result.queued if o.job_id == buffered.id)
    # the held one waits for the buffered job's first only; the parallel ones wait for nothing
    pending = {o.id for o in await store.undispatched(NOW, 10)}
    assert result.held[0].id not in pending
    assert {o.id for o in result.queued} <= pending
    await store.mark_dispatched(list(result.queued), NOW)
    await store.apply_status([status(first, S.RUNNING), status(first, S.COMPLETED)])
    assert [o.id for o in await store.undispatched(NOW, 10)] == [result.held[0].id]


async def test_cancel_other_names_the_fire_that_displaces_an_active_one(store: Store) -> None:
    job = make_job(
        execute_at=None, next_run_at=T0, concurrency_policy=ConcurrencyPolicy.CANCEL_OTHER
    )
    await store.create_jobs([job])
    first = await store.dispatch_due([job.id], NOW, minutely)
    assert first.displacing == {}  # nothing was active
    later = await store.dispatch_due([job.id], NOW + MINUTE, minutely)
    [newer] = later.queued  # sent at once, not held
    assert later.displacing == {job.id: newer.id}


async def test_skip_policy_never_holds(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=T0 - MINUTE)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, minutely)
    assert len(result.queued) == 2
    assert result.held == []
    assert len(await store.undispatched(NOW, 10)) == 2


async def test_insert_occurrences_with_history_and_duplicate_conflict(store: Store) -> None:
    job = make_job(concurrency_policy=ConcurrencyPolicy.QUEUE)
    await store.create_jobs([job])
    manual = new_occurrence(job, T0, T0, SETTINGS, trigger_reason="manual")
    await store.insert_occurrences([manual])
    stored = await store.get_occurrence(manual.id)
    assert stored == manual
    assert stored.status_changes[0].reason == "manual"
    with pytest.raises(ConflictError):
        await store.insert_occurrences([occurrence(job, T0)])
    # Held behind the manual one: the job's Queue policy applies to triggered occurrences too.
    queued_later = occurrence(job, T0 + MINUTE)
    await store.insert_occurrences([queued_later])
    assert [o.id for o in await store.undispatched(NOW + MINUTE, 10)] == [manual.id]


async def test_undispatched_mark_and_reset(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])
    a, b, c, d = (occurrence(job, T0 + i * MINUTE) for i in (2, 0, 1, 10))
    await store.insert_occurrences([a, b, c, d])
    assert [o.id for o in await store.undispatched(T0 + 5 * MINUTE, 10)] == [b.id, c.id, a.id]
    assert [o.id for o in await store.undispatched(T0 + 5 * MINUTE, 2)] == [b.id, c.id]
    await store.mark_dispatched([b, c], NOW)
    assert (await store.get_occurrence(b.id)).dispatched_at == NOW
    assert [o.id for o in await store.undispatched(T0 + 5 * MINUTE, 10)] == [a.id]
    await store.apply_status([status(c, S.RUNNING)])
    assert await store.reset_dispatch([S.QUEUED]) == 1
    assert [o.id for o in await store.undispatched(T0 + 5 * MINUTE, 10)] == [b.id, a.id]
    assert (await store.get_occurrence(c.id)).dispatched_at == NOW


async def test_dispatch_due_claims_what_the_caller_sends_until_claim_until(
    store: Store,
) -> None:
    """A fire the dispatcher publishes itself is inserted dispatched, with one record of its
    batch: no sweep sends it meanwhile; the mark of the batch ends the record (no write to
    the occurrences); a record still there when its claim runs out (the dispatcher died
    before publishing) leaves what it names, still Queued as it left it, to the sweep, once.
    A fire held behind an active one (Queue policy) is not in the batch: the sweep sends it
    once released."""
    job = make_job(execute_at=None, next_run_at=T0 - MINUTE)
    queue = make_job(
        execute_at=None, next_run_at=T0 - MINUTE, concurrency_policy=ConcurrencyPolicy.QUEUE
    )
    await store.create_jobs([job, queue])
    result = await store.dispatch_due([job.id, queue.id], NOW, minutely, claim_until=CLAIM)
    [held] = result.held
    sent = list(result.queued)
    assert len(sent) == 3
    assert held.job_id == queue.id
    assert result.batch is not None
    for occ in sent:  # inserted dispatched, with its own due time
        stored = await store.get_occurrence(occ.id)
        assert stored.dispatched_at is not None
        assert (stored.dispatched_at, stored.due_at) == (occ.dispatched_at, occ.due_at)
    assert (await store.get_occurrence(held.id)).dispatched_at is None
    assert await store.undispatched(CLAIM - MINUTE, 10) == []  # held: behind queue's first
    assert await store.claim_undispatched(CLAIM - MINUTE, 10, claim_until=CLAIM) == []
    # Before its claim ends the sweep's look-ahead sees the batch, due when the claim ends.
    ahead = await store.undispatched(CLAIM, 10)
    assert sorted(o.id for o in ahead) == sorted(o.id for o in sent)
    assert {o.due_at for o in ahead} == {CLAIM}

    # The dispatcher died before its mark; meanwhile one of them ran and one was retried.
    ran, retried, stranded = sorted(sent, key=lambda o: o.id)
    await store.apply_status([status(ran, S.RUNNING)])
    await store.apply_status(
        [status(retried, S.RUNNING), status(retried, S.FAILED, retry_at=CLAIM + MINUTE)]
    )
    retaken = await store.claim_undispatched(CLAIM, 10, claim_until=CLAIM + MINUTE)
    assert [o.id for o in retaken] == [stranded.id]  # the retry is not due yet; ran is gone
    await store.finish_claim(retaken, CLAIM + MINUTE, dispatched_at=CLAIM)
    later = CLAIM + 2 * MINUTE
    again = await store.claim_undispatched(later, 10, claim_until=later + MINUTE)
    assert [o.id for o in again] == [retried.id]  # the batch's record went with the first sweep


async def test_a_published_batch_is_never_swept(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=T0 - MINUTE)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, minutely, claim_until=CLAIM)
    assert result.queued
    assert result.batch is not None
    stored = {o.id: await store.get_occurrence(o.id) for o in result.queued}
    await store.mark_dispatched([], NOW, batch=result.batch)
    assert await store.undispatched(CLAIM + MINUTE, 10) == []
    assert await store.claim_undispatched(CLAIM + MINUTE, 10, claim_until=CLAIM) == []
    assert {o.id: await store.get_occurrence(o.id) for o in result.queued} == stored


async def test_dispatch_due_without_claim_until_leaves_due_at_alone(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=T0 - MINUTE)
    await store.create_jobs([job])
    result = await store.dispatch_due([job.id], NOW, minutely)
    assert [o.id for o in await store.undispatched(NOW, 10)] == [o.id for o in result.queued]


# --- status -----------------------------------------------------------------------------------


async def test_running_then_completed_in_one_batch(store: Store) -> None:
    job = make_job()
    occ = await fired(store, job)
    t1, t2 = NOW + timedelta(seconds=1), NOW + timedelta(seconds=3)
    result = await store.apply_status(
        [
            status(occ, S.RUNNING, t1, instance_id="w-1"),
            status(occ, S.COMPLETED, t2, result={"sent": 3}, duration_ms=2000.0),
        ]
    )
    assert [(c.from_status, c.to_status, c.attempt) for c in result.applied] == [
        (S.QUEUED, S.RUNNING, 1),
        (S.RUNNING, S.COMPLETED, 1),
    ]
    assert result.ignored == []
    assert result.heartbeats == 0
    stored = await store.get_occurrence(occ.id)
    assert stored.status is S.COMPLETED
    assert (stored.start_time, stored.end_time, stored.last_heartbeat) == (t1, t2, t1)
    assert (stored.result, stored.duration_ms, stored.instance_id) == ({"sent": 3}, 2000.0, "w-1")
    assert [(c.to_status, c.timestamp) for c in stored.status_changes] == [
        (S.QUEUED, NOW),
        (S.RUNNING, t1),
        (S.COMPLETED, t2),
    ]
    stats = await store.get_job(job.id)
    assert (stats.total_executions, stats.success_count, stats.failure_count) == (1, 1, 0)
    assert stats.average_duration_ms == 2000.0


async def test_batch_of_many_occurrences_and_jobs(store: Store) -> None:
    """One batch over several occurrences and jobs, as the tracker writes them (on
    PostgreSQL one statement per table for the whole batch)."""
    job_a, job_b = make_job(), make_job()
    await store.create_jobs([job_a, job_b])
    queued = (await store.dispatch_due([job_a.id, job_b.id], NOW, one_time)).queued
    a1, b1 = sorted(queued, key=lambda o: o.job_id != job_a.id)
    [a2] = await _second_occurrence(store, job_a)
    done = NOW + timedelta(seconds=5)
    result = await store.apply_status(
        [
            status(a1, S.COMPLETED, done, result={"a": [1, 2], "n": None}, duration_ms=100.0),
            status(a2, S.FAILED, done, exception="boom", duration_ms=300.0),
            status(b1, S.RUNNING, NOW + timedelta(seconds=1), instance_id="w-2"),
            status(b1, S.COMPLETED, done, result="text", duration_ms=50.0),
        ]
    )
    assert len(result.applied) == 4
    assert result.ignored == []
    stored = {o: await store.get_occurrence(o.id) for o in (a1, a2, b1)}
    assert (stored[a1].status, stored[a1].result) == (S.COMPLETED, {"a": [1, 2], "n": None})
    assert (stored[a2].status, stored[a2].exception) == (S.FAILED, "boom")
    assert (stored[b1].status, stored[b1].result, stored[b1].instance_id) == (
        S.COMPLETED,
        "text",
        "w-2",
    )
    assert [c.to_status for c in stored[b1].status_changes] == [S.QUEUED, S.RUNNING, S.COMPLETED]
    a, b = await store.get_job(job_a.id), await store.get_job(job_b.id)
    assert (a.total_executions, a.success_count, a.failure_count) == (2, 1, 1)
    assert a.average_duration_ms == 100.0
    assert (b.total_executions, b.success_count, b.average_duration_ms) == (1, 1, 50.0)


async def _second_occurrence(store: Store, job: Job) -> list[Occurrence]:
    second = occurrence(job, T0 + MINUTE)
    await store.insert_occurrences([second])
    return [second]


async def test_final_status_without_start_gets_end_minus_duration(store: Store) -> None:
    occ = await fired(store, make_job())
    end = NOW + timedelta(seconds=10)
    await store.apply_status([status(occ, S.COMPLETED, end, duration_ms=1500.0)])
    stored = await store.get_occurrence(occ.id)
    assert stored.start_time == end - timedelta(milliseconds=1500)


async def test_ignored_records_late_transition_unknown(store: Store) -> None:
    occ = await fired(store, make_job())
    await store.apply_status(
        [status(occ, S.RUNNING), status(occ, S.FAILED, retry_at=NOW + MINUTE, exception="boom")]
    )
    ghost = new_id()
    late = status(occ, S.COMPLETED, attempt=1)
    forbidden = status(occ, S.QUEUED, attempt=2)
    unknown = status(ghost, S.RUNNING)
    result = await store.apply_status([late, forbidden, unknown])
    assert result.applied == []
    assert [(i.record, i.reason) for i in result.ignored] == [
        (late, "late"),
        (forbidden, "transition"),
        (unknown, "unknown"),
    ]
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.QUEUED, 2)


async def test_final_status_is_final(store: Store) -> None:
    occ = await fired(store, make_job())
    await store.apply_status([status(occ, S.CANCELLED)])
    result = await store.apply_status([status(occ, S.RUNNING), status(occ, S.COMPLETED)])
    assert [i.reason for i in result.ignored] == ["transition", "transition"]
    stored = await store.get_occurrence(occ.id)
    assert stored.status is S.CANCELLED
    assert len(stored.status_changes) == 2


async def test_running_on_running_is_a_heartbeat(store: Store) -> None:
    occ = await fired(store, make_job())
    t1, t2 = NOW + timedelta(seconds=1), NOW + timedelta(seconds=9)
    await store.apply_status([status(occ, S.RUNNING, t1, instance_id="w-1")])
    result = await store.apply_status([status(occ, S.RUNNING, t2, instance_id="w-1")])
    assert result.heartbeats == 1
    assert result.applied == []
    assert result.ignored == []
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.start_time, stored.last_heartbeat) == (S.RUNNING, t1, t2)
    assert len(stored.status_changes) == 2


async def test_failed_with_retry_at_requeues_next_attempt(store: Store) -> None:
    job = make_job()
    occ = await fired(store, job)
    await store.mark_dispatched([occ], NOW)
    retry_at = NOW + MINUTE
    result = await store.apply_status(
        [status(occ, S.RUNNING), status(occ, S.FAILED, retry_at=retry_at, exception="boom")]
    )
    assert [(c.from_status, c.to_status, c.attempt) for c in result.applied] == [
        (S.QUEUED, S.RUNNING, 1),
        (S.RUNNING, S.QUEUED, 2),
    ]
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.due_at) == (S.QUEUED, 2, retry_at)
    assert stored.dispatched_at is None
    assert stored.exception == "boom"
    assert stored.status_changes[-1].reason == "retry"
    assert await store.undispatched(retry_at - timedelta(seconds=1), 10) == []
    assert [o.id for o in await store.undispatched(retry_at, 10)] == [occ.id]
    assert (await store.get_job(job.id)).total_executions == 0
    # The second attempt runs and completes; reports of the first are late from now on.
    await store.apply_status(
        [status(occ, S.RUNNING, attempt=2), status(occ, S.COMPLETED, attempt=2)]
    )
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.COMPLETED, 2)


async def test_zombie_is_requeued_as_a_new_attempt(store: Store) -> None:
    occ = await fired(store, make_job())
    at = NOW + MINUTE
    await store.apply_status([status(occ, S.RUNNING)])
    result = await store.apply_status(
        [status(occ, S.UNKNOWN, at, exception="lost"), status(occ, S.QUEUED, at, attempt=2)]
    )
    assert [c.to_status for c in result.applied] == [S.UNKNOWN, S.QUEUED]
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt, stored.due_at) == (S.QUEUED, 2, at)


async def test_a_requeued_zombie_that_completes_shows_no_zombie_exception(store: Store) -> None:
    occ = await fired(store, make_job())
    at = NOW + MINUTE
    await store.apply_status([status(occ, S.RUNNING)])
    lost = status(occ, S.UNKNOWN, at, exception="lost", failure_type=FailureType.ZOMBIE)
    await store.apply_status([lost, status(occ, S.QUEUED, at, attempt=2)])
    await store.apply_status(
        [status(occ, S.RUNNING, at, attempt=2), status(occ, S.COMPLETED, at, attempt=2)]
    )
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.exception) == (S.COMPLETED, None)
    unknown = [c for c in stored.status_changes if c.to_status is S.UNKNOWN]
    assert [c.reason for c in unknown] == ["zombie: lost"]


async def test_job_statistics(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=T0 - 6 * MINUTE)
    await store.create_jobs([job])
    occs = (await store.dispatch_due([job.id], NOW, minutely)).queued
    assert len(occs) == 7
    await store.apply_status(
        [
            status(occs[0], S.COMPLETED, duration_ms=100.0),
            status(occs[1], S.COMPLETED),
            status(occs[2], S.FAILED, failure_type=FailureType.RETRIES_EXHAUSTED),
            status(occs[3], S.TIMED_OUT),
            status(occs[4], S.CANCELLED),
            status(occs[5], S.UNKNOWN),
        ]
    )
    await store.apply_status(
        [status(occs[5], S.FAILED), status(occs[6], S.COMPLETED, duration_ms=400.0)]
    )
    stats = await store.get_job(job.id)
    assert stats.total_executions == 7
    assert stats.success_count == 3
    assert stats.failure_count == 3
    assert stats.average_duration_ms == pytest.approx(250.0)
    assert (await store.get_occurrence(occs[2].id)).status_changes[-1].reason == "retries_exhausted"


# --- logs, lists, counts ----------------------------------------------------------------------


async def test_logs_in_order_with_sequence_numbers(store: Store) -> None:
    a = await fired(store, make_job())
    b = await fired(store, make_job())
    lines = [
        LogRecord(occurrence_id=a.id, timestamp=NOW, level="info", message="one"),
        LogRecord(occurrence_id=b.id, timestamp=NOW, level="info", message="other"),
        LogRecord(occurrence_id=new_id(), timestamp=NOW, level="info", message="dropped"),
        LogRecord(
            occurrence_id=a.id,
            timestamp=NOW + timedelta(seconds=1),
            level="error",
            message="two",
            data={"n": 1, "list": [1, 2]},
            category="app.mail",
        ),
    ]
    await store.append_logs(lines[:2])
    again = msgspec.structs.replace(lines[0], message="three")
    await store.append_logs([*lines[2:], again])
    logs = await store.occurrence_logs(a.id)
    assert [r for _, r in logs] == [lines[0], lines[3], again]
    seqs = [s for s, _ in logs]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 3
    assert [r.message for _, r in await store.occurrence_logs(a.id, after=seqs[0])] == [
        "two",
        "three",
    ]
    assert [r.message for _, r in await store.occurrence_logs(a.id, limit=1)] == ["one"]
    assert [r.message for _, r in await store.occurrence_logs(b.id)] == ["other"]


async def test_a_numbered_log_line_sent_twice_is_stored_once(store: Store) -> None:
    occ = await fired(store, make_job())

    def line(attempt: int | None, number: int | None, message: str) -> LogRecord:
        return LogRecord(
            occurrence_id=occ.id,
            timestamp=NOW,
            level="info",
            message=message,
            attempt=attempt,
            line=number,
        )

    first = [line(1, 1, "a"), line(1, 2, "b")]
    await store.append_logs(first)
    # a replayed outbox: line 2 again, in the same batch as line 3 and twice within it
    await store.append_logs([line(1, 2, "b"), line(1, 3, "c"), line(1, 3, "c")])
    # the next attempt numbers from 1 again; unnumbered lines are never merged
    await store.append_logs([line(2, 1, "retry"), line(None, None, "x"), line(None, None, "x")])
    logs = [r for _, r in await store.occurrence_logs(occ.id)]
    assert [(r.attempt, r.line, r.message) for r in logs] == [
        (1, 1, "a"),
        (1, 2, "b"),
        (1, 3, "c"),
        (2, 1, "retry"),
        (None, None, "x"),
        (None, None, "x"),
    ]


async def test_get_missing_occurrence_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.get_occurrence(new_id())


async def test_list_occurrences_filters_and_pages(store: Store) -> None:
    job, other = make_job(), make_job()
    await store.create_jobs([job, other])
    mine = [occurrence(job, T0 + i * MINUTE) for i in range(5)]
    theirs = occurrence(other, T0)
    await store.insert_occurrences([*mine, theirs])
    await store.apply_status([status(mine[1], S.RUNNING), status(mine[3], S.COMPLETED)])

    async def ids(**query: object) -> list[UUID]:
        page = await store.list_occurrences(OccurrenceQuery(**query))  # type: ignore[arg-type]
        assert all(o.status_changes == () for o in page.items)
        return [o.id for o in page.items]

    newest_first = [o.id for o in reversed(mine)]
    assert await ids(job_id=job.id) == newest_first
    assert await ids() == [theirs.id, *newest_first]
    assert await ids(statuses=(S.RUNNING, S.COMPLETED)) == [mine[3].id, mine[1].id]
    assert await ids(
        job_id=job.id, scheduled_after=T0 + MINUTE, scheduled_before=T0 + 3 * MINUTE
    ) == [
        mine[2].id,
        mine[1].id,
    ]
    first = await store.list_occurrences(OccurrenceQuery(job_id=job.id, limit=3))
    assert [o.id for o in first.items] == newest_first[:3]
    assert first.next_cursor is not None
    rest = await store.list_occurrences(
        OccurrenceQuery(job_id=job.id, limit=3, cursor=first.next_cursor)
    )
    assert [o.id for o in rest.items] == newest_first[3:]
    assert rest.next_cursor is None


async def test_count_occurrences(store: Store) -> None:
    job, other = make_job(), make_job()
    await store.create_jobs([job, other])
    occs = [occurrence(job, T0 + i * MINUTE) for i in range(3)]
    await store.insert_occurrences([*occs, occurrence(other, T0)])
    await store.apply_status([status(occs[0], S.RUNNING)])
    assert await store.count_occurrences((S.QUEUED, S.RUNNING, S.FAILED)) == {
        S.QUEUED: 3,
        S.RUNNING: 1,
        S.FAILED: 0,
    }
    by_job = await store.count_occurrences(job_id=job.id)
    assert by_job == {**dict.fromkeys(S, 0), S.QUEUED: 2, S.RUNNING: 1}


# --- the race ---------------------------------------------------------------------------------


@pytest.mark.parametrize("planner", [one_time, same_fire], ids=["one_time", "same_fire"])
async def test_concurrent_dispatchers_fire_each_job_once(
    store: Store, store_url: str, planner: FirePlanner
) -> None:
    jobs = [make_job() for _ in range(20)]
    await store.create_jobs(jobs)
    ids = [j.id for j in jobs]
    others = [SqlStore(store_url) for _ in range(3)]
    for other in others:
        await other.open()
    try:
        claimants = [store, *others] * 2
        results = await asyncio.gather(
            *(
                s.dispatch_due(ids[::step], NOW, planner)
                for s, step in zip(claimants, [1, -1] * 4, strict=True)
            )
        )
    finally:
        for other in others:
            await other.close()
    queued = [o.job_id for r in results for o in r.queued]
    assert sorted(queued) == sorted(ids)
    counts = await store.count_occurrences()
    assert counts[S.QUEUED] == len(jobs)


# --- sweep claims -----------------------------------------------------------------------------

CLAIM = T0 + 30 * MINUTE


async def test_claim_hides_occurrences_until_finished_or_run_out(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])
    a, b, c, later = (occurrence(job, T0 + i * MINUTE) for i in (0, 1, 2, 10))
    await store.insert_occurrences([a, b, c, later])
    due = T0 + 5 * MINUTE

    claimed = await store.claim_undispatched(due, 2, claim_until=CLAIM)
    assert [(o.id, o.due_at) for o in claimed] == [(a.id, a.due_at), (b.id, b.due_at)]
    assert [o.id for o in await store.undispatched(due, 10)] == [c.id]
    assert [o.id for o in await store.claim_undispatched(due, 10, claim_until=CLAIM)] == [c.id]
    assert await store.claim_undispatched(due, 10, claim_until=CLAIM) == []

    # a was published, b's publishing failed: b is sweepable again at its own due time.
    await store.finish_claim([a], CLAIM, dispatched_at=NOW)
    await store.finish_claim([b], CLAIM, dispatched_at=None)
    stored_a = await store.get_occurrence(a.id)
    assert (stored_a.dispatched_at, stored_a.due_at) == (NOW, a.due_at)
    stored_b = await store.get_occurrence(b.id)
    assert (stored_b.dispatched_at, stored_b.due_at) == (None, b.due_at)
    assert [o.id for o in await store.undispatched(due, 10)] == [b.id]

    # c's claimer never came back: its claim runs out at CLAIM.
    assert c.id not in [o.id for o in await store.undispatched(CLAIM - MINUTE, 10)]
    retaken = await store.claim_undispatched(CLAIM, 10, claim_until=CLAIM + MINUTE)
    assert [o.id for o in retaken] == [b.id, later.id, c.id]
    assert (await store.get_occurrence(c.id)).due_at == CLAIM + MINUTE
    await store.finish_claim(retaken, CLAIM + MINUTE, dispatched_at=NOW)
    assert (await store.get_occurrence(c.id)).due_at == CLAIM  # restored to the claim's view
    assert await store.undispatched(CLAIM + MINUTE, 10) == []


async def test_claim_respects_hold_and_takes_what_was_just_created(store: Store) -> None:
    job = make_job(concurrency_policy=ConcurrencyPolicy.QUEUE)
    await store.create_jobs([job])
    first = occurrence(job, T0, created_at=T0)
    second = occurrence(job, T0 + MINUTE, created_at=T0)
    # a manual trigger created this instant: no age spares it (only a claim would)
    fresh = occurrence(make_job(), T0, created_at=T0 + 5 * MINUTE)
    await store.create_jobs([make_job(id=fresh.job_id)])
    await store.insert_occurrences([first, second, fresh])
    claimed = await store.claim_undispatched(T0 + 5 * MINUTE, 10, claim_until=CLAIM)
    assert {o.id for o in claimed} == {first.id, fresh.id}  # second is held


async def test_finish_claim_leaves_an_occurrence_that_moved_on(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])
    retried, running = occurrence(job, T0), occurrence(job, T0 + MINUTE)
    await store.insert_occurrences([retried, running])
    claimed = await store.claim_undispatched(NOW + MINUTE, 10, claim_until=CLAIM)
    assert {o.id for o in claimed} == {retried.id, running.id}
    # Published already and picked up by a worker before the claim was settled.
    retry_at = NOW + 2 * MINUTE
    await store.apply_status(
        [
            status(retried, S.RUNNING),
            status(retried, S.FAILED, retry_at=retry_at),
            status(running, S.RUNNING),
        ]
    )
    await store.finish_claim(claimed, CLAIM, dispatched_at=NOW)
    stored = await store.get_occurrence(retried.id)
    assert (stored.attempt, stored.due_at, stored.dispatched_at) == (2, retry_at, None)
    stored = await store.get_occurrence(running.id)
    assert (stored.status, stored.due_at, stored.dispatched_at) == (
        S.RUNNING,
        running.due_at,
        NOW,
    )


async def test_concurrent_claimers_never_get_the_same_occurrence(
    store: Store, store_url: str
) -> None:
    jobs = [make_job() for _ in range(4)]
    await store.create_jobs(jobs)
    occs = [occurrence(j, T0 + i * timedelta(seconds=1)) for j in jobs for i in range(15)]
    await store.insert_occurrences(occs)
    others = [SqlStore(store_url) for _ in range(3)]
    for other in others:
        await other.open()

    async def drain(claimer: Store) -> list[UUID]:
        got: list[UUID] = []
        while batch := await claimer.claim_undispatched(NOW + MINUTE, 4, claim_until=CLAIM):
            got.extend(o.id for o in batch)
        return got

    try:
        results = await asyncio.gather(*(drain(s) for s in [store, *others] * 2))
    finally:
        for other in others:
            await other.close()
    claimed = [oid for got in results for oid in got]
    assert len(claimed) == len(set(claimed)), "an occurrence was claimed twice"
    assert sorted(claimed) == sorted(o.id for o in occs)


async def test_concurrent_sweeps_send_an_abandoned_batch_once(store: Store, store_url: str) -> None:
    """Fired batches whose dispatcher died before publishing: sweeps of several servers at
    once, after the claim, hand out each of their occurrences exactly once."""
    jobs = [make_job() for _ in range(30)]
    await store.create_jobs(jobs)
    sent: list[UUID] = []
    for start in range(0, len(jobs), 10):  # three batches, none marked
        chunk = [j.id for j in jobs[start : start + 10]]
        result = await store.dispatch_due(chunk, NOW, one_time, claim_until=CLAIM)
        assert result.batch is not None
        sent += [o.id for o in result.queued]
    others = [SqlStore(store_url) for _ in range(3)]
    for other in others:
        await other.open()

    async def drain(claimer: Store) -> list[UUID]:
        got: list[UUID] = []
        while batch := await claimer.claim_undispatched(CLAIM, 4, claim_until=CLAIM + MINUTE):
            got.extend(o.id for o in batch)
        return got

    try:
        results = await asyncio.gather(*(drain(s) for s in [store, *others] * 2))
    finally:
        for other in others:
            await other.close()
    claimed = [oid for got in results for oid in got]
    assert len(claimed) == len(set(claimed)), "an occurrence was claimed twice"
    assert sorted(claimed) == sorted(sent)


# --- zombies ----------------------------------------------------------------------------------


async def stale_running(store: Store, before: datetime, limit: int) -> list[Occurrence]:
    """Running occurrences silent since before ``before`` (the Queued side kept out)."""
    found = await store.stale_occurrences(
        before, running_threshold=0.0, queued_threshold=1e9, limit=limit
    )
    return [s.occurrence for s in found]


async def test_stale_running_finds_silent_running_occurrences(store: Store) -> None:
    job = make_job()
    await store.create_jobs([job])
    silent, beating, queued, late_start, done = (occurrence(job, T0 + i * MINUTE) for i in range(5))
    await store.insert_occurrences([silent, beating, queued, late_start, done])
    await store.apply_status(
        [
            status(silent, S.RUNNING, T0),
            status(beating, S.RUNNING, T0),
            status(beating, S.RUNNING, T0 + 10 * MINUTE),  # a heartbeat
            status(late_start, S.RUNNING, T0 + 2 * MINUTE),
            status(done, S.RUNNING, T0),
            status(done, S.COMPLETED, T0 + MINUTE),
        ]
    )
    before = T0 + 5 * MINUTE
    assert [o.id for o in await stale_running(store, before, 10)] == [silent.id, late_start.id]
    assert [o.id for o in await stale_running(store, before, 1)] == [silent.id]
    assert await stale_running(store, T0, 10) == []
    found = await stale_running(store, T0 + 11 * MINUTE, 10)
    assert [o.id for o in found] == [silent.id, late_start.id, beating.id]
    assert found[2].last_heartbeat == T0 + 10 * MINUTE
