"""Rota: a distributed job scheduler for Python.

The SDK for job handlers (DESIGN.md §4)::

    import rota

    @rota.job("cleanup")
    def cleanup(ctx: rota.JobContext) -> None: ...

The API client (:class:`Client`, :class:`SyncClient`, :class:`ApiError`) is imported on first
use: a worker that only declares jobs does not load httpx and the API's models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rota.core.errors import PermanentError, RotaError
from rota.core.secretrefs import secret
from rota.sdk.context import JobContext
from rota.sdk.job import JobData, JobDefinition, job

if TYPE_CHECKING:
    from rota.client import ApiError, Client, SyncClient

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
    "secret",
]

_CLIENT = frozenset({"ApiError", "Client", "SyncClient"})


def __getattr__(name: str) -> Any:
    if name in _CLIENT:
        from rota import client

        value = getattr(client, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
