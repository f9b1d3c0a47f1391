"""Each occurrence goes to one worker group: the directory's choice (issue 32)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

from rota.coordination.memory import MemoryCoordination
from rota.core.ids import new_id
from rota.core.models import FailureType, Job, JobMessage, StatusRecord, WorkerInfo, utcnow
from rota.core.models import OccurrenceStatus as S
from rota.core.planning import PlanSettings, new_occurrence
from rota.services.routing import DeclinedAttempts
from rota.services.workers import WorkerDirectory
from rota.stores.sql import SqlStore

TTL = 60.0
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def worker(
    instance: str, group: str, *types: str, concurrency: int = 4, age: float = 0
) -> WorkerInfo:
    return WorkerInfo(
        instance_id=instance,
        worker_id=group,
        host="h",
        pid=1,
        job_types={t: {} for t in types},
        concurrency=concurrency,
        started_at=utcnow() - timedelta(seconds=age),
    )


async def directory(*workers: WorkerInfo) -> tuple[WorkerDirectory, MemoryCoordination]:
    coordination = MemoryCoordination()
    for info in workers:
        await coordination.register_worker(info, TTL)
    found = WorkerDirectory(coordination, max_age=0)
    await found.refresh(force=True)
    return found, coordination


async def test_a_job_naming_its_group_goes_there_whoever_runs_the_type() -> None:
    found, _ = await directory(worker("a-1", "aud", "report"), worker("p-1", "prio", "report"))
    assert {found.route("report", "prio", new_id()) for _ in range(50)} == {"prio"}
    assert found.route("report", "asleep", new_id()) == "asleep"  # its queue keeps it


async def test_unpinned_occurrences_spread_over_the_live_groups_by_capacity() -> None:
    found, _ = await directory(
        worker("a-1", "aud", "report", concurrency=2),
        worker("p-1", "prio", "report", concurrency=3),
        worker("p-2", "prio", "report", concurrency=3),
        worker("o-1", "other", "email"),
    )
    counts = Counter(found.route("report", None, new_id()) for _ in range(4000))
    assert set(counts) == {"aud", "prio"}
    assert 0.15 < counts["aud"] / 4000 < 0.35  # 2 of 8 slots
    key = new_id()
    assert len({found.route("report", None, key) for _ in range(10)}) == 1  # stable per id


async def test_a_type_taken_away_by_a_deploy_stops_reaching_the_group_at_once() -> None:
    """The group's newest instance says what the group runs: once one new instance has
    registered without the type, the group gets no more of it, old instances or not."""
    found, coordination = await directory(
        worker("a-old", "aud", "report", "audit", age=60), worker("p-1", "prio", "report")
    )
    assert found.groups_for("report") == {"aud", "prio"}
    await coordination.register_worker(worker("a-new", "aud", "audit"), TTL)
    await found.refresh(force=True)
    assert found.groups_for("report") == {"prio"}
    assert {found.route("report", None, new_id()) for _ in range(50)} == {"prio"}
    assert found.serves("audit", "aud")


async def test_with_no_live_group_the_groups_that_declared_it_and_are_away_get_it() -> None:
    found, coordination = await directory(
        worker("a-1", "aud", "audit"), worker("p-1", "prio", "report")
    )
    await coordination.unregister_worker("p-1")
    await found.refresh(force=True)
    assert found.route("report", None, new_id()) == "prio"  # away: its queue keeps it
    # A group live without the type has stopped running it: never chosen for it.
    await coordination.register_worker(worker("p-2", "prio", "other"), TTL)
    await found.refresh(force=True)
    assert found.route("report", None, new_id()) is None
    assert found.route("never-declared", None, new_id()) is None


# --- declined attempts ------------------------------------------------------------------------


async def test_declined_attempts_go_back_or_fail_and_stale_ones_are_dropped(
    store: SqlStore,
) -> None:
    """What the status tracker does with a batch holding ``unknown_job_type`` reports: an
    attempt a live group runs goes back to the dispatcher (with a line in its log), one no
    group runs stays in the batch (it fails), a stale one leaves it; others are untouched."""
    found, _ = await directory(worker("p-1", "prio", "report"), worker("a-1", "aud", "audit"))
    woken: list[bool] = []
    declines = DeclinedAttempts(store, store, found, on_returned=lambda: woken.append(True))
    report, gone, running = (
        Job(id=new_id(), job_type=t, execute_at=T0) for t in ("report", "gone", "report")
    )
    await store.create_jobs([report, gone, running])
    occs = [
        new_occurrence(j, T0, T0, PlanSettings(), dispatched_at=T0) for j in (report, gone, running)
    ]
    await store.insert_occurrences(occs)
    await store.apply_status(
        [StatusRecord(occurrence_id=occs[2].id, status=S.RUNNING, timestamp=T0)]
    )

    def declined(occ_id: UUID) -> StatusRecord:
        return StatusRecord(
            occurrence_id=occ_id,
            status=S.FAILED,
            timestamp=T0,
            instance_id="aud-1",
            failure_type=FailureType.UNKNOWN_JOB_TYPE,
            exception="no handler",
        )

    other = StatusRecord(occurrence_id=occs[2].id, status=S.COMPLETED, timestamp=T0)
    batch = [declined(occs[0].id), declined(occs[1].id), declined(occs[2].id), other]
    left = await declines.settle(batch)
    assert list(left) == [batch[1], other]
    assert (declines.returned, woken) == (1, [True])
    back = await store.get_occurrence(occs[0].id)
    assert (back.status, back.attempt, back.dispatched_at) == (S.QUEUED, 1, None)
    lines = await store.occurrence_logs(occs[0].id)
    assert ["sent again" in line.message for _seq, line in lines] == [True]
    assert await declines.settle([other]) == [other]  # nothing declined: nothing asked


def _message(group: str) -> JobMessage:
    return JobMessage(
        occurrence_id=new_id(), job_id=new_id(), job_type="report", job_data=None,
        scheduled_for=T0, timestamp=T0, worker_id=group,
    )  # fmt: skip


async def test_envelopes_go_to_groups_whose_every_instance_reads_them_shared_out() -> None:
    def reader(instance: str, group: str, size: int) -> WorkerInfo:
        return replace(worker(instance, group, "report"), envelope_jobs=size)

    found, _ = await directory(
        reader("a-1", "all", 100),
        reader("a-2", "all", 50),
        reader("m-1", "mixed", 100),
        worker("m-2", "mixed", "report"),  # reads no envelopes: the group gets single messages
        reader("s-1", "solo", 100),
    )
    batch = [_message("all")] * 300 + [_message("mixed")] * 10 + [_message("solo")] * 30
    # the smallest size announced; solo's 30 jobs in one envelope
    assert found.envelopes(batch) == {"all": 50, "solo": 30}
    # a burst smaller than the group's instances × size is shared out: one part each
    assert found.envelopes([_message("all")] * 40) == {"all": 20}
    assert found.envelopes([_message("all")] * 3) == {"all": 2}
    assert found.envelopes([_message("solo")]) == {}  # a lone job goes alone
