"""A dependency set through one server is heard by the others at once (issue 32: a dependent
released by its upstream is dispatched at once, whichever server records the upstream's end):
two servers' dependency engines on one store and one coordination."""

from __future__ import annotations

from datetime import timedelta

from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import Job, OccurrenceStatus, StatusRecord, utcnow
from rota.core.planning import PlanSettings, new_occurrence
from rota.core.records import OccurrenceQuery
from rota.services.dependencies import DEPENDENCIES_TOPIC, DependencyConfig, DependencyService
from rota.stores.sql import SqlStore

S = OccurrenceStatus
QUIET = DependencyConfig(sweep_interval_seconds=3600.0)
"""No sweep during the test: only the engines' reactions can release the dependent."""


def engine(store: SqlStore, coordination: MemoryCoordination) -> DependencyService:
    return DependencyService(store, store, coordination, QUIET, now=utcnow)


async def test_a_dependency_set_on_one_server_is_heard_by_another_before_its_upstream_ends(
    store: SqlStore,
) -> None:
    coordination = MemoryCoordination()
    first, second = engine(store, coordination), engine(store, coordination)
    for server in (first, second):
        await server.sweep()  # started: edges read (none yet), no sweep due for an hour
    heard = coordination.announcements()
    up = Job(id=new_id(), job_type="report", display_name="up")
    down = Job(id=new_id(), job_type="report", display_name="down")
    await store.create_jobs([up, down])

    await first.set_dependencies(down.id, [{"jobId": up.id}])  # through the first server
    assert await anext(heard) == DEPENDENCIES_TOPIC
    second.heard_change()  # what the runtime's relay does with it

    now = utcnow()
    run = new_occurrence(up, now - timedelta(seconds=1), now, PlanSettings(), dispatched_at=now)
    await store.insert_occurrences([run])
    ended = await store.apply_status(
        [
            StatusRecord(occurrence_id=run.id, status=S.RUNNING, timestamp=now),
            StatusRecord(occurrence_id=run.id, status=S.COMPLETED, timestamp=now),
        ]
    )
    second.status_applied(ended)  # the second server's tracker recorded the end
    await second.step()

    released = await store.list_occurrences(OccurrenceQuery(job_id=down.id))
    assert [o.status for o in released.items] == [S.QUEUED]
    await heard.aclose()
