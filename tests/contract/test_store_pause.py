"""The PauseStore contract, on SQLite and PostgreSQL: pause, resume and skip a job; the end of
timed pauses, each ended once by servers racing for it; the dispatch counting the skipped
fires down; a paused job left out of the missed-fire check."""

from __future__ import annotations

import asyncio

import pytest
from msgspec.structs import replace

from rota.core.errors import NotFoundError
from rota.core.ids import new_id
from rota.core.models import OccurrenceStatus
from rota.core.planning import plan_fires
from rota.core.ports import Store
from rota.stores.sql import SqlStore
from tests.contract.test_store import MINUTE, NOW, SETTINGS, T0, make_job


async def test_pause_resume_and_skip_a_job(store: Store) -> None:
    job = make_job(cron_expression="* * * * *")
    await store.create_jobs([job])
    assert not (await store.get_job(job.id)).is_paused

    paused = await store.pause_job(job.id, NOW, "ann", "freeze", NOW + MINUTE)
    assert (paused.paused_at, paused.paused_by) == (NOW, "ann")
    assert (paused.pause_note, paused.paused_until) == ("freeze", NOW + MINUTE)
    assert await store.get_job(job.id) == paused
    # an edit of the definition leaves the pause alone
    edited = await store.update_job(
        replace(paused, display_name="renamed"), expected_version=paused.version
    )
    assert edited.is_paused
    assert edited.pause_note == "freeze"

    skipping = await store.set_skip_next(job.id, 3, "deploy")
    assert (skipping.skip_next, skipping.skip_note) == (3, "deploy")
    assert skipping.is_paused
    cleared = await store.set_skip_next(job.id, 0, "ignored")
    assert (cleared.skip_next, cleared.skip_note) == (None, None)

    resumed = await store.resume_job(job.id)
    assert resumed is not None
    assert (resumed.paused_at, resumed.paused_by, resumed.pause_note) == (None, None, None)
    assert resumed.paused_until is None
    assert resumed.is_active  # the on/off switch is not touched
    assert await store.resume_job(job.id) is None  # not paused

    missing = new_id()
    with pytest.raises(NotFoundError):
        await store.pause_job(missing, NOW, "ann", None, None)
    with pytest.raises(NotFoundError):
        await store.resume_job(missing)
    with pytest.raises(NotFoundError):
        await store.set_skip_next(missing, 1, None)


async def test_timed_pauses_end_once_when_servers_race(store: Store, store_url: str) -> None:
    due = [make_job(cron_expression="* * * * *") for _ in range(6)]
    later = make_job(cron_expression="* * * * *")
    untimed = make_job(cron_expression="* * * * *")
    await store.create_jobs([*due, later, untimed])
    for job in due:
        await store.pause_job(job.id, T0, "ann", "window", NOW)
    await store.pause_job(later.id, T0, "ann", None, NOW + MINUTE)
    await store.pause_job(untimed.id, T0, "ann", None, None)

    other = SqlStore(store_url)  # a second server on the same database
    await other.open()
    try:
        results = await asyncio.gather(
            store.end_pauses(NOW, 100), other.end_pauses(NOW, 100), store.end_pauses(NOW, 100)
        )
    finally:
        await other.close()
    ended = [job.id for result in results for job in result]
    assert sorted(ended) == sorted(j.id for j in due)  # each once, by one of them
    assert all(job.pause_note == "window" for result in results for job in result)  # before
    for job in due:
        assert not (await store.get_job(job.id)).is_paused
    assert (await store.get_job(later.id)).is_paused
    assert (await store.get_job(untimed.id)).is_paused
    assert await store.end_pauses(NOW, 100) == []
    assert [j.id for j in await store.end_pauses(NOW + MINUTE, 100)] == [later.id]


async def test_dispatch_counts_the_skipped_fires_down(store: Store) -> None:
    job = make_job(cron_expression="* * * * *", execute_at=None, next_run_at=T0)
    await store.create_jobs([job])
    await store.set_skip_next(job.id, 2, "deploy")

    def planner(j: object, active: int, now: object) -> object:
        return plan_fires(j, active, now, SETTINGS)  # type: ignore[arg-type]

    seen = []
    for at in (T0, T0 + MINUTE, T0 + 2 * MINUTE):
        result = await store.dispatch_due([job.id], at, planner)  # type: ignore[arg-type]
        seen.append([(o.status, o.skip_reason) for o in (*result.skipped, *result.queued)])
        stored = await store.get_job(job.id)
        seen.append(stored.skip_next)
    skipped = (OccurrenceStatus.SKIPPED, "skip_next")
    assert seen == [[skipped], 1, [skipped], None, [(OccurrenceStatus.QUEUED, None)], None]
    assert (await store.get_job(job.id)).skip_note is None  # gone with the last one


async def test_a_paused_job_is_not_watched_for_missed_fires(store: Store) -> None:
    running = make_job(cron_expression="* * * * *", bucket=0)
    paused = make_job(cron_expression="* * * * *", bucket=0)
    await store.create_jobs([running, paused])
    await store.pause_job(paused.id, NOW, "ann", None, None)
    watched = await store.watched_schedules([0], NOW, NOW + MINUTE, 10)
    assert [w.job_id for w in watched] == [running.id]
    await store.resume_job(paused.id)
    watched = await store.watched_schedules([0], NOW, NOW + MINUTE, 10)
    assert sorted(w.job_id for w in watched) == sorted([running.id, paused.id])
