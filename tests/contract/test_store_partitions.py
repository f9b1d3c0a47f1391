"""PostgreSQL's time partitions: created ahead, rows land in them, whole partitions dropped
once nothing in them is kept (and never while something is), the migration keeps the rows.
SQLite has none and says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from rota.app.configs import retention_policy
from rota.app.settings import RetentionSettings
from rota.core.ids import new_id
from rota.core.models import FailedOccurrence, FailureType, LogRecord, Occurrence
from rota.core.records import FailedQuery, PartitionUpkeep
from rota.services.maintenance import Maintenance
from rota.stores.migrate import downgrade, upgrade
from rota.stores.partitions import next_period, period_start, periods
from rota.stores.sql import SqlStore
from tests.contract.test_store import S, make_job, one_time, status
from tests.contract.test_store_retention import exists

MARCH = datetime(2031, 3, 5, 9, 0, tzinfo=UTC)
JUNE = datetime(2031, 6, 15, tzinfo=UTC)
POSTGRES = pytest.mark.parametrize("store_kind", ["postgres"])


def upkeep(**fields: object) -> PartitionUpkeep:
    """Completed occurrences and log lines kept 30 days before ``JUNE``, the rest forever."""
    values: dict[str, object] = {
        "period": "month",
        "ahead": 2,
        "occurrences_kept_since": {S.COMPLETED: JUNE - timedelta(days=30)},
        "logs_before": JUNE - timedelta(days=30),
    }
    values.update(fields)
    return PartitionUpkeep(**values)  # type: ignore[arg-type]


async def fired_at(store: SqlStore, at: datetime, end: S | None = S.COMPLETED) -> Occurrence:
    """An occurrence of a one-time job due at ``at``, ended ``end`` (``None``: still queued),
    with a status history and one log line at ``at``."""
    job = make_job(execute_at=at, next_run_at=at)
    await store.create_jobs([job])
    [occ] = (await store.dispatch_due([job.id], at, one_time)).queued
    if end is not None:
        await store.apply_status([status(occ, S.RUNNING, at), status(occ, end, at)])
    await store.append_logs(
        [LogRecord(occurrence_id=occ.id, timestamp=at, level="INFO", message="x")]
    )
    return occ


async def partition_of(store: SqlStore, table: str, where: str, value: object) -> str | None:
    async with store._read() as conn:
        found = await conn.execute(
            text(f"SELECT tableoid::regclass::text FROM {table} WHERE {where} = :v"), {"v": value}
        )
        name: str | None = found.scalar()
        return name


def test_periods_are_utc_days_iso_weeks_and_calendar_months() -> None:
    at = datetime(2031, 12, 31, 23, 30, tzinfo=UTC)
    assert period_start(at, "day") == datetime(2031, 12, 31, tzinfo=UTC)
    assert period_start(at, "week") == datetime(2031, 12, 29, tzinfo=UTC)  # a Monday
    assert period_start(at, "month") == datetime(2031, 12, 1, tzinfo=UTC)
    assert next_period(datetime(2031, 12, 1, tzinfo=UTC), "month") == datetime(
        2032, 1, 1, tzinfo=UTC
    )
    assert len(periods(datetime(2031, 1, 31, tzinfo=UTC), at, "month")) == 12
    ahead = periods(at, at, "month", ahead=2)
    assert [start.month for start, _ in ahead] == [12, 1, 2]
    assert ahead[-1][1] == datetime(2032, 3, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="unknown partition period"):
        period_start(at, "year")


async def test_sqlite_has_no_time_partitions(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/rota.db"
    await upgrade(url)
    store = SqlStore(url)
    await store.open()
    try:
        assert store.time_partitioned is False
        report = await store.maintain_partitions(JUNE, upkeep())
        assert (report.created, report.dropped) == ((), ())
    finally:
        await store.close()


@POSTGRES
async def test_partitions_are_made_ahead_once_and_rows_land_in_them(store: SqlStore) -> None:
    assert store.time_partitioned
    first = await store.maintain_partitions(MARCH, upkeep(drop=False))
    for table in ("occurrences", "occurrence_logs"):
        for month in ("20310301", "20310401", "20310501"):
            assert f"{table}_p{month}" in first.created
    again = await store.maintain_partitions(MARCH, upkeep(drop=False))
    assert again.created == ()
    occ = await fired_at(store, MARCH)
    assert await partition_of(store, "occurrences", "id", occ.id) == "occurrences_p20310301"
    stored = await store.get_occurrence(occ.id)
    assert stored.status == S.COMPLETED  # updated in place, its history with it
    assert [c.to_status for c in stored.status_changes][-1] == S.COMPLETED
    assert (
        await partition_of(store, "occurrence_logs", "occurrence_id", occ.id)
        == "occurrence_logs_p20310301"
    )
    # A time no partition covers goes to the default partition: an insert never fails.
    later = await fired_at(store, datetime(2040, 1, 1, tzinfo=UTC))
    assert await partition_of(store, "occurrences", "id", later.id) == "occurrences_default"


@POSTGRES
async def test_a_partition_is_dropped_only_when_nothing_in_it_is_kept(store: SqlStore) -> None:
    await store.maintain_partitions(MARCH, upkeep(drop=False))
    done = await fired_at(store, MARCH)
    waiting = await fired_at(store, MARCH + timedelta(days=1), end=None)  # still Queued
    failed = await fired_at(store, MARCH + timedelta(days=2), end=S.FAILED)
    await store.record_dead_letters(
        [
            FailedOccurrence(
                id=new_id(),
                occurrence_id=failed.id,
                job_id=failed.job_id,
                job_type=failed.job_type,
                failure_type=FailureType.PERMANENT,
                exception="boom",
                job_data=None,
                attempts=1,
                failed_at=MARCH,
            )
        ]
    )
    [dead_letter] = (await store.list_failed(FailedQuery(job_id=failed.job_id))).items
    assert not dead_letter.resolved
    kept_all = {S.COMPLETED: JUNE - timedelta(days=30), S.FAILED: JUNE - timedelta(days=30)}

    report = await store.maintain_partitions(JUNE, upkeep(occurrences_kept_since=kept_all))
    assert "occurrences_p20310301" not in report.dropped  # a Queued occurrence is in it
    assert "occurrence_logs_p20310301" in report.dropped  # log lines go by their own time
    assert await exists(store, done)

    await store.apply_status(
        [status(waiting, S.RUNNING, MARCH), status(waiting, S.CANCELLED, MARCH)]
    )
    report = await store.maintain_partitions(JUNE, upkeep(occurrences_kept_since=kept_all))
    assert "occurrences_p20310301" not in report.dropped  # Cancelled is kept forever here

    everything = {**kept_all, S.CANCELLED: JUNE - timedelta(days=30)}
    report = await store.maintain_partitions(JUNE, upkeep(occurrences_kept_since=everything))
    assert "occurrences_p20310301" not in report.dropped  # the unresolved dead letter holds it

    await store.update_failed(dead_letter.id, resolved=True, resolved_by="test", now=JUNE)
    report = await store.maintain_partitions(JUNE, upkeep(occurrences_kept_since=everything))
    assert "occurrences_p20310301" in report.dropped
    assert not any([await exists(store, o) for o in (done, waiting, failed)])
    assert "occurrences_p20310601" not in report.dropped  # the current period stays
    assert (
        await store.maintain_partitions(JUNE, upkeep(occurrences_kept_since=everything))
    ).dropped == ()


@POSTGRES
async def test_recent_occurrences_keep_their_partition(store: SqlStore) -> None:
    await store.maintain_partitions(MARCH, upkeep(drop=False))
    occ = await fired_at(store, MARCH)
    kept_long = {S.COMPLETED: JUNE - timedelta(days=365)}
    report = await store.maintain_partitions(JUNE, upkeep(occurrences_kept_since=kept_long))
    assert "occurrences_p20310301" not in report.dropped
    assert await exists(store, occ)


@POSTGRES
async def test_the_service_drops_partitions_and_keeps_log_lines_to_their_partitions(
    store: SqlStore,
) -> None:
    await store.maintain_partitions(MARCH, upkeep(drop=False))
    occ = await fired_at(store, MARCH)
    settings = RetentionSettings(completed_days=30, logs_days=30, failed_days=30)
    policy = retention_policy(settings)
    assert not policy.logs_go_with(S.COMPLETED)
    report = await Maintenance(store, policy, clock=lambda: JUNE).run_once()
    assert "occurrence_logs_p20310301" in report.partitions_dropped
    # Every status has a retention that has passed: the whole partition went, no row deletes.
    assert "occurrences_p20310301" in report.partitions_dropped
    assert report.occurrences == {}
    assert not await exists(store, occ)


@POSTGRES
async def test_migration_keeps_rows_both_ways(store: SqlStore, store_url: str) -> None:
    recent = await fired_at(store, datetime.now(UTC) - timedelta(days=40))
    future = await fired_at(store, MARCH)
    await store.close()
    await downgrade(store_url, "0007")
    await upgrade(store_url)
    await store.open()
    for occ in (recent, future):
        stored = await store.get_occurrence(occ.id)
        assert stored.status == S.COMPLETED
        assert [c.to_status for c in stored.status_changes][-1] == S.COMPLETED
        assert [line.message for _, line in await store.occurrence_logs(occ.id)] == ["x"]
    # Months from the oldest row to two ahead of now; a later row waits in the default one.
    month = f"occurrences_p{period_start(recent.scheduled_for, 'month'):%Y%m%d}"
    assert await partition_of(store, "occurrences", "id", recent.id) == month
    assert await partition_of(store, "occurrences", "id", future.id) == "occurrences_default"
    # The serial columns carry on after the copied rows.
    line = LogRecord(occurrence_id=recent.id, timestamp=MARCH, level="INFO", message="y")
    await store.append_logs([line])
    assert [line.message for _, line in await store.occurrence_logs(recent.id)] == ["x", "y"]
