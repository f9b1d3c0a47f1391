"""Declined attempts: a worker group that is sent a job type it does not run (a deploy took the
type away from it, or a job names a group that lacks it) reports the attempt ``Failed`` with
failure type ``unknown_job_type`` without running or claiming it. The status tracker hands those
reports here before it applies a batch: an attempt that a group runs now is handed back to the
dispatcher, which sends it to that group; only one that no group runs fails as the worker said.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from uuid import UUID

from rota.core.models import FailureType, LogRecord, OccurrenceStatus, StatusRecord, utcnow
from rota.core.ports import RoutingStore, StatusStore
from rota.services.workers import WorkerDirectory

log = logging.getLogger(__name__)


def is_declined(record: StatusRecord) -> bool:
    """A worker's report that it does not run the attempt's job type."""
    return (
        record.status is OccurrenceStatus.FAILED
        and record.failure_type is FailureType.UNKNOWN_JOB_TYPE
        and record.retry_at is None
    )


class DeclinedAttempts:
    """Settles the declined attempts of a status batch.

    ``on_returned``: called when attempts were handed back (wakes the dispatcher, whose sweep
    sends them at once)."""

    def __init__(
        self,
        store: RoutingStore,
        logs: StatusStore,
        workers: WorkerDirectory,
        *,
        on_returned: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._logs = logs
        self._workers = workers
        self._on_returned = on_returned
        self.returned = 0
        """Attempts handed back to the dispatcher since start."""

    def _serves(self, job_type: str, worker_id: str | None) -> bool:
        if worker_id is not None:  # the job names its group: only that group may run it
            return self._workers.serves(job_type, worker_id)
        return self._workers.route(job_type, None, _ANY) is not None

    async def settle(self, records: Sequence[StatusRecord]) -> Sequence[StatusRecord]:
        """The records of the batch still to apply: a declined attempt handed back to the
        dispatcher, or a stale decline (the attempt moved on: sent elsewhere, started or
        ended), is taken out; a decline that no group can take over stays (it fails)."""
        declined = {(r.occurrence_id, r.attempt): r for r in records if is_declined(r)}
        if not declined:
            return records
        await self._workers.refresh(force=True)
        result = await self._store.return_declined(list(declined), self._serves)
        keep = set(result.unserved)
        if result.returned:
            self.returned += len(result.returned)
            now, returned = utcnow(), set(result.returned)
            notes = [
                LogRecord(
                    occurrence_id=oid,
                    timestamp=now,
                    level="WARNING",
                    message=(
                        f"worker instance {rec.instance_id} does not run this job's type: "
                        "sent again, to a worker group that runs it"
                    ),
                    category="rota.routing",
                )
                for (oid, _attempt), rec in declined.items()
                if oid in returned
            ]
            await self._logs.append_logs(notes)
            log.info(
                "%d declined attempt(s) handed back to the dispatcher",
                len(result.returned),
                extra={"action": "declined_returned"},
            )
            if self._on_returned is not None:
                self._on_returned()
        return [r for r in records if not is_declined(r) or r.occurrence_id in keep]


_ANY = UUID(int=0)
"""Any key: whether a route exists does not depend on it."""
