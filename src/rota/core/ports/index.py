"""The schedule index port: the hot window of due times."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from uuid import UUID

from rota.core.records import (
    IndexEntry,
)


class ScheduleIndex(abc.ABC):
    """The hot window: due times of the near future, per bucket. A cache of the store — it may
    be emptied at any moment and is rebuilt by the loader. A job has at most one entry."""

    @abc.abstractmethod
    async def upsert(self, entries: Sequence[IndexEntry]) -> None:
        """Add entries or move existing ones to their new due time."""

    @abc.abstractmethod
    async def remove(self, entries: Sequence[tuple[int, UUID]]) -> None:
        """Remove ``(bucket, job_id)`` entries; missing ones are ignored."""

    @abc.abstractmethod
    async def due(self, buckets: Sequence[int], until: float, limit: int) -> list[IndexEntry]:
        """Entries of the given buckets with ``due <= until``, earliest first, at most
        ``limit``; ties in due time come in job id order. Reading does not remove them."""

    @abc.abstractmethod
    async def earliest(self, buckets: Sequence[int]) -> float | None:
        """The earliest due time in the given buckets, ``None`` if they are empty."""

    @abc.abstractmethod
    async def replace_bucket(self, bucket: int, entries: Sequence[IndexEntry]) -> None:
        """Make the bucket hold exactly ``entries`` (the loader's rebuild)."""

    @abc.abstractmethod
    async def size(self, buckets: Sequence[int]) -> int:
        """How many entries the given buckets hold."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources (idempotent)."""
