"""The dashboard's pages over each store (SQLite and PostgreSQL): the embedded and the
distributed mode read the same pages from different stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from rota.api.app import create_app
from rota.app.settings import Settings
from rota.core.models import LogRecord, OccurrenceStatus, StatusRecord
from rota.core.planning import PlanSettings, new_occurrence
from rota.stores.sql import SqlStore
from tests.api_client import api_client
from tests.api_runtime import mini_runtime
from tests.stores import store as store  # each store kind, over the conftest's SQLite one


@pytest.fixture
async def client(
    store: SqlStore, store_url: str, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(environment="test", data_dir=tmp_path, database_url=store_url)
    async with api_client(create_app(mini_runtime(store, settings))) as http:
        yield http


async def test_pages_over_each_store(client: httpx.AsyncClient, store: SqlStore) -> None:
    created = await client.post(
        "/api/v1/jobs",
        json={"jobType": "report", "cronExpression": "0 0 1 1 *", "displayName": "Yearly"},
    )
    assert created.status_code == 201, created.text
    job = await store.get_job(UUID(created.json()["id"]))
    t0 = datetime.now(UTC) - timedelta(minutes=3)
    done, failed = (
        new_occurrence(job, t0 + timedelta(seconds=i), t0, PlanSettings()) for i in (0, 1)
    )
    await store.insert_occurrences([done, failed])
    await store.apply_status(
        [
            StatusRecord(
                occurrence_id=done.id,
                status=OccurrenceStatus.COMPLETED,
                timestamp=t0,
                duration_ms=5,
            ),
            StatusRecord(occurrence_id=failed.id, status=OccurrenceStatus.FAILED, timestamp=t0),
        ]
    )
    await store.append_logs(
        [LogRecord(occurrence_id=done.id, timestamp=t0, level="INFO", message="hello pages")]
    )

    overview = await client.get("/")
    assert overview.status_code == 200
    assert '<dd data-testid="total">2</dd>' in overview.text
    assert "50.0 %" in overview.text  # one of the two finished runs completed
    jobs = await client.get("/jobs", params={"search": "year"})
    assert "Yearly" in jobs.text
    listed = await client.get("/executions", params={"status": "Failed"})
    assert f"/executions/{failed.id}" in listed.text
    assert f"/executions/{done.id}" not in listed.text
    detail = await client.get(f"/executions/{done.id}")
    assert "hello pages" in detail.text
    job_page = await client.get(f"/jobs/{job.id}")
    assert job_page.status_code == 200
    series = (await client.get("/ui/series.json")).json()
    assert sum(series["completed"]) == 1
    assert sum(series["failed"]) == 1
