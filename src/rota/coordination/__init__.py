"""Coordination adapters (:class:`~rota.core.ports.Coordination`): in-memory, Redis."""

from rota.coordination.memory import MemoryCoordination

__all__ = ["MemoryCoordination"]
