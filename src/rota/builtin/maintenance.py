"""``rota.maintenance``: the retention sweep (``rota maintenance``, ``ROTA_RETENTION__…``) as a
job, so that it can be scheduled with a cron like any other and its reports kept in the
history. The composition root gives it the way to open the store (this package opens none
itself); each run opens it, sweeps once and closes it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from pydantic import ConfigDict, JsonValue

from rota.core.ports import MaintenanceStore
from rota.sdk.job import JobContext, JobData, JobDefinition, job
from rota.services.maintenance import Maintenance, MaintenanceReport, RetentionPolicy

__all__ = ["MaintenanceRun", "definitions"]

JOB_TYPE = "rota.maintenance"

OpenStore = Callable[[], AbstractAsyncContextManager[MaintenanceStore]]
"""Opens the scheduler's store for one sweep (and closes it on exit)."""


class MaintenanceRun(JobData):
    """The job data of ``rota.maintenance``: none (the policy is the Admin's settings)."""

    model_config = ConfigDict(extra="forbid")


def report_json(report: MaintenanceReport) -> dict[str, JsonValue]:
    return {
        "occurrencesDeleted": dict(report.occurrences),
        "logsDeleted": report.logs,
        "deadLettersDeleted": report.dead_letters,
        "partitionsCreated": list(report.partitions_created),
        "partitionsDropped": list(report.partitions_dropped),
        "seconds": round(report.seconds, 3),
    }


def definitions(open_store: OpenStore, policy: RetentionPolicy) -> list[JobDefinition[..., Any]]:
    """The ``rota.maintenance`` job type: ``open_store`` and ``policy`` come from the
    composition root (the settings' database URL and ``ROTA_RETENTION__…``)."""

    @job(JOB_TYPE, max_retries=2, retry_delay=60, concurrency=1)
    async def maintenance(ctx: JobContext, data: MaintenanceRun) -> dict[str, JsonValue]:
        """Delete what is past its retention now; what was deleted is the result."""
        async with open_store() as store:
            report = await Maintenance(store, policy).run_once()
        result = report_json(report)
        ctx.log.info(
            "retention deleted %d occurrences, %d log lines, %d dead letters in %.1f s",
            sum(report.occurrences.values()), report.logs, report.dead_letters, report.seconds,
        )  # fmt: skip
        return result

    return [maintenance]
