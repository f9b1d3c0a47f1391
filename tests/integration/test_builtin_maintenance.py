"""``rota.maintenance``: the retention sweep as a job, end to end through the embedded runtime
(the store opened by the composition root from the settings' database URL)."""

from __future__ import annotations

from datetime import timedelta

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
    refused = await run_job(rt, "rota.maintenance", {"completedDays": 0})
    assert refused.status is S.FAILED  # no policy from job data: the Admin's settings only
