"""The Store contract for failed occurrences (dead letters), on SQLite and PostgreSQL: records
written by ``apply_status`` in the same transaction, poison records, list/get/update/delete,
and the manual retry."""

from __future__ import annotations

from uuid import UUID

import pytest

from rota.core.errors import ConflictError, NotFoundError, ValidationError
from rota.core.ids import new_id
from rota.core.models import FailedOccurrence, FailureType, Occurrence
from rota.core.ports import Store
from rota.core.records import FAILURE_TEXT_LIMIT, TRUNCATED_MARK, FailedQuery
from tests.contract.test_store import MINUTE, NOW, S, fired, make_job, minutely, status

LATER = NOW + MINUTE


async def failed_records(store: Store, **filters: object) -> list[FailedOccurrence]:
    page = await store.list_failed(FailedQuery(limit=1000, **filters))  # type: ignore[arg-type]
    return page.items


async def running(store: Store, **job_fields: object) -> Occurrence:
    occ = await fired(store, make_job(job_data={"to": "a@example.com"}, **job_fields))
    await store.apply_status([status(occ, S.RUNNING, instance_id="w-1")])
    return occ


def poison(occurrence_id: UUID | None = None, **fields: object) -> FailedOccurrence:
    values: dict[str, object] = {
        "id": new_id(),
        "occurrence_id": occurrence_id,
        "job_id": None,
        "job_type": "",
        "failure_type": FailureType.POISON,
        "exception": "undecodable job message: body is not JSON",
        "job_data": None,
        "attempts": 0,
        "failed_at": NOW,
        "raw_message": "{not json",
    }
    values.update(fields)
    return FailedOccurrence(**values)  # type: ignore[arg-type]


# --- written by apply_status ----------------------------------------------------------------


async def test_final_failure_records_one_failed_occurrence(store: Store) -> None:
    occ = await running(store)
    result = await store.apply_status(
        [
            status(
                occ,
                S.FAILED,
                LATER,
                exception="Traceback …\nValueError: bad address",
                failure_type=FailureType.PERMANENT,
            )
        ]
    )
    assert [c.to_status for c in result.applied] == [S.FAILED]
    [record] = await failed_records(store)
    assert record.occurrence_id == occ.id
    assert (record.job_id, record.job_type) == (occ.job_id, occ.job_type)
    assert record.failure_type is FailureType.PERMANENT
    assert record.exception == "Traceback …\nValueError: bad address"
    assert record.job_data == {"to": "a@example.com"}
    assert (record.attempts, record.failed_at) == (1, LATER)
    assert not record.resolved
    assert (record.resolved_at, record.resolved_by, record.raw_message) == (None, None, None)
    assert await store.get_failed(record.id) == record
    # A repeated report of the same end changes nothing and adds nothing.
    again = await store.apply_status([status(occ, S.FAILED, LATER, exception="again")])
    assert [i.reason for i in again.ignored] == ["transition"]
    assert await failed_records(store) == [record]


@pytest.mark.parametrize(
    ("final", "failure_type", "expected"),
    [
        (S.FAILED, None, FailureType.RETRIES_EXHAUSTED),
        (S.FAILED, FailureType.UNKNOWN_JOB_TYPE, FailureType.UNKNOWN_JOB_TYPE),
        (S.FAILED, FailureType.INVALID_DATA, FailureType.INVALID_DATA),
        (S.TIMED_OUT, None, FailureType.TIMED_OUT),
        (S.TIMED_OUT, FailureType.TIMED_OUT, FailureType.TIMED_OUT),
    ],
)
async def test_failure_type_comes_from_the_record_or_the_status(
    store: Store, final: S, failure_type: FailureType | None, expected: FailureType
) -> None:
    occ = await running(store)
    await store.apply_status([status(occ, final, LATER, failure_type=failure_type)])
    [record] = await failed_records(store)
    assert record.failure_type is expected


async def test_unknown_then_failed_is_a_zombie_with_the_reason(store: Store) -> None:
    occ = await running(store)
    await store.apply_status(
        [
            status(occ, S.UNKNOWN, LATER, exception="no heartbeat from worker instance w-1"),
            status(occ, S.FAILED, LATER),
        ]
    )
    [record] = await failed_records(store)
    assert record.failure_type is FailureType.ZOMBIE
    assert record.exception == "no heartbeat from worker instance w-1"


async def test_no_record_for_retries_success_cancel_or_requeued_zombie(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=NOW - 3 * MINUTE)
    await store.create_jobs([job])
    a, b, c, d = (await store.dispatch_due([job.id], NOW, minutely)).queued
    await store.apply_status(
        [
            status(a, S.FAILED, retry_at=LATER, exception="try again"),
            status(b, S.COMPLETED),
            status(c, S.CANCELLED),
            status(d, S.RUNNING),
            status(d, S.UNKNOWN, exception="lost"),
            status(d, S.QUEUED, attempt=2),
        ]
    )
    assert await failed_records(store) == []


