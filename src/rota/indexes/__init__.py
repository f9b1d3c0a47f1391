"""Schedule index adapters (:class:`~rota.core.ports.ScheduleIndex`): in-memory, Redis."""

from rota.indexes.memory import MemoryScheduleIndex

__all__ = ["MemoryScheduleIndex"]
