"""The executor's settings in one frozen record (:class:`ExecutorConfig`), built once by the
composition root (``rota.app.wiring.build_executor``, from ``settings.worker``) and passed
whole: the executor's constructor takes its collaborators and this."""

from __future__ import annotations

from dataclasses import dataclass

from rota.worker.gate import DEFAULT_LIMIT_LEASE

__all__ = [
    "DEFAULT_LIMIT_LEASE",
    "FINALIZED_MAX_ENTRIES",
    "FINALIZED_RETENTION",
    "HAND_BACK_AFTER",
    "ExecutorConfig",
]

HAND_BACK_AFTER = 600.0
FINALIZED_RETENTION = 7 * 24 * 3600.0
FINALIZED_MAX_ENTRIES = 1_000_000
"""The defaults of ``hand_back_after``, ``finalized_retention`` and ``finalized_max_entries``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorConfig:
    """How one worker instance's executor runs (:class:`rota.worker.executor.Executor`)."""

    worker_id: str
    """The worker group whose queue it consumes."""
    instance_id: str
    """This instance, as its reports and claims name it."""
    concurrency: int
    """Handlers run at once (the slots); a job type's own ``concurrency`` bounds it within."""
    sync_threads: int
    """Threads of the pool plain-``def`` handlers run in."""
    flush_interval: float
    """Seconds between two flushes of the status and log records."""
    heartbeat_interval: float = 5.0
    """Seconds between two heartbeats: running occurrences re-reported Running, claims renewed,
    held deliveries watched."""
    hand_back_after: float = HAND_BACK_AFTER
    """Seconds a delivery may wait for a slot, its job type's turn or its limit before it is
    given back to the broker (which delivers it again)."""
    finalized_retention: float = FINALIZED_RETENTION
    """Seconds the attempts finalized here are remembered in the local store."""
    finalized_max_entries: int = FINALIZED_MAX_ENTRIES
    """The most finalized attempts kept in the local store."""
    default_timeout: float | None = None
    """Seconds an attempt may run when neither its job nor its job type sets a limit
    (``None``: no limit)."""
    hold_capacity: int = 0
    """Deliveries sent ahead of their due time that may be held beyond ``concurrency`` (the
    consumer's prefetch grows by it; 0: held ones narrow what can be received)."""
    limit_lease: float = DEFAULT_LIMIT_LEASE
    """Seconds a cluster-wide limit's slot is held between two renewals."""
    limit_capacity: int | None = None
    """Deliveries that may wait for a cluster-wide limit beyond the rest (the prefetch grows
    by it when limits are followed; ``None``: ``concurrency``)."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.sync_threads < 1:
            raise ValueError("concurrency and sync_threads must be >= 1")
        if self.default_timeout is not None and not self.default_timeout > 0:
            raise ValueError("default_timeout must be > 0 (or None)")
        if self.hold_capacity < 0:
            raise ValueError("hold_capacity must be >= 0")

    def prefetch(self, *, limited: bool) -> int:
        """The consumer's prefetch: the slots, the held deliveries' room and (``limited``:
        cluster-wide limits are followed) the room of the deliveries waiting for a limit."""
        limit_room = (self.limit_capacity or self.concurrency) if limited else 0
        return self.concurrency + self.hold_capacity + limit_room
