"""``supersede_queued``: an occurrence sent ahead of its due time takes its job's new version
after an edit (the dispatch lead, docs/concepts.md "The life of a fire"), only while it is
still Queued and of an older version."""

from __future__ import annotations

from msgspec.structs import replace

from rota.core.models import Priority
from rota.core.ports import Store

from .test_store import S, fired, make_job, status


async def test_a_queued_occurrence_takes_the_new_version_and_a_started_one_does_not(
    store: Store,
) -> None:
    job = make_job(job_data={"word": "old"})
    queued = await fired(store, job)
    other = make_job(job_data={"word": "old"})
    started = await fired(store, other)
    await store.apply_status([status(started, S.RUNNING)])
    edited = replace(
        job,
        version=job.version + 1,
        job_type="send-sms",
        job_data={"word": "new"},
        priority=Priority.HIGH,
        timeout_seconds=12.5,
        retry_delay_seconds=3.0,
    )
    (renewed,) = await store.supersede_queued(edited, [queued.id], max_retries=4)
    assert renewed.id == queued.id
    assert (renewed.status, renewed.scheduled_for) == (S.QUEUED, queued.scheduled_for)
    assert (renewed.job_version, renewed.job_type, renewed.job_data) == (
        edited.version,
        "send-sms",
        {"word": "new"},
    )
    assert (renewed.priority, renewed.timeout_seconds, renewed.retry_delay_seconds) == (
        Priority.HIGH,
        12.5,
        3.0,
    )
    assert renewed.max_retries == 4
    stored = await store.get_occurrence(queued.id)
    assert (stored.job_version, stored.job_data) == (edited.version, {"word": "new"})
    # the same version again, another job's occurrence, a started one: nothing changes
    assert await store.supersede_queued(edited, [queued.id], max_retries=4) == []
    assert await store.supersede_queued(edited, [started.id], max_retries=4) == []
    newer_other = replace(other, version=other.version + 1, job_data={"word": "new"})
    assert await store.supersede_queued(newer_other, [started.id], max_retries=0) == []
    assert (await store.get_occurrence(started.id)).job_data == {"word": "old"}
    assert await store.supersede_queued(edited, [], max_retries=0) == []
