"""A dispatcher's late ``mark_dispatched`` must not hide a retry from the sweeper.

Found by the chaos soak (its 10-minute run of 2026-11-25, bench/2026-11-29-reliability-diary.md): in
the distributed mode the dispatcher publishes a batch in the background and then marks its
occurrences dispatched by id. When the publisher confirm is slow (here just after a server
restart took buckets over), a job whose first attempt fails at once is run, reported failed
with a retry time and requeued as attempt 2 (``dispatched_at`` cleared, for the sweeper to
publish it when due) *before* that mark; the mark then sets ``dispatched_at`` on attempt 2,
and the sweeper, which publishes only undispatched occurrences, never sends it. It stays
Queued until the Queued zombie threshold (30 minutes by default) requeues it again.

The mark now applies only to the attempt that was published and only while it is still
undispatched (as ``finish_claim`` does).
"""

from __future__ import annotations

from rota.core.ports import Store

from .test_store import MINUTE, NOW, S, fired, make_job, status


async def test_a_late_mark_dispatched_does_not_hide_a_retry_from_the_sweeper(
    store: Store,
) -> None:
    occ = await fired(store, make_job())  # published, its mark not yet written
    retry_at = NOW + MINUTE
    await store.apply_status(
        [status(occ, S.RUNNING), status(occ, S.FAILED, retry_at=retry_at, exception="boom")]
    )
    await store.mark_dispatched([occ], NOW)  # the dispatcher's mark, after the retry
    stored = await store.get_occurrence(occ.id)
    assert (stored.status, stored.attempt) == (S.QUEUED, 2)
    assert [o.id for o in await store.undispatched(retry_at, 10)] == [occ.id], (
        f"attempt 2 is marked dispatched at {stored.dispatched_at}: the sweeper never sends it"
    )


async def test_a_batch_mark_sets_each_published_attempt_once_in_any_order(
    store: Store,
) -> None:
    # PostgreSQL marks a batch in one statement: each occurrence given, in whatever order
    # and however often, is marked; one already marked keeps its time; a mark of an attempt
    # that was since requeued as the next one leaves that one undispatched.
    occs = [await fired(store, make_job()) for _ in range(4)]
    fresh, again, requeued, earlier = occs
    await store.mark_dispatched([earlier], NOW - MINUTE)
    await store.apply_status(
        [
            status(requeued, S.RUNNING),
            status(requeued, S.FAILED, retry_at=NOW + MINUTE, exception="boom"),
        ]
    )
    await store.mark_dispatched([again, earlier, requeued, fresh, again][::-1], NOW)
    stored = {o.id: await store.get_occurrence(o.id) for o in occs}
    assert stored[fresh.id].dispatched_at == NOW
    assert stored[again.id].dispatched_at == NOW
    assert stored[earlier.id].dispatched_at == NOW - MINUTE
    assert (stored[requeued.id].attempt, stored[requeued.id].dispatched_at) == (2, None)
    assert [o.id for o in await store.undispatched(NOW + MINUTE, 10)] == [requeued.id]
