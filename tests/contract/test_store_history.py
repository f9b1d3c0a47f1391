"""An occurrence's status history is appended to by the statement that changes it, without
being read: the entries of every batch follow the earlier ones, in order, whatever the history
held before (none, its creation, several batches' worth)."""

from __future__ import annotations

from datetime import timedelta

from msgspec.structs import replace

from rota.core.models import OccurrenceStatus as S
from rota.core.ports import Store
from tests.contract.test_store import NOW, fired, make_job, occurrence, status


async def test_each_batch_appends_its_changes_after_the_earlier_ones(store: Store) -> None:
    occ = await fired(store, make_job())
    t1, t2 = NOW + timedelta(seconds=1), NOW + timedelta(seconds=2)
    await store.apply_status([status(occ, S.RUNNING, t1, instance_id="w-1")])
    await store.apply_status([status(occ, S.RUNNING, t1 + timedelta(milliseconds=5))])  # beat
    await store.apply_status([status(occ, S.COMPLETED, t2, duration_ms=900.0)])

    stored = await store.get_occurrence(occ.id)
    assert [(c.from_status, c.to_status, c.timestamp) for c in stored.status_changes] == [
        (None, S.QUEUED, NOW),
        (S.QUEUED, S.RUNNING, t1),
        (S.RUNNING, S.COMPLETED, t2),
    ]


async def test_a_history_that_held_nothing_gets_the_batch_entries(store: Store) -> None:
    """An occurrence stored with no history (``NULL``) and a report with the run's start
    folded in: both entries of the one statement, in order."""
    job = make_job()
    await store.create_jobs([job])
    bare = replace(occurrence(job), status_changes=())
    await store.insert_occurrences([bare])
    started, ended = NOW, NOW + timedelta(seconds=3)
    await store.apply_status(
        [
            status(
                bare,
                S.COMPLETED,
                ended,
                instance_id="w-2",
                duration_ms=3000.0,
                started_at=started,
                result={"rows": 2},
            )
        ]
    )

    stored = await store.get_occurrence(bare.id)
    assert [(c.from_status, c.to_status, c.timestamp) for c in stored.status_changes] == [
        (S.QUEUED, S.RUNNING, started),
        (S.RUNNING, S.COMPLETED, ended),
    ]
    assert (stored.status, stored.result) == (S.COMPLETED, {"rows": 2})
