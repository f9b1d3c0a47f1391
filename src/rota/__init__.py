"""Rota: a distributed job scheduler for Python.

The SDK for job handlers (DESIGN.md §4)::

    import rota

    @rota.job("cleanup")
    def cleanup(ctx: rota.JobContext) -> None: ...

The API client (:class:`Client`, :class:`SyncClient`, :class:`ApiError`,
:class:`RunFailedError`) is imported on first
use: a worker that only declares jobs does not load httpx and the API's models. So are
:class:`Rota` (the scheduler, API and dashboard inside your own ASGI app, ``docs/embedding.md``)
and its :class:`Settings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rota.core.errors import PermanentError, RotaError
from rota.core.secretrefs import secret
from rota.sdk.context import JobContext
from rota.sdk.job import JobData, JobDefinition, job

if TYPE_CHECKING:
    from rota.app.embed import Rota
    from rota.app.settings import Settings
    from rota.client import ApiError, Client, RunFailedError, SyncClient

__all__ = [
    "ApiError",
    "Client",
    "JobContext",
    "JobData",
    "JobDefinition",
    "PermanentError",
    "Rota",
    "RotaError",
    "RunFailedError",
    "Settings",
    "SyncClient",
    "job",
    "secret",
]

_CLIENT = frozenset({"ApiError", "Client", "RunFailedError", "SyncClient"})
_LAZY = {"Rota": "rota.app.embed", "Settings": "rota.app.settings"}


def __getattr__(name: str) -> Any:
    if name in _CLIENT:
        from rota import client

        value = getattr(client, name)
        globals()[name] = value
        return value
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
