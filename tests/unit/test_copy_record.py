"""A bulk create's COPY record (PostgreSQL) holds what the compact row by name holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import JSON

from rota.core.ids import new_id
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    JobSource,
    MisfirePolicy,
    Priority,
    ZombiePolicy,
)
from rota.stores.schema import jobs
from rota.stores.sql.engine import _json_dumps
from rota.stores.sql.rows import _copy_record, _job_row

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _by_name(job: Job) -> list[Any]:
    """The compact row by name, in the table's column order, its JSON columns as text."""
    row = _job_row(job, compact=True)
    return [
        _json_dumps(row[c.name])
        if isinstance(c.type, JSON) and row[c.name] is not None
        else row[c.name]
        for c in jobs.columns
    ]


NEW = Job(id=new_id(), job_type="mail", created_at=T0, updated_at=T0, execute_at=T0, bucket=3)
USED = Job(
    id=new_id(),
    job_type="report",
    worker_id="reports",
    display_name="Nightly",
    description="d",
    tags=("a", "b"),
    job_data={"n": [1, 2, {"x": None}]},
    cron_expression="0 3 * * *",
    time_zone="Europe/Paris",
    is_active=False,
    priority=Priority.HIGH,
    concurrency_policy=ConcurrencyPolicy.QUEUE,
    misfire_policy=MisfirePolicy.SKIP,
    timeout_seconds=30.5,
    max_retries=2,
    next_run_at=T0,
    version=4,
    created_at=T0,
    updated_at=T0 + timedelta(hours=1),
    created_by="ann",
    updated_by="bob",
    total_executions=7,
    success_count=5,
    failure_count=2,
    average_duration_ms=12.5,
    source=JobSource.CODE,
    declared_spec={"cronExpression": "0 3 * * *"},
    consecutive_failures=1,
    zombie_policy=ZombiePolicy.FAIL,
    run_count=3,
    skip_next=1,
)


@pytest.mark.parametrize(
    "job",
    [
        NEW,
        USED,
        Job(
            id=new_id(),
            job_type="x",
            created_at=T0,
            updated_at=T0,
            created_by="ann",
            updated_by="bob",
        ),
        Job(id=new_id(), job_type="x", created_at=T0, updated_at=T0 + timedelta(seconds=1)),
        Job(id=new_id(), job_type="x", created_at=T0, updated_at=T0, success_count=3),
    ],
    ids=["new", "used", "changed-by-another", "changed-later", "no-average"],
)
def test_the_copy_record_is_the_compact_row_in_column_order(job: Job) -> None:
    assert _copy_record(job) == _by_name(job)


def test_a_new_jobs_shared_values_are_null_and_its_own_are_kept() -> None:
    record = dict(zip([c.name for c in jobs.columns], _copy_record(NEW), strict=True))
    for column in ("time_zone", "misfire_policy", "source", "total_executions", "updated_at"):
        assert record[column] is None, column
    assert (record["duration_samples"], record["updated_by"]) == (None, None)
    assert (record["id"], record["execute_at"], record["bucket"]) == (NEW.id, T0, 3)
    used = dict(zip([c.name for c in jobs.columns], _copy_record(USED), strict=True))
    assert (used["time_zone"], used["misfire_policy"], used["source"]) == (
        "Europe/Paris",
        "skip",
        "code",
    )
    assert (used["duration_samples"], used["tags"], used["updated_by"]) == (5, '["a","b"]', "bob")
