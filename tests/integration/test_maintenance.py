"""Retention: the service on a real SQLite store, ``rota maintenance``, and the periodic run
inside the embedded runtime (the owner of bucket 0)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rota.app.configs import retention_policy
from rota.app.settings import RetentionSettings
from rota.cli import app
from rota.core.errors import NotFoundError
from rota.core.ids import new_id
from rota.core.models import Job, LogRecord, Occurrence, OccurrenceStatus, StatusRecord, utcnow
from rota.core.planning import PlanSettings, plan_fires
from rota.core.ports import Store
from rota.services.maintenance import Maintenance
from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore
from tests.helpers import RuntimeFactory, eventually

S = OccurrenceStatus
DAY = timedelta(days=1)


async def ended(store: Store, at: datetime, end: S = S.COMPLETED) -> Occurrence:
    """An occurrence created at ``at`` that ran and ended ``end``, with a log line."""
    job = Job(id=new_id(), job_type="old", execute_at=at, next_run_at=at)
    await store.create_jobs([job])
    result = await store.dispatch_due(
        [job.id], at, lambda j, active, now: plan_fires(j, active, now, PlanSettings())
    )
    [occ] = result.queued
    await store.apply_status(
        [
            StatusRecord(occurrence_id=occ.id, status=S.RUNNING, timestamp=at),
            StatusRecord(occurrence_id=occ.id, status=end, timestamp=at),
        ]
    )
    await store.append_logs(
        [LogRecord(occurrence_id=occ.id, timestamp=at, level="INFO", message="old line")]
    )
    return occ


async def gone(store: Store, occ: Occurrence) -> bool:
    try:
        await store.get_occurrence(occ.id)
    except NotFoundError:
        return True
    return False


@pytest.fixture
async def store(tmp_path: Path) -> SqlStore:
    url = f"sqlite:///{tmp_path / 'rota.db'}"
    await upgrade(url)
    s = SqlStore(url)
    await s.open()
    return s


async def test_retention_deletes_per_status_in_batches(store: SqlStore) -> None:
    now = utcnow()
    old_done = [await ended(store, now - 40 * DAY) for _ in range(5)]
    old_failed = await ended(store, now - 40 * DAY, S.CANCELLED)
    recent = await ended(store, now - 2 * DAY)
    deleted: list[tuple[str, int]] = []
    policy = retention_policy(
        RetentionSettings(completed_days=30, cancelled_days=60, logs_days=0, batch_size=2)
    )
    try:
        report = await Maintenance(
            store, policy, on_deleted=lambda k, n: deleted.append((k, n))
        ).run_once()
        assert report.occurrences == {"completed": 5}
        assert report.logs == 0  # logs_days=0: kept forever (the occurrences took theirs)
        assert [n for kind, n in deleted if kind == "occurrences"] == [2, 2, 1]
        assert all([await gone(store, o) for o in old_done])
        assert not await gone(store, old_failed)
        assert not await gone(store, recent)
        assert len(await store.occurrence_logs(recent.id)) == 1
    finally:
        await store.close()


def test_rota_maintenance_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'rota.db'}"

    async def seed() -> None:
        await upgrade(url)
        store = SqlStore(url)
        await store.open()
        try:
            await ended(store, utcnow() - 100 * DAY)
            await ended(store, utcnow() - 100 * DAY, S.FAILED)  # unresolved: kept
            await ended(store, utcnow())
        finally:
            await store.close()

    asyncio.run(seed())
    monkeypatch.setenv("ROTA_DATABASE_URL", url)
    monkeypatch.setenv("ROTA_RETENTION__LOGS_DAYS", "50")
    result = CliRunner().invoke(app, ["maintenance"])
    assert result.exit_code == 0, result.output
    assert "completed occurrences deleted: 1" in result.output
    assert "log lines deleted: 1" in result.output  # the kept failed occurrence's old line
    assert "retention done" in result.output


async def test_the_server_runs_retention_periodically(runtime_factory: RuntimeFactory) -> None:
    rt = await runtime_factory(
        {"retention.interval_seconds": 0.2}, ["tests.integration.ops_jobs"], grace=1
    )
    old = await ended(rt.store, utcnow() - 45 * DAY)

    async def ran() -> bool:  # the run that deleted it has ended (it deletes, then reports)
        return rt.maintenance.last_run is not None and await gone(rt.store, old)

    await eventually(ran, 15, "a retention run")
    text = rt.metrics.exposition().decode()
    assert 'rota_maintenance_deleted_rows_total{kind="occurrences"} 1.0' in text
