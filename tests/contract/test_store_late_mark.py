"""A dispatcher's late ``mark_dispatched`` must not hide a retry from the sweeper.

Found by the chaos soak (docs/reliability.md, "Chaos soak", 10-minute run of 2026-11-25): in
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
