"""The lists' query filter (``?q=``, :mod:`rota.core.query`) on every store kind: job type,
job by name or id, tag, worker group, attempts, times and job data fields, on occurrences,
failed occurrences and jobs."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from rota.core.errors import ValidationError
from rota.core.models import FailureType, Job
from rota.core.ports import Store
from rota.core.query import narrow_failed, narrow_jobs, narrow_occurrences, parse_query
from rota.core.records import FailedQuery, JobQuery, OccurrenceQuery
from rota.core.sealing import DataSeal, new_key
from rota.stores.sql import SqlStore
from tests.contract.test_failed_occurrences import poison
from tests.contract.test_store import NOW, fired, make_job


async def runs(store: Store, q: str, **fields: object) -> list[UUID]:
    query = narrow_occurrences(
        OccurrenceQuery(limit=100, **fields), parse_query(q, "occurrences", now=NOW)
    )  # type: ignore[arg-type]
    return [o.job_id for o in (await store.list_occurrences(query)).items]


async def failures(store: Store, q: str) -> list[UUID | None]:
    query = narrow_failed(FailedQuery(limit=100), parse_query(q, "failed", now=NOW))
    return [r.job_id for r in (await store.list_failed(query)).items]


async def listed(store: Store, q: str) -> list[UUID]:
    query = narrow_jobs(JobQuery(limit=100), parse_query(q, "jobs", now=NOW))
    return [j.id for j in (await store.list_jobs(query)).items]


@pytest.fixture
async def jobs(store: Store) -> dict[str, Job]:
    made = {
        "sales": make_job(
            display_name="nightly sales",
            job_type="report",
            worker_id="reports",
            tags=("billing",),
            job_data={"customer": 42, "region": {"code": "eu"}, "vip": True},
        ),
        "other": make_job(
            display_name="weekly sales",
            job_type="report",
            worker_id="reports",
            tags=("ops",),
            job_data={"customer": "43", "region": {"code": "us"}, "vip": False},
        ),
        "mail": make_job(
            display_name="mailer",
            job_type="send-email",
            worker_id="email",
            job_data={"customer": "42"},
        ),
    }
    for job in made.values():
        await fired(store, job)
    return made


async def test_occurrences_by_type_job_tag_worker_and_data(
    store: Store, jobs: dict[str, Job]
) -> None:
    sales, other, mail = jobs["sales"].id, jobs["other"].id, jobs["mail"].id
    assert set(await runs(store, "type:report")) == {sales, other}
    assert set(await runs(store, "type:report,send-email")) == {sales, other, mail}
    assert await runs(store, 'job:"nightly sales"') == [sales]
    assert await runs(store, f"job:{mail}") == [mail]
    assert await runs(store, "tag:billing") == [sales]
    assert set(await runs(store, "tag:billing tag:ops")) == {sales, other}
    assert await runs(store, "worker:email") == [mail]
    # data fields compare as text: the number 42 and the string "42" both match
    assert set(await runs(store, "data.customer:42")) == {sales, mail}
    assert await runs(store, "data.customer:42 type:report") == [sales]
    assert await runs(store, "data.region.code:us") == [other]
    assert await runs(store, "data.vip:true") == [sales]
    assert await runs(store, "data.vip:false") == [other]
    assert await runs(store, "data.missing:1") == []
    assert await runs(store, "worker:nobody") == []


async def test_occurrences_by_status_attempt_and_time(store: Store, jobs: dict[str, Job]) -> None:
    every = {j.id for j in jobs.values()}
    assert set(await runs(store, "status:queued attempt:1")) == every
    assert await runs(store, "attempt:>1") == []
    assert set(await runs(store, "attempt:1..3")) == every
    assert await runs(store, "status:failed") == []
    # the query AND the list's other parameters: contradicting statuses give nothing
    assert await runs(store, "status:failed", statuses=(0,)) == []
    assert await runs(store, f"after:{(NOW + timedelta(days=1)).date().isoformat()}") == []
    scheduled = {o.scheduled_for for o in (await store.list_occurrences(OccurrenceQuery())).items}
    first = min(scheduled)
    assert set(await runs(store, f"after:{first.isoformat()}")) == every
    assert await runs(store, f"before:{first.isoformat()}") == []
    assert len(await runs(store, f"time:{first.date().isoformat()}")) == 3


async def test_failed_by_type_worker_attempts_and_data(store: Store, jobs: dict[str, Job]) -> None:
    sales, mail = jobs["sales"], jobs["mail"]
    await store.record_dead_letters(
        [
            poison(
                job_id=sales.id,
                job_type=sales.job_type,
                job_data=sales.job_data,
                attempts=3,
                failure_type=FailureType.TIMED_OUT,
            ),
            poison(job_id=mail.id, job_type=mail.job_type, job_data=mail.job_data, attempts=1),
        ]
    )
    assert await failures(store, "type:report") == [sales.id]
    assert await failures(store, "worker:email") == [mail.id]
    assert await failures(store, "attempt:>1") == [sales.id]
    assert set(await failures(store, "data.customer:42")) == {sales.id, mail.id}
    assert await failures(store, "failure:timed_out") == [sales.id]
    assert await failures(store, "tag:billing status:unresolved") == [sales.id]
    assert await failures(store, "status:resolved") == []
    assert await failures(store, 'job:"nightly sales" data.customer:43') == []


async def test_jobs_by_type_worker_state_text_and_data(store: Store, jobs: dict[str, Job]) -> None:
    sales, other, mail = jobs["sales"].id, jobs["other"].id, jobs["mail"].id
    assert set(await listed(store, "type:report")) == {sales, other}
    assert await listed(store, "worker:email") == [mail]
    assert await listed(store, "data.region.code:eu") == [sales]
    assert await listed(store, "tag:ops") == [other]
    assert await listed(store, 'job:"weekly sales"') == [other]
    assert await listed(store, "weekly") == [other]
    assert await listed(store, "status:paused") == []
    assert set(await listed(store, "status:active,inactive")) == {sales, other, mail}


async def test_data_filter_is_refused_while_job_data_is_sealed(store_url: str) -> None:
    """A data field cannot be compared in the database when job data is encrypted at rest:
    the refusal names the query."""
    sealed = SqlStore(store_url, seal=DataSeal.from_setting(f"v1:{new_key()}"))
    await sealed.open()
    try:
        query = narrow_jobs(JobQuery(), parse_query("data.a:1 type:x", "jobs", now=NOW))
        with pytest.raises(ValidationError) as caught:
            await sealed.list_jobs(query)
        assert caught.value.field == "q"
        # other qualifiers still work on a sealed store
        await sealed.list_jobs(narrow_jobs(JobQuery(), parse_query("type:x", "jobs", now=NOW)))
    finally:
        await sealed.close()
