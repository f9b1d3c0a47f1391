"""The store's slice for the data schemas workers publish with their job types: kept with
the type (``declared_job_types``), so job data is checked against the last one published
even while no worker of the type is live (:mod:`rota.services.workers`)."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from rota.core.records import PublishedSchema


class JobTypeSchemas(abc.ABC):
    """The last data schema each worker group published for each job type."""

    @abc.abstractmethod
    async def record_schemas(self, published: Sequence[PublishedSchema]) -> None:
        """Keep each ``(job type, worker group)``'s schema and time, replacing what was kept
        for the pair (a pair not declared before is recorded as declared at that time, see
        :class:`~rota.core.ports.JobTypeHistory`). Pairs with a name longer than 200
        characters are left out; a pair given twice keeps its last entry."""

    @abc.abstractmethod
    async def published_schemas(self) -> list[PublishedSchema]:
        """Every pair's last published schema, ordered by job type and worker group; pairs
        declared with no schema recorded (before the store kept them) are left out."""