async def test_many_failures_in_one_batch_each_get_a_record(store: Store) -> None:
    job = make_job(execute_at=None, next_run_at=NOW - 4 * MINUTE)
    await store.create_jobs([job])
    occs = (await store.dispatch_due([job.id], NOW, minutely)).queued
    records = [status(o, S.FAILED, exception=f"boom {i}") for i, o in enumerate(occs)]
    await store.apply_status(records)
    stored = await failed_records(store)
    assert sorted(r.occurrence_id for r in stored if r.occurrence_id) == sorted(o.id for o in occs)
    assert {r.exception for r in stored} == {f"boom {i}" for i in range(len(occs))}
    assert (await store.get_job(job.id)).failure_count == len(occs)


async def test_long_exception_is_cut(store: Store) -> None:
    occ = await running(store)
    await store.apply_status([status(occ, S.FAILED, exception="x" * (FAILURE_TEXT_LIMIT * 3))])
    [record] = await failed_records(store)
    assert record.exception is not None
    assert len(record.exception) == FAILURE_TEXT_LIMIT
    assert record.exception.endswith(TRUNCATED_MARK)
    # The occurrence itself keeps what the worker reported.
    assert len((await store.get_occurrence(occ.id)).exception or "") == FAILURE_TEXT_LIMIT * 3


async def test_at_most_one_unresolved_record_per_occurrence(store: Store) -> None:
    occ = await running(store)
    assert await store.record_dead_letters([poison(occ.id)]) == 1
    await store.apply_status([status(occ, S.FAILED)])  # its own record would be a second
    [record] = await failed_records(store)
    assert record.failure_type is FailureType.POISON
    assert (await store.get_occurrence(occ.id)).status is S.FAILED  # the status still applies


# --- poison records -------------------------------------------------------------------------


async def test_poison_records_name_no_occurrence_and_keep_the_raw_body(store: Store) -> None:
    first = poison(raw_message="\xff" * (FAILURE_TEXT_LIMIT + 5))
    second = poison(job_type="send-email", job_id=new_id())
    assert await store.record_dead_letters([first, second]) == 2
    stored = {r.id: r for r in await failed_records(store)}
    assert stored[second.id] == second
    raw = stored[first.id].raw_message
    assert raw is not None
    assert len(raw) == FAILURE_TEXT_LIMIT
    assert raw.endswith(TRUNCATED_MARK)
    assert stored[first.id].occurrence_id is None
    assert await store.record_dead_letters([]) == 0


async def test_dead_letters_for_one_unknown_occurrence_are_stored_once(store: Store) -> None:
    unknown = new_id()
    records = [poison(unknown), poison(unknown)]
    assert await store.record_dead_letters(records) == 1
    assert await store.record_dead_letters([poison(unknown)]) == 0
    assert [r.occurrence_id for r in await failed_records(store)] == [unknown]


# --- reading --------------------------------------------------------------------------------


async def test_list_filters_and_pages_newest_first(store: Store) -> None:
    permanent = await running(store)
    timed_out = await running(store)
    await store.apply_status(
        [
            status(permanent, S.FAILED, NOW, failure_type=FailureType.PERMANENT),
            status(timed_out, S.TIMED_OUT, LATER),
        ]
    )
    await store.record_dead_letters([poison(failed_at=LATER + MINUTE)])
    everything = await failed_records(store)
    assert len(everything) == 3
    assert [r.id for r in everything] == sorted((r.id for r in everything), reverse=True)

    by_job = await failed_records(store, job_id=permanent.job_id)
    assert [r.occurrence_id for r in by_job] == [permanent.id]
    by_type = await failed_records(
        store, failure_types=(FailureType.TIMED_OUT, FailureType.PERMANENT)
    )
    assert {r.occurrence_id for r in by_type} == {permanent.id, timed_out.id}
    window = await failed_records(store, failed_after=LATER, failed_before=LATER + MINUTE)
    assert [r.occurrence_id for r in window] == [timed_out.id]
    await store.update_failed(by_job[0].id, resolved=True, now=LATER)
    assert [r.id for r in await failed_records(store, resolved=True)] == [by_job[0].id]
    assert len(await failed_records(store, resolved=False)) == 2

    first = await store.list_failed(FailedQuery(limit=2))
    assert first.next_cursor is not None
    rest = await store.list_failed(FailedQuery(limit=2, cursor=first.next_cursor))
    assert rest.next_cursor is None
    assert [r.id for r in first.items + rest.items] == [r.id for r in everything]
    with pytest.raises(ValidationError):
        await store.list_failed(FailedQuery(cursor="not-a-cursor"))


async def test_missing_record_raises_not_found(store: Store) -> None:
    missing = new_id()
    with pytest.raises(NotFoundError):
        await store.get_failed(missing)
    with pytest.raises(NotFoundError):
        await store.update_failed(missing, resolved=True, now=NOW)
    with pytest.raises(NotFoundError):
        await store.delete_failed(missing)
    with pytest.raises(NotFoundError):
        await store.retry_failed(missing, NOW)


# --- resolution -----------------------------------------------------------------------------


