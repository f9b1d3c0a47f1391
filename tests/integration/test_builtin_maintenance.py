"""``rota.maintenance``: the retention sweep as a job, end to end through the embedded runtime
(the store opened by the composition root from the settings' database URL)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.core.errors import ValidationError
from rota.core.models import OccurrenceStatus, utcnow
from tests.helpers import RuntimeFactory
from tests.integration.builtin_servers import run_job, wait_for_log
from tests.integration.test_maintenance import ended, gone

S = OccurrenceStatus


async def test_the_retention_sweep_as_a_job(runtime_factory: RuntimeFactory) -> None:
    rt = await runtime_factory(
        {"retention.completed_days": 30, "retention.logs_days": 0}, ["rota.builtin.maintenance"]
    )
    old = [await ended(rt.store, utcnow() - timedelta(days=45)) for _ in range(3)]
    recent = await ended(rt.store, utcnow() - timedelta(days=2))
    occ = await run_job(rt, "rota.maintenance", None)
    assert occ.status is S.COMPLETED, occ.exception
    assert occ.result["occurrencesDeleted"] == {"completed": 3}
    assert occ.result["logsDeleted"] == 0
    assert all([await gone(rt.store, o) for o in old])
    assert not await gone(rt.store, recent)
    await wait_for_log(rt, occ, "retention deleted 3 occurrences")
    again = await run_job(rt, "rota.maintenance", {})
    assert again.result["occurrencesDeleted"] == {}
    # No policy from job data (the Admin's settings only): the server refuses it against the
    # job type's data schema (the worker would too, see tests/unit/test_builtin.py).
    with pytest.raises(ValidationError) as refused:
        await rt.jobs.create_job(
            {
                "job_type": "rota.maintenance",
                "execute_at": rt.jobs.now(),
                "job_data": {"completedDays": 0},
            }
        )
    assert refused.value.field == "jobData.completedDays"
