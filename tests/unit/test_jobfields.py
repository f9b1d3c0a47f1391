"""The table of job fields (rota.core.jobfields) against the Job record, the jobs table, the
job spec and the API's change body: a field added to one of them and not to the table fails
here, before it is half stored or silently refused."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import JSON
from sqlalchemy.dialects import sqlite

from rota.api.schemas import JobOut, JobPatch
from rota.core.jobfields import (
    BY_NAME,
    JOB_FIELDS,
    NULLABLE_FIELDS,
    SCHEDULE_FIELDS,
    UPDATABLE_FIELDS,
    VERSIONED_FIELDS,
    Part,
    Shape,
    api_name,
)
from rota.core.jobspec import JobSpec
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    JobSource,
    MisfirePolicy,
    Priority,
    ZombiePolicy,
)
from rota.stores.schema import jobs
from rota.stores.sql import rows as sql_rows
from rota.stores.sql.batches import _FastBatches
from rota.stores.sql.engine import _json_dumps
from rota.stores.sql.statements import _insert_stmt

HINTS = typing.get_type_hints(Job)


def _members(hint: Any) -> tuple[Any, ...]:
    """The types a hint allows (``X | None`` -> ``(X, NoneType)``)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def test_the_table_lists_every_field_of_a_job_in_its_order() -> None:
    assert [f.name for f in JOB_FIELDS] == list(Job.__struct_fields__)
    assert set(BY_NAME) == {f.name for f in JOB_FIELDS}


def test_every_column_of_the_jobs_table_is_a_field_or_named_store_only() -> None:
    columns = {f.column for f in JOB_FIELDS}
    store_only = set(sql_rows._STORE_ONLY_COLUMNS)
    assert not columns & store_only
    assert columns | store_only == set(jobs.c.keys())


def test_nullable_agrees_with_the_record_and_the_column() -> None:
    for field in JOB_FIELDS:
        assert jobs.c[field.column].nullable == field.nullable, field.name
        if HINTS[field.name] is not Any:  # job data: any JSON, null included
            assert (type(None) in _members(HINTS[field.name])) == field.nullable, field.name


def test_the_shape_agrees_with_the_records_type() -> None:
    for field in JOB_FIELDS:
        kinds = [t for t in _members(HINTS[field.name]) if t is not type(None)]
        enums = [t for t in kinds if isinstance(t, type) and issubclass(t, enum.Enum)]
        origins = {typing.get_origin(t) for t in kinds}
        if enums:
            assert field.shape is Shape.ENUM, field.name
            assert enums == [field.enum], field.name
        elif tuple in origins:
            assert field.shape is Shape.TUPLE, field.name
        elif Mapping in origins:
            assert field.shape is Shape.MAPPING, field.name
        else:
            assert field.shape is Shape.PLAIN, field.name


def test_derived_sets_hang_together() -> None:
    assert NULLABLE_FIELDS <= UPDATABLE_FIELDS
    assert set(SCHEDULE_FIELDS) <= set(VERSIONED_FIELDS) <= UPDATABLE_FIELDS
    assert all(BY_NAME[name].part is Part.DEFINITION for name in UPDATABLE_FIELDS)
    # The store keys the jobs it claims for planning by the first column: the id.
    assert next(f.name for f in JOB_FIELDS if f.planned) == "id"


def test_a_job_spec_sets_every_updatable_field() -> None:
    spec_fields = {f.name for f in dataclasses.fields(JobSpec)}
    assert UPDATABLE_FIELDS <= spec_fields <= set(BY_NAME)


def test_the_api_change_body_changes_only_updatable_fields() -> None:
    sent = {name: None for name in JobPatch.model_fields}
    changed = JobPatch.model_validate(sent).changes()
    assert set(changed) <= UPDATABLE_FIELDS
    assert api_name("concurrency_policy") == "concurrentExecutionPolicy"
    assert BY_NAME["zombie_threshold_seconds"].api == "zombieThresholdSeconds"


def test_the_api_names_fields_as_the_table_does() -> None:
    shown = {JobOut.model_fields[name].alias for name in JobOut.model_fields}
    assert BY_NAME["concurrency_policy"].api in shown
    assert BY_NAME["average_duration_ms"].api in shown
    assert {f.api for f in JOB_FIELDS if f.updatable and f.name != "declared_spec"} <= shown


def _everything_set() -> Job:
    at = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    return Job(
        id=uuid4(),
        job_type="report",
        worker_id="reports",
        display_name="Report",
        description="the daily report",
        tags=("a", "b"),
        job_data={"kind": ["sales"]},
        cron_expression=None,
        time_zone="Europe/Paris",
        execute_at=at,
        is_active=False,
        priority=Priority.HIGH,
        concurrency_policy=ConcurrencyPolicy.QUEUE,
        misfire_policy=MisfirePolicy.CATCH_UP,
        timeout_seconds=30.0,
        max_retries=4,
        retry_delay_seconds=2.5,
        next_run_at=at,
        bucket=7,
        version=3,
        created_at=at,
        updated_at=at,
        created_by="ann",
        updated_by="bob",
        total_executions=9,
        success_count=6,
        failure_count=3,
        average_duration_ms=12.5,
        source=JobSource.CODE,
        declared_spec={"cronExpression": "@daily"},
        auto_disable_threshold=5,
        auto_disable_window_seconds=60.0,
        auto_disable_cooldown_seconds=600.0,
        consecutive_failures=2,
        last_failure_at=at,
        disabled_reason="5 failures",
        disabled_at=at,
        probing=True,
        zombie_policy=ZombiePolicy.FAIL,
        zombie_threshold_seconds=45.0,
        interval_seconds=5400,
        start_at=at,
        end_at=at,
        max_runs=3,
        run_count=2,
        jitter_seconds=1.5,
        misfire_window_seconds=90.0,
        paused_at=at,
        paused_by="cy",
        pause_note="freeze",
        paused_until=at,
        skip_next=2,
        skip_note="deploy",
    )