async def test_resolve_unresolve_and_delete(store: Store) -> None:
    occ = await running(store)
    await store.apply_status([status(occ, S.FAILED)])
    [record] = await failed_records(store)
    resolved = await store.update_failed(
        record.id,
        resolution_note="bad address fixed by hand",
        resolution_action="Manually resolved",
        resolved=True,
        resolved_by="ops",
        now=LATER,
    )
    assert (resolved.resolved, resolved.resolved_at, resolved.resolved_by) == (True, LATER, "ops")
    assert (resolved.resolution_note, resolved.resolution_action) == (
        "bad address fixed by hand",
        "Manually resolved",
    )
    # A later note keeps the resolution time; None leaves fields as they are.
    noted = await store.update_failed(
        record.id, resolution_note="also told the customer", now=LATER + MINUTE
    )
    assert (noted.resolved_at, noted.resolution_action) == (LATER, "Manually resolved")
    assert noted.resolution_note == "also told the customer"
    reopened = await store.update_failed(record.id, resolved=False, now=LATER)
    assert (reopened.resolved, reopened.resolved_at, reopened.resolved_by) == (False, None, None)
    await store.delete_failed(record.id)
    assert await failed_records(store) == []
    assert (await store.get_occurrence(occ.id)).status is S.FAILED  # the occurrence stays


async def test_reopening_a_second_record_of_one_occurrence_conflicts(store: Store) -> None:
    occ = await running(store)
    await store.apply_status([status(occ, S.FAILED)])
    [first] = await failed_records(store)
    await store.retry_failed(first.id, LATER)
    await store.apply_status([status(occ, S.FAILED, LATER, attempt=2)])
    assert len(await failed_records(store, resolved=False)) == 1
    with pytest.raises(ConflictError):
        await store.update_failed(first.id, resolved=False, now=LATER)
    assert (await store.get_failed(first.id)).resolved


# --- retry ----------------------------------------------------------------------------------


async def test_retry_queues_a_new_attempt_and_resolves_the_record(store: Store) -> None:
    occ = await running(store)
    await store.mark_dispatched([occ], NOW)
    await store.apply_status([status(occ, S.FAILED, exception="boom")])
    [record] = await failed_records(store)
    retried = await store.retry_failed(record.id, LATER, "ops")
    assert (retried.status, retried.attempt, retried.due_at) == (S.QUEUED, 2, LATER)
    assert (retried.dispatched_at, retried.start_time, retried.end_time) == (None, None, None)
    last = retried.status_changes[-1]
    assert (last.from_status, last.to_status, last.attempt) == (S.FAILED, S.QUEUED, 2)
    assert (last.timestamp, last.reason) == (LATER, "manual retry")
    stored = await store.get_failed(record.id)
    assert (stored.resolved, stored.resolved_at, stored.resolved_by) == (True, LATER, "ops")
    assert stored.resolution_action == "retried"
    # The dispatcher's pending sweep publishes it.
    assert [o.id for o in await store.undispatched(LATER, 10)] == [occ.id]
    # Retrying again while it is queued is refused.
    with pytest.raises(ConflictError):
        await store.retry_failed(record.id, LATER)
    # The new attempt fails too: a new record, the first stays resolved.
    await store.apply_status(
        [
            status(occ, S.RUNNING, LATER, attempt=2),
            status(occ, S.FAILED, LATER, attempt=2, failure_type=FailureType.PERMANENT),
        ]
    )
    second = [r for r in await failed_records(store) if r.id != record.id]
    assert [(r.attempts, r.failure_type, r.resolved) for r in second] == [
        (2, FailureType.PERMANENT, False)
    ]


async def test_retry_of_a_timed_out_or_unknown_occurrence(store: Store) -> None:
    timed_out = await running(store)
    await store.apply_status([status(timed_out, S.TIMED_OUT)])
    [record] = await failed_records(store)
    assert (await store.retry_failed(record.id, LATER)).status is S.QUEUED

    zombie = await running(store)
    await store.apply_status([status(zombie, S.UNKNOWN, exception="lost")])
    await store.record_dead_letters(
        [poison(zombie.id, failure_type=FailureType.ZOMBIE, job_id=zombie.job_id)]
    )
    [zombie_record] = await failed_records(store, job_id=zombie.job_id)
    retried = await store.retry_failed(zombie_record.id, LATER)
    assert (retried.status, retried.attempt) == (S.QUEUED, 2)
    assert retried.status_changes[-1].from_status is S.UNKNOWN


async def test_retry_refuses_poison_gone_and_unfailed_occurrences(store: Store) -> None:
    no_occurrence, gone = poison(), poison(new_id())
    completed = await running(store)
    await store.apply_status([status(completed, S.COMPLETED)])
    not_failed = poison(completed.id)
    await store.record_dead_letters([no_occurrence, gone, not_failed])
    for record in (no_occurrence, gone, not_failed):
        with pytest.raises(ConflictError):
            await store.retry_failed(record.id, LATER)
        assert not (await store.get_failed(record.id)).resolved
    assert (await store.get_occurrence(completed.id)).status is S.COMPLETED
