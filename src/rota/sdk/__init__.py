"""What job authors import: :func:`job`, :class:`JobContext`, :class:`JobData` and the
registry that discovers job types (:mod:`rota.sdk.registry`). Imports :mod:`rota.core` only."""

from rota.core.errors import PermanentError
from rota.sdk.context import JobContext
from rota.sdk.job import JobData, JobDefinition, job
from rota.sdk.registry import JobRegistry, load_jobs

__all__ = [
    "JobContext",
    "JobData",
    "JobDefinition",
    "JobRegistry",
    "PermanentError",
    "job",
    "load_jobs",
]
