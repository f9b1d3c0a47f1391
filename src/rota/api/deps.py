"""How routes reach the runtime: ``app.state.runtime`` through an ``Annotated`` dependency.

The API depends on this protocol, not on :mod:`rota.app.runtime`, so any object with these
attributes (the composition root's runtime, or a test's) can serve it.
"""

from __future__ import annotations

from typing import Annotated, Protocol, cast

from fastapi import Depends, Request

from rota.app.settings import Settings
from rota.core.ports import Broker, Coordination, ScheduleIndex, Store
from rota.core.ports.lookup import IdLookup
from rota.services.apikeys import ApiKeyService
from rota.services.audit import AuditService
from rota.services.auth import AuthService
from rota.services.backfill import Backfill
from rota.services.dependencies import DependencyService
from rota.services.idempotency import Idempotency
from rota.services.jobs import JobService
from rota.services.pausing import Pausing


class ApiRuntime(Protocol):
    """What the API needs from the wired runtime."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def index(self) -> ScheduleIndex: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def coordination(self) -> Coordination: ...

    @property
    def jobs(self) -> JobService: ...

    @property
    def auth(self) -> AuthService: ...

    @property
    def audit(self) -> AuditService: ...

    @property
    def idempotency(self) -> Idempotency: ...

    @property
    def backfill(self) -> Backfill: ...

    @property
    def pausing(self) -> Pausing: ...

    @property
    def dependencies(self) -> DependencyService: ...

    @property
    def api_keys(self) -> ApiKeyService: ...

    async def health(self) -> dict[str, str]:
        """Component name -> ``"ok"`` or the text of its error."""
        ...


def get_runtime(request: Request) -> ApiRuntime:
    return cast(ApiRuntime, request.app.state.runtime)


def get_jobs(request: Request) -> JobService:
    return get_runtime(request).jobs


def get_store(request: Request) -> Store:
    return get_runtime(request).store


def lookup_of(runtime: ApiRuntime) -> IdLookup:
    """The store's look-up slice (names, id fragments): every store adapter has it."""
    store = runtime.store
    if not isinstance(store, IdLookup):
        raise TypeError("this store has no look-up slice: use a DependencyAwareStore")
    return store


def get_lookup(request: Request) -> IdLookup:
    return lookup_of(get_runtime(request))


def get_auth(request: Request) -> AuthService:
    return get_runtime(request).auth


def get_audit(request: Request) -> AuditService:
    return get_runtime(request).audit


def get_idempotency(request: Request) -> Idempotency:
    return get_runtime(request).idempotency


def get_api_keys(request: Request) -> ApiKeyService:
    return get_runtime(request).api_keys


Runtime = Annotated[ApiRuntime, Depends(get_runtime)]
Jobs = Annotated[JobService, Depends(get_jobs)]
StoreDep = Annotated[Store, Depends(get_store)]
Lookup = Annotated[IdLookup, Depends(get_lookup)]
Auth = Annotated[AuthService, Depends(get_auth)]
Audit = Annotated[AuditService, Depends(get_audit)]
Idempotent = Annotated[Idempotency, Depends(get_idempotency)]
ApiKeys = Annotated[ApiKeyService, Depends(get_api_keys)]
