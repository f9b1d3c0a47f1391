"""The bulk create's answer, written straight to JSON, is byte for byte what the JobList
model would write."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest

from rota.api.bulkout import ids_json, jobs_json
from rota.api.routes.jobs import prefers_minimal
from rota.api.schemas.jobs import BulkCreatedIds, JobList, JobOut, JobWarningOut
from rota.core.autodisable import AutoDisableDefaults
from rota.core.models import (
    ConcurrencyPolicy,
    Job,
    JobSource,
    MisfirePolicy,
    Priority,
    ZombiePolicy,
)

AT = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
PLAIN = Job(
    id=UUID(int=5),
    job_type="t",
    display_name="d",
    description="x",
    tags=("a", "b"),
    job_data={"n": 1, "s": ["é", None, 1.5]},
    time_zone="UTC",
    execute_at=AT,
    is_active=True,
    priority=Priority(3),
    concurrency_policy=ConcurrencyPolicy.SKIP,
    misfire_policy=MisfirePolicy.FIRE_ONCE,
    next_run_at=AT,
    bucket=3,
    version=1,
    created_at=AT,
    updated_at=AT,
    created_by="u",
    updated_by="u",
)
# Every optional field set, ints where JobOut holds floats, a change after the creation.
FULL = replace(
    PLAIN,
    timeout_seconds=90,
    max_retries=2,
    retry_delay_seconds=1,
    zombie_policy=ZombiePolicy.FAIL,
    zombie_threshold_seconds=30.0,
    auto_disable_threshold=3,
    updated_at=AT + timedelta(seconds=1),
    updated_by="v",
    total_executions=4,
    success_count=3,
    failure_count=1,
    average_duration_ms=12,
    disabled_reason="r",
    disabled_at=AT,
    source=JobSource.CODE,
    cron_expression="* * * * *",
    job_data=None,
    execute_at=None,
    next_run_at=AT.replace(microsecond=0),
)


@pytest.mark.parametrize("warned", [False, True])
@pytest.mark.parametrize(
    "defaults",
    [
        AutoDisableDefaults(),
        AutoDisableDefaults(threshold=2, window_seconds=60, cooldown_seconds=5),
    ],
)
def test_jobs_json_is_what_the_model_writes(warned: bool, defaults: AutoDisableDefaults) -> None:
    warnings: list[Any] = [SimpleNamespace(code="c", message="m")] if warned else []
    service: Any = SimpleNamespace(auto_disable_defaults=defaults, job_warnings=lambda j: warnings)
    models = [JobWarningOut(code=w.code, message=w.message) for w in warnings]
    expected = JobList(items=[JobOut.of(j, defaults, models) for j in (PLAIN, FULL)])
    assert jobs_json([PLAIN, FULL], service) == expected.model_dump_json(by_alias=True).encode()


def test_ids_json_is_what_the_model_writes() -> None:
    expected = BulkCreatedIds(count=2, ids=[PLAIN.id, FULL.id])
    assert ids_json([PLAIN, FULL]) == expected.model_dump_json(by_alias=True).encode()


@pytest.mark.parametrize(
    ("header", "minimal"),
    [
        (None, False),
        ("", False),
        ("return=minimal", True),
        ("Return = Minimal", True),
        ('return="minimal"', True),
        ("respond-async, wait=10, return=minimal;x=1", True),
        ("return=representation", False),
        ("return-minimal", False),
        ("handling=lenient", False),
    ],
)
def test_prefer_return_minimal_is_read_as_rfc_7240_writes_it(
    header: str | None, minimal: bool
) -> None:
    assert prefers_minimal(header) is minimal
