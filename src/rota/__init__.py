"""Rota: a distributed job scheduler for Python.

The SDK for job handlers (DESIGN.md §4)::

    import rota

    @rota.job("cleanup")
    def cleanup(ctx: rota.JobContext) -> None: ...
"""

from rota.client import ApiError, Client, SyncClient
from rota.core.errors import PermanentError, RotaError
from rota.sdk.context import JobContext
from rota.sdk.job import JobData, JobDefinition, job

__all__ = [
    "ApiError",
    "Client",
    "JobContext",
    "JobData",
    "JobDefinition",
    "PermanentError",
    "RotaError",
    "SyncClient",
    "job",
]
