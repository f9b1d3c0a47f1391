"""Finding records by what people see of them: the job of each occurrence, the jobs with a
given name, the ids that start or end with what a page or a terminal shows of them."""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from typing import Final
from uuid import UUID

ID_WINDOW: Final = 100_000
"""How many of the newest records of a kind an id fragment is matched among (ids are UUIDv7,
so the newest are the latest created): a fragment never scans a whole table."""


class IdKind(enum.StrEnum):
    """The records an id fragment can name."""

    JOB = "job"
    OCCURRENCE = "occurrence"
    FAILED = "failed"
    GRAPH_RUN = "graph_run"


class IdLookup(abc.ABC):
    """Reads by name or by part of an id, each one bounded read."""

    @abc.abstractmethod
    async def occurrence_jobs(self, occurrence_ids: Sequence[UUID]) -> dict[UUID, UUID]:
        """The job id of each given occurrence that exists (unknown ones are left out)."""

    @abc.abstractmethod
    async def jobs_named(self, name: str, limit: int = 10) -> list[UUID]:
        """Up to ``limit`` ids of the jobs whose display name is ``name``, ignoring case,
        newest first."""

    @abc.abstractmethod
    async def match_ids(
        self, kind: IdKind, fragment: str, *, window: int = ID_WINDOW, limit: int = 10
    ) -> list[UUID]:
        """Up to ``limit`` ids, newest first, among the ``window`` newest records of
        ``kind``, whose hex digits (lower case, without hyphens) start or end with
        ``fragment`` (hex digits, lower case, without hyphens)."""
