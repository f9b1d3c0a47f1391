"""One stepped clock for a store's records, the zombie detector and the in-memory registry's
expiry, and the worker registration the dead-worker tests share (``test_dead_workers.py``,
``test_claims_lost.py``; their ``clock`` and ``coordination`` fixtures are in ``conftest.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rota.core.models import WorkerInfo

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    """Stands at :data:`T0` until advanced."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def epoch(self) -> float:
        return self.now.timestamp()

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def info(instance: str) -> WorkerInfo:
    """A registration of group ``g`` running job type ``report``."""
    return WorkerInfo(
        instance_id=instance,
        worker_id="g",
        host="h",
        pid=1,
        job_types={"report": {}},
        concurrency=1,
        started_at=T0,
    )