class _Row:
    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def test_a_job_round_trips_through_the_stores_row() -> None:
    job = _everything_set()
    row = sql_rows._job_row(job)
    assert set(row) == set(jobs.c.keys())
    assert row["priority"] == 3
    assert row["misfire_policy"] == "catch_up"
    assert row["tags"] == ["a", "b"]
    back = sql_rows._to_job(_Row(row))
    assert back == job
    assert isinstance(back.priority, Priority)
    assert isinstance(back.zombie_policy, ZombiePolicy)
    assert sql_rows._job_definition(job).keys() == {
        f.column for f in JOB_FIELDS if f.part is Part.DEFINITION
    }


def test_a_planning_job_has_the_planned_fields_only() -> None:
    job = _everything_set()
    row = sql_rows._job_row(job)
    planned = sql_rows._to_planning_job(tuple(row[c.name] for c in sql_rows._PLANNING_COLUMNS))
    for field in JOB_FIELDS:
        if field.planned:
            assert getattr(planned, field.name) == getattr(job, field.name), field.name
    assert planned.display_name == ""
    assert planned.total_executions == 0


def test_a_version_snapshot_holds_the_versioned_fields_by_api_name() -> None:
    job = _everything_set()
    assert sql_rows._snapshot(job) == {
        "jobType": "report",
        "workerId": "reports",
        "jobData": {"kind": ["sales"]},
        "cronExpression": None,
        "timeZone": "Europe/Paris",
        "executeAt": "2030-01-02T03:04:05.000006+00:00",
        "priority": 3,
        "concurrentExecutionPolicy": 1,
        "misfirePolicy": "catch_up",
        "timeoutSeconds": 30.0,
        "maxRetries": 4,
        "retryDelaySeconds": 2.5,
        "autoDisableThreshold": 5,
        "autoDisableWindowSeconds": 60.0,
        "autoDisableCooldownSeconds": 600.0,
        "zombiePolicy": "fail",
        "zombieThresholdSeconds": 45.0,
        "every": 5400,
        "startAt": "2030-01-02T03:04:05.000006+00:00",
        "endAt": "2030-01-02T03:04:05.000006+00:00",
        "maxRuns": 3,
        "jitterSeconds": 1.5,
        "misfireWindowSeconds": 90.0,
    }
    assert json.loads(json.dumps(sql_rows._snapshot(job))) == sql_rows._snapshot(job)


def test_every_setting_is_versioned_and_no_label_or_state_is() -> None:
    settings = {f.name for f in JOB_FIELDS if f.part is Part.DEFINITION and f.updatable}
    labels = {"display_name", "description", "tags", "is_active", "declared_spec"}
    assert set(VERSIONED_FIELDS) == settings - labels


def _compact_by_name(job: Job) -> list[Any]:
    """The compact row by name, in the table's column order, its JSON columns as text."""
    row = sql_rows._job_row(job, compact=True)
    return [
        _json_dumps(row[c.name])
        if isinstance(c.type, JSON) and row[c.name] is not None
        else row[c.name]
        for c in jobs.columns
    ]


_T0 = datetime(2030, 1, 1, tzinfo=UTC)
_NEW = Job(id=uuid4(), job_type="mail", created_at=_T0, updated_at=_T0, execute_at=_T0, bucket=3)


@pytest.mark.parametrize(
    "job",
    [
        _NEW,
        _everything_set(),
        Job(id=uuid4(), job_type="x", created_at=_T0, updated_at=_T0, updated_by="bob"),
        Job(id=uuid4(), job_type="x", created_at=_T0, updated_at=_T0 + timedelta(seconds=1)),
        Job(id=uuid4(), job_type="x", created_at=_T0, updated_at=_T0, success_count=3),
    ],
    ids=["new", "everything-set", "changed-by-another", "changed-later", "no-average"],
)
def test_a_bulk_creates_copy_record_is_the_compact_row_in_column_order(job: Job) -> None:
    assert list(sql_rows._copy_record(job)) == _compact_by_name(job)


@pytest.mark.parametrize("job", [_NEW, _everything_set()], ids=["new", "everything-set"])
def test_a_bulk_creates_sqlite_parameters_are_the_rows_as_the_insert_takes_them(job: Job) -> None:
    fast = _FastBatches("sqlite")
    prepared = fast._prepare(_insert_stmt(jobs), sqlite.dialect())
    assert prepared.names == tuple(c.name for c in jobs.columns)  # the record's order
    assert sql_rows._sqlite_record(job) == fast._params(prepared, [sql_rows._job_row(job)])[0]


def test_a_new_jobs_copy_record_holds_null_for_the_shared_values_only() -> None:
    names = [c.name for c in jobs.columns]
    record = dict(zip(names, sql_rows._copy_record(_NEW), strict=True))
    for column in ("time_zone", "misfire_policy", "source", "total_executions", "updated_at"):
        assert record[column] is None, column
    assert (record["duration_samples"], record["updated_by"]) == (None, None)
    assert (record["id"], record["execute_at"], record["bucket"]) == (_NEW.id, _T0, 3)
    used = dict(zip(names, sql_rows._copy_record(_everything_set()), strict=True))
    assert (used["time_zone"], used["misfire_policy"], used["source"]) == (
        "Europe/Paris",
        "catch_up",
        "code",
    )
    assert (used["duration_samples"], used["tags"], used["updated_by"]) == (6, '["a","b"]', "bob")
