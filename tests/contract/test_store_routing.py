"""The store's routing slice (issue 32): an attempt a worker group declined (a job type it does
not run) goes back to the dispatcher when a group runs it now, and only then; a stale decline
changes nothing."""

from __future__ import annotations

from rota.core.ports import DependencyAwareStore

from .test_store import NOW, S, fired, make_job, status


async def test_a_declined_attempt_goes_back_to_the_dispatcher_when_a_group_runs_it(
    store: DependencyAwareStore,
) -> None:
    returned = await fired(store, make_job())
    unserved = await fired(store, make_job(job_type="gone-everywhere"))
    pinned = await fired(store, make_job(worker_id="aud"))  # its group lacks the type
    await store.mark_dispatched([returned, unserved, pinned], NOW)
    asked: list[tuple[str, str | None]] = []

    def serves(job_type: str, worker_id: str | None) -> bool:
        asked.append((job_type, worker_id))
        return (job_type, worker_id) == ("send-email", None)

    result = await store.return_declined(
        [(returned.id, 1), (unserved.id, 1), (pinned.id, 1)], serves
    )
    assert (result.returned, sorted(result.unserved)) == (
        [returned.id],
        sorted([unserved.id, pinned.id]),
    )
    assert ("send-email", "aud") in asked  # the job's own group is what is asked about
    back = await store.get_occurrence(returned.id)
    assert (back.status, back.attempt, back.dispatched_at) == (S.QUEUED, 1, None)
    assert returned.id in [o.id for o in await store.undispatched(back.due_at, 10)]
    for kept in (unserved, pinned):  # left for the caller to fail: untouched
        stored = await store.get_occurrence(kept.id)
        assert (stored.status, stored.dispatched_at) == (S.QUEUED, NOW)


async def test_a_stale_decline_changes_nothing(store: DependencyAwareStore) -> None:
    running, later, undispatched, handed = [await fired(store, make_job()) for _ in range(4)]
    await store.mark_dispatched([running, later, handed], NOW)
    await store.apply_status([status(running, S.RUNNING, attempt=1)])
    first = await store.return_declined([(handed.id, 1)], lambda _t, _w: True)
    assert first.returned == [handed.id]

    result = await store.return_declined(
        [(running.id, 1), (later.id, 7), (undispatched.id, 1), (handed.id, 1)],
        lambda _t, _w: True,
    )
    assert (result.returned, result.unserved) == ([], [])  # run elsewhere, another attempt,
    assert (await store.get_occurrence(running.id)).status is S.RUNNING  # never sent, twice
    assert (await store.get_occurrence(later.id)).dispatched_at == NOW


async def test_undispatch_hands_back_only_the_attempt_still_queued(
    store: DependencyAwareStore,
) -> None:
    queued, started = [await fired(store, make_job()) for _ in range(2)]
    await store.mark_dispatched([queued, started], NOW)
    await store.apply_status([status(started, S.RUNNING, attempt=1)])
    await store.undispatch([queued, started])
    assert (await store.get_occurrence(queued.id)).dispatched_at is None
    assert (await store.get_occurrence(started.id)).dispatched_at == NOW
