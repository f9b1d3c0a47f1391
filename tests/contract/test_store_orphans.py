"""The dead-worker query (``orphaned_occurrences``, issue 17): Running occurrences of worker
instances no longer registered and silent past a short silence, and Unknown ones (an attempt
interrupted at its worker's stop), on every store kind."""

from __future__ import annotations

from datetime import timedelta

from rota.core.models import FailureType
from rota.core.ports import Store

from .test_store import T0, S, make_job, occurrence, status

SECOND = timedelta(seconds=1)


async def test_orphans_are_running_on_gone_instances_past_the_silence_or_interrupted(
    store: Store,
) -> None:
    own = make_job(zombie_threshold_seconds=3600.0)
    await store.create_jobs([own])
    gone, live, beating, nobody, interrupted, done, queued = (
        occurrence(own, T0 + i * SECOND) for i in range(7)
    )
    await store.insert_occurrences([gone, live, beating, nobody, interrupted, done, queued])
    await store.apply_status(
        [
            status(gone, S.RUNNING, T0, instance_id="w-gone"),
            status(live, S.RUNNING, T0, instance_id="w-live"),
            status(beating, S.RUNNING, T0, instance_id="w-gone"),
            status(beating, S.RUNNING, T0 + 8 * SECOND),  # a heartbeat: still reporting
            status(nobody, S.RUNNING, T0),  # reported Running for no known instance
            status(interrupted, S.RUNNING, T0, instance_id="w-live"),
            status(
                interrupted,
                S.UNKNOWN,
                T0 + SECOND,
                instance_id="w-live",
                exception="interrupted: worker stopped",
                failure_type=FailureType.ZOMBIE,
            ),
            status(done, S.RUNNING, T0, instance_id="w-gone"),
            status(done, S.COMPLETED, T0 + SECOND, instance_id="w-gone"),
        ]
    )
    now = T0 + 10 * SECOND

    async def orphans(live_instances: list[str], silent_for: float = 5.0) -> list[object]:
        found = await store.orphaned_occurrences(
            now, live_instances=live_instances, silent_for=silent_for, limit=10
        )
        return [s.occurrence.id for s in found]

    # the job's own threshold (1 h) does not matter; "beating" is silent 2 s only
    assert sorted(await orphans(["w-live"])) == sorted([gone.id, interrupted.id])
    # nothing registered: every silent instance's occurrence, and the interrupted one
    assert sorted(await orphans([])) == sorted([gone.id, live.id, interrupted.id])
    assert sorted(await orphans([], silent_for=1.0)) == sorted(
        [gone.id, live.id, beating.id, interrupted.id]
    )
    assert await orphans(["w-live", "w-gone"]) == [interrupted.id]
    found = await store.orphaned_occurrences(
        now, live_instances=["w-live"], silent_for=5.0, limit=1
    )
    assert len(found) == 1
    [stale] = [
        s
        for s in await store.orphaned_occurrences(
            now, live_instances=["w-live"], silent_for=5.0, limit=10
        )
        if s.occurrence.id == gone.id
    ]
    assert stale.zombie_threshold_seconds == 3600.0
    assert stale.occurrence.instance_id == "w-gone"
