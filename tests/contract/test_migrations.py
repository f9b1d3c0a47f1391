"""Alembic migrations produce exactly the store's table metadata, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from rota.core.errors import BackendUnavailableError
from rota.core.models import FailureType
from rota.stores.migrate import alembic_config, current_revision, downgrade, upgrade
from rota.stores.partitions import is_partition_name
from rota.stores.schema import is_search_table, metadata_for, occurrence_counts
from rota.stores.sql import SqlStore, create_store_engine
from tests.contract.test_store import S, fired, make_job, status


def _declared(name: str | None, kind: str, parents: Any) -> bool:
    """Leave the time partitions out (created by the upkeep, not declared), and SQLite's
    search table (a virtual table, with its shadow tables: made by migration 0012)."""
    if kind != "table" or name is None:
        return True
    return not (is_partition_name(name) or is_search_table(name))


def _diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "include_name": _declared}
    )
    return list(compare_metadata(context, metadata_for(conn.dialect.name)))


async def schema_diff(url: str) -> list[Any]:
    engine = create_store_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_diff)
    finally:
        await engine.dispose()


async def test_upgrade_head_equals_metadata(empty_url: str) -> None:
    await upgrade(empty_url)
    assert await schema_diff(empty_url) == []
    head = ScriptDirectory.from_config(alembic_config(empty_url)).get_current_head()
    assert head is not None
    assert await current_revision(empty_url) == head


async def test_upgrade_is_idempotent_and_store_opens(empty_url: str) -> None:
    await upgrade(empty_url)
    await upgrade(empty_url)
    store = SqlStore(empty_url)
    await store.open()
    try:
        await store.ping()
        assert sum((await store.count_occurrences()).values()) == 0
    finally:
        await store.close()


async def test_downgrade_to_base_removes_every_table(empty_url: str) -> None:
    await upgrade(empty_url)
    await downgrade(empty_url, "base")
    assert await current_revision(empty_url) is None
    removed = {d[1].name for d in await schema_diff(empty_url) if d[0] == "add_table"}
    dialect = "postgresql" if empty_url.startswith("postgresql") else "sqlite"
    assert removed == set(metadata_for(dialect).tables)  # PostgreSQL has no job_tags


async def test_store_refuses_a_database_never_migrated(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/missing.db")
    with pytest.raises(BackendUnavailableError, match="rota migrate"):
        await store.open()


async def test_upgrade_of_unreachable_database_raises_backend_unavailable() -> None:
    with pytest.raises(BackendUnavailableError):
        await upgrade("postgresql://postgres@127.0.0.1:1/nowhere")


async def test_migration_0025_keeps_a_jobs_in_flight_counts_out_of_the_count_rows(
    empty_url: str,
) -> None:
    """Upgraded, ``occurrence_counts`` holds the settled statuses only (its rows of zeros
    gone too); downgraded, the in-flight ones are counted again from the occurrences."""
    await upgrade(empty_url)
    # recurring: their fires are counted in occurrence_counts (a one-time job's are not: 0033)
    queued_job, done_job = (make_job(cron_expression="* * * * *", execute_at=None) for _ in "ab")
    store = SqlStore(empty_url)
    await store.open()
    try:
        await fired(store, queued_job)
        done = await fired(store, done_job)
        await store.apply_status([status(done, S.RUNNING), status(done, S.COMPLETED)])
    finally:
        await store.close()

    async def count_rows() -> set[tuple[Any, int, int]]:
        engine = create_store_engine(empty_url, pool_size=1)
        try:
            async with engine.connect() as conn:
                c = occurrence_counts.c
                rows = await conn.execute(select(c.job_id, c.status, c.n))
                return {(j, int(s), int(n)) for j, s, n in rows}
        finally:
            await engine.dispose()

    settled = {(done_job.id, int(S.COMPLETED), 1)}
    assert await count_rows() == settled
    await downgrade(empty_url, "0024")
    assert await count_rows() == settled | {(queued_job.id, int(S.QUEUED), 1)}
    engine = create_store_engine(empty_url, pool_size=1)
    try:
        async with engine.begin() as conn:  # a row of zeros, as the code before 0025 left
            await conn.execute(
                occurrence_counts.insert().values(job_id=done_job.id, status=int(S.QUEUED), n=0)
            )
    finally:
        await engine.dispose()
    await upgrade(empty_url)
    assert await count_rows() == settled
    store = SqlStore(empty_url)
    await store.open()
    try:
        assert (await store.count_occurrences(job_id=queued_job.id))[S.QUEUED] == 1
        assert (await store.count_occurrences(job_id=done_job.id))[S.COMPLETED] == 1
    finally:
        await store.close()


async def test_migration_0029_carries_the_status_history_both_ways(empty_url: str) -> None:
    """Upgraded, an occurrence's history is in its row (the old table gone); downgraded, the
    same changes are rows of ``occurrence_status_changes`` again, in order; upgraded again,
    the occurrence reads as it did."""
    await upgrade(empty_url)
    job = make_job()
    store = SqlStore(empty_url)
    await store.open()
    try:
        occ = await fired(store, job)
        zombie = status(occ, S.UNKNOWN, attempt=1, failure_type=FailureType.ZOMBIE)
        records = [status(occ, S.RUNNING), zombie, status(occ, S.QUEUED, attempt=2)]
        await store.apply_status(records)
        before = (await store.get_occurrence(occ.id)).status_changes
    finally:
        await store.close()
    assert [(c.from_status, c.to_status, c.attempt) for c in before] == [
        (None, S.QUEUED, 1),
        (S.QUEUED, S.RUNNING, 1),
        (S.RUNNING, S.UNKNOWN, 1),
        (S.UNKNOWN, S.QUEUED, 2),
    ]
    assert before[2].reason == "zombie"

    await downgrade(empty_url, "0028")
    engine = create_store_engine(empty_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT from_status, to_status, attempt, reason "
                        "FROM occurrence_status_changes ORDER BY id"
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    assert [tuple(r) for r in rows] == [
        (
            None if c.from_status is None else int(c.from_status),
            int(c.to_status),
            c.attempt,
            c.reason,
        )
        for c in before
    ]

    await upgrade(empty_url)
    assert await schema_diff(empty_url) == []
    store = SqlStore(empty_url)
    await store.open()
    try:
        assert (await store.get_occurrence(occ.id)).status_changes == before
    finally:
        await store.close()


async def test_migration_0031_keeps_a_jobs_run_statistics_both_ways(empty_url: str) -> None:
    """Upgraded, a job's statistics are what its jobs row counted before plus its count
    rows' runs (a run's end writes no jobs row); downgraded, they are folded into the jobs
    row; upgraded again, they read the same."""
    await upgrade(empty_url)
    job = make_job(total_executions=10, success_count=7, failure_count=3, average_duration_ms=40.0)
    store = SqlStore(empty_url)
    await store.open()
    try:
        occ = await fired(store, job)
        done = status(occ, S.COMPLETED, duration_ms=120.0, instance_id="w")
        await store.apply_status([status(occ, S.RUNNING, instance_id="w"), done])
        before = await store.get_job(job.id)
    finally:
        await store.close()
    assert (before.total_executions, before.success_count, before.failure_count) == (11, 8, 3)
    assert before.average_duration_ms == (40.0 * 7 + 120.0) / 8

    await downgrade(empty_url, "0030")
    engine = create_store_engine(empty_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT total_executions, success_count, failure_count, "
                        "average_duration_ms, duration_samples FROM jobs"
                    )
                )
            ).one()
    finally:
        await engine.dispose()
    assert tuple(row) == (11, 8, 3, before.average_duration_ms, 8)

    await upgrade(empty_url)
    store = SqlStore(empty_url)
    await store.open()
    try:
        assert await store.get_job(job.id) == before
    finally:
        await store.close()


async def test_migration_0032_keeps_the_declared_types_and_adds_no_schema(
    empty_url: str,
) -> None:
    """Upgraded, a type declared before keeps its row, with no schema recorded (the next
    registration of a worker records one); downgraded, the rows stay."""
    await upgrade(empty_url, "0031")
    engine = create_store_engine(empty_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO declared_job_types (job_type, worker_id, first_declared_at) "
                    "VALUES ('report', 'reports', '2026-11-29 10:00:00+00:00')"
                )
            )
    finally:
        await engine.dispose()
    await upgrade(empty_url)
    store = SqlStore(empty_url)
    await store.open()
    try:
        assert await store.declared_job_types() == {("report", "reports")}
        assert await store.published_schemas() == []
    finally:
        await store.close()
    await downgrade(empty_url, "0031")
    await upgrade(empty_url)
    assert await schema_diff(empty_url) == []


async def test_migration_0033_folds_the_uncounted_fires_on_the_way_down(empty_url: str) -> None:
    """A one-time job's fire writes no count row (its counts read from it); downgraded, it
    is folded into ``occurrence_counts`` (its status, its run, its duration); upgraded
    again, the job reads the same from its count rows."""
    await upgrade(empty_url)
    done_job, failed_job = make_job(), make_job()
    store = SqlStore(empty_url)
    await store.open()
    try:
        done = await fired(store, done_job)
        failed = await fired(store, failed_job)
        end = status(done, S.COMPLETED, duration_ms=50.0, instance_id="w")
        await store.apply_status([status(done, S.RUNNING, instance_id="w"), end])
        await store.apply_status([status(failed, S.RUNNING), status(failed, S.FAILED)])
        before = [await store.get_job(j.id) for j in (done_job, failed_job)]
        counts = [await store.count_occurrences(job_id=j.id) for j in (done_job, failed_job)]
    finally:
        await store.close()
    assert [(j.total_executions, j.success_count, j.failure_count) for j in before] == [
        (1, 1, 0),
        (1, 0, 1),
    ]

    async def count_rows() -> set[tuple[Any, ...]]:
        engine = create_store_engine(empty_url, pool_size=1)
        try:
            async with engine.connect() as conn:
                c = occurrence_counts.c
                rows = await conn.execute(
                    select(c.job_id, c.status, c.n, c.runs, c.duration_sum, c.duration_count)
                )
                return {tuple(r) for r in rows}
        finally:
            await engine.dispose()

    assert await count_rows() == set()
    await downgrade(empty_url, "0032")
    assert await count_rows() == {
        (done_job.id, int(S.COMPLETED), 1, 1, 50.0, 1),
        (failed_job.id, int(S.FAILED), 1, 1, 0.0, 0),
    }
    await upgrade(empty_url)
    assert await schema_diff(empty_url) == []
    store = SqlStore(empty_url)
    await store.open()
    try:
        assert [await store.get_job(j.id) for j in (done_job, failed_job)] == before
        assert [
            await store.count_occurrences(job_id=j.id) for j in (done_job, failed_job)
        ] == counts
    finally:
        await store.close()


_RUN_INDEXES = {
    "ix_occurrences_job_id_status_id": "(status <> 2)",
    "ix_occurrences_status_id": "(status <> 2)",
    "ix_occurrences_end_time_status": "(end_time IS NOT NULL)",
    "ix_jobs_tags": "(tags <> '[]'::jsonb)",
}


async def _index_conditions(url: str) -> dict[str, str | None]:
    """PostgreSQL: the condition of each index of :data:`_RUN_INDEXES` (``None``: whole)."""
    engine = create_store_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(:names)"),
                {"names": list(_RUN_INDEXES)},
            )
            found = {r.indexname: r.indexdef for r in rows}
    finally:
        await engine.dispose()
    assert set(found) == set(_RUN_INDEXES), found
    return {n: d.partition(" WHERE ")[2] or None for n, d in found.items()}


async def test_migration_0034_leaves_completed_runs_and_untagged_jobs_out_of_indexes(
    empty_url: str,
) -> None:
    """PostgreSQL: the status indexes hold no Completed run, the end time's no run not
    ended, the tags' no job without tags (a run's end and a fire write fewer entries);
    downgraded, each index holds every row again. The store's tables, made from the
    metadata, have the same conditions."""
    if not empty_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's indexes (SQLite keeps its own)")
    await upgrade(empty_url)
    assert await _index_conditions(empty_url) == _RUN_INDEXES
    await downgrade(empty_url, "0033")
    assert await _index_conditions(empty_url) == dict.fromkeys(_RUN_INDEXES)
    await upgrade(empty_url)
    assert await _index_conditions(empty_url) == _RUN_INDEXES
    assert await schema_diff(empty_url) == []
    conditions = {
        index.name: str(index.dialect_options["postgresql"]["where"])
        for table in metadata_for("postgresql").tables.values()
        for index in table.indexes
        if index.name in _RUN_INDEXES
    }
    assert {n: f"({c})" for n, c in conditions.items()} == _RUN_INDEXES
