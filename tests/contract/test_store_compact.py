"""A compact job row (PostgreSQL, migration 0024): the values every new job shares are kept as
``NULL`` (``JobField.stored_default``; ``updated_at``/``updated_by`` while they are the
creation's) and read back as those values, whichever way the job is written (one insert, a
bulk ``COPY``) or read (get, list, the fire watch); writes that add to a ``NULL`` count
from 0. SQLite keeps the values themselves. On PostgreSQL, a page of the jobs of one type or
one state is a range of an index in the list's order (the pages themselves:
``test_store_search.test_filtered_lists_page_newest_first_without_gaps``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from msgspec.structs import replace
from sqlalchemy import select

from rota.core.ids import new_id
from rota.core.jobfields import JOB_FIELDS
from rota.core.models import Job, MisfirePolicy
from rota.core.ports import Store
from rota.core.records import JobQuery
from rota.stores.schema import jobs
from rota.stores.sql import SqlStore
from rota.stores.sql.rows import _STORED_DEFAULTS
from tests.contract.test_store import NOW, T0, S, fired, make_job, status
from tests.contract.test_store_auto_disable import REASON, disabled_job
from tests.contract.test_store_search import page_reads

COMPACT = [column for column, _ in _STORED_DEFAULTS] + ["updated_at", "updated_by"]


async def raw(store: SqlStore, job: Job) -> dict[str, Any]:
    async with store._read() as conn:
        row = (await conn.execute(select(jobs).where(jobs.c.id == job.id))).one()
    return dict(row._mapping)


def plain(**fields: object) -> Job:
    """A job with the shared values (its update is its creation, by its creator)."""
    job = make_job(created_by="ana", **fields)
    return replace(job, updated_at=job.created_at, updated_by="ana")


async def test_shared_values_are_null_on_postgresql_and_read_back(
    store: Store, store_kind: str
) -> None:
    assert isinstance(store, SqlStore)
    one = plain()
    bulk = [plain(), plain()]  # PostgreSQL: COPY
    other = replace(
        plain(time_zone="Europe/Berlin", misfire_policy=MisfirePolicy.SKIP),
        updated_at=T0,
        updated_by="bo",
    )
    await store.create_jobs([one])
    await store.create_jobs(bulk)
    await store.create_jobs([other])
    for job in (one, *bulk):
        row = await raw(store, job)
        stored = [column for column in COMPACT if row[column] is None]
        assert stored == (COMPACT if store_kind == "postgres" else []), row
        assert await store.get_job(job.id) == job
    row = await raw(store, other)
    assert (row["time_zone"], row["misfire_policy"], row["updated_by"]) == (
        "Europe/Berlin",
        "skip",
        "bo",
    )
    assert await store.get_job(other.id) == other
    listed = (await store.list_jobs(JobQuery(limit=10))).items
    assert sorted(listed, key=lambda j: j.id) == sorted([one, *bulk, other], key=lambda j: j.id)


def test_every_stored_default_is_the_field_default() -> None:
    """A NULL reads as the value a new job has: the record's own default."""
    fresh = Job(id=new_id(), job_type="t")
    for field in JOB_FIELDS:
        if field.stored_default is not None:
            assert getattr(fresh, field.name) == field.stored_default, field.name


async def test_counts_kept_from_null(store: Store) -> None:
    job = plain()
    occurrence = await fired(store, job)
    done = NOW + timedelta(seconds=2)
    await store.apply_status([status(occurrence, S.COMPLETED, done, duration_ms=40.0)])
    stored = await store.get_job(job.id)
    assert (stored.total_executions, stored.success_count, stored.failure_count) == (1, 1, 0)
    assert stored.average_duration_ms == 40.0
    assert (stored.updated_at, stored.updated_by) == (job.created_at, "ana")


async def test_a_released_probe_keeps_its_creator_as_its_editor(store: Store) -> None:
    job = disabled_job(T0 - timedelta(hours=1), created_by="ana")
    job = replace(job, updated_at=job.created_at, updated_by="ana")
    await store.create_jobs([job])
    released = await store.release_probe(
        job.id, seen_disabled_at=T0 - timedelta(hours=1), seen_version=1, next_run_at=T0, at=NOW
    )
    assert released is not None
    assert (released.updated_at, released.updated_by) == (NOW, "ana")
    assert released.disabled_reason == REASON
    assert released.consecutive_failures == 3


async def test_postgresql_reads_each_filtered_page_from_its_index(
    store: Store, store_kind: str
) -> None:
    """A page of one type or one state is a range of an index in the list's order, whatever
    the value and wherever its jobs are in time: a common type whose jobs are all older than
    the others' is not found by walking the primary key past them."""
    if store_kind != "postgres":
        pytest.skip("PostgreSQL's statistics and plans")
    assert isinstance(store, SqlStore)
    await store.create_jobs([make_job(job_type="old") for _ in range(3000)])
    await store.create_jobs([make_job(job_type="new", is_active=False) for _ in range(300)])
    async with store._write() as conn:
        await conn.exec_driver_sql("ANALYZE jobs")
    queries = [JobQuery(job_type="old"), JobQuery(is_active=False), JobQuery(is_active=True)]
    with page_reads(store) as statements:
        for query in queries:
            await store.list_jobs(query)
    assert "false" in statements[1][0]  # the state is in the statement, for its index
    plans = []
    async with store._read() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        await driver.execute("SET enable_seqscan = off")  # a small table, planned as a big one
        try:
            for statement, params in statements:
                rows = await driver.fetch(f"EXPLAIN {statement}", *params)
                plans.append("\n".join(r[0] for r in rows))
        finally:
            await driver.execute("RESET enable_seqscan")
    expected = ["ix_jobs_job_type_id", "ix_jobs_inactive", "ix_jobs_active"]
    for plan, index in zip(plans, expected, strict=True):
        assert f"Index Scan Backward using {index}" in plan, plan
        assert "Sort" not in plan, plan
