"""The smallest runtime the REST API and the dashboard run on in one process: a migrated
store, the in-memory schedule index and coordination, the in-process broker, the job service
(with an event publisher if asked), auth and audit. Shared by the API, dashboard and client
tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rota.app.builtins import builtin_data_checks
from rota.app.configs import auth_config, jobs_config
from rota.app.settings import Settings
from rota.brokers.inprocess import InProcessBroker
from rota.coordination.memory import MemoryCoordination
from rota.core.errors import BackendUnavailableError
from rota.core.models import WorkerInfo
from rota.core.ports import Coordination
from rota.indexes.memory import MemoryScheduleIndex
from rota.services.apikeys import ApiKeyService
from rota.services.audit import AuditService
from rota.services.auth import AuthService
from rota.services.backfill import Backfill
from rota.services.dataschema import DataSchemas
from rota.services.dependencies import DependencyService
from rota.services.events import EventPublisher
from rota.services.idempotency import Idempotency
from rota.services.jobs import JobService
from rota.services.notifications import NotificationConfig, NotificationService, SendResult
from rota.services.pausing import Pausing
from rota.services.workers import WorkerDirectory
from rota.stores.migrate import upgrade
from rota.stores.sql import SqlStore

WAIT = 10.0


@dataclass
class MiniRuntime:
    """The smallest object that satisfies the API's runtime protocol."""

    settings: Settings
    store: SqlStore
    index: MemoryScheduleIndex
    broker: InProcessBroker
    coordination: Coordination
    jobs: JobService
    events: EventPublisher | None = None
    failing: dict[str, str] = field(default_factory=dict)
    """Component -> error that :meth:`health` reports (a backend made to look down)."""
    auth: AuthService = field(init=False)
    audit: AuditService = field(init=False)
    idempotency: Idempotency = field(init=False)
    backfill: Backfill = field(init=False)
    pausing: Pausing = field(init=False)
    notifications: NotificationService = field(init=False)
    dependencies: DependencyService = field(init=False)
    api_keys: ApiKeyService = field(init=False)
    """Subscriptions for the API; its loop does not run here (nothing is sent)."""

    def __post_init__(self) -> None:
        self.auth = AuthService(self.store, auth_config(self.settings), self.jobs.now)
        self.audit = AuditService(self.store, self.jobs.now)
        self.api_keys = ApiKeyService(self.store, self.audit, self.jobs.now)
        self.idempotency = Idempotency(self.store, self.jobs.now)
        self.backfill = Backfill(
            self.store,
            self.coordination,
            jobs_config(self.settings.scheduler).plan,
            self.jobs.now,
            events=self.jobs.events,
            workers=WorkerDirectory(self.coordination, history=self.store),
        )
        self.pausing = Pausing(self.store, self.audit, self.jobs.events, clock=self.jobs.now)
        self.dependencies = DependencyService(
            self.store,
            self.store,
            self.coordination,
            events=self.jobs.events,
            now=self.jobs.now,
        )
        self.notifications = NotificationService(
            self.store, NotificationConfig(), instance_id="mini", send=_not_sent
        )

    async def declare(self, *job_types: str, group: str = "mini") -> None:
        """A live worker instance of ``group`` declaring ``job_types`` in the registry, as a
        worker registers (nothing runs their jobs here): a manual run of them is Queued, not
        Skipped ``no_worker`` as for a type no worker ever declared."""
        info = WorkerInfo(
            instance_id=f"{group}-{'-'.join(job_types)}",
            worker_id=group,
            host="mini",
            pid=1,
            job_types={job_type: {} for job_type in job_types},
            concurrency=1,
        )
        await self.coordination.register_worker(info, ttl=3600)

    async def health(self) -> dict[str, str]:
        components = {"store": "ok", "index": "ok", "broker": "ok"}
        try:
            await self.store.ping()
        except BackendUnavailableError as exc:
            components["store"] = str(exc)
        return components | self.failing


async def _not_sent(*_: object) -> SendResult:
    return SendResult(ok=False, error="the mini runtime sends nothing")


def mini_runtime(
    store: SqlStore,
    settings: Settings,
    coordination: Coordination | None = None,
    events: EventPublisher | None = None,
) -> MiniRuntime:
    """A :class:`MiniRuntime` on an open ``store``."""
    index = MemoryScheduleIndex()
    coordination = coordination or MemoryCoordination()
    jobs = JobService(
        store,
        index,
        coordination,
        jobs_config(settings.scheduler),
        lambda: datetime.now(UTC),
        events=events,
        schemas=DataSchemas(checks=builtin_data_checks(settings)),  # as the wiring's
    )
    return MiniRuntime(settings, store, index, InProcessBroker(), coordination, jobs, events)


@asynccontextmanager
async def sqlite_runtime(
    tmp_path: Path, *, coordination: Coordination | None = None, with_events: bool = False
) -> AsyncIterator[MiniRuntime]:
    """A :class:`MiniRuntime` on a fresh SQLite store in ``tmp_path``; ``with_events``: with
    an :class:`EventPublisher` running (on ``coordination``)."""
    url = f"sqlite:///{tmp_path / 'rota.db'}"
    await upgrade(url)
    settings = Settings(environment="test", data_dir=tmp_path, database_url=url)
    store = SqlStore(url, auto_disable=settings.scheduler.auto_disable)
    await store.open()
    coordination = coordination or MemoryCoordination()
    events = EventPublisher(coordination) if with_events else None
    publishing = asyncio.create_task(events.run()) if events is not None else None
    try:
        yield mini_runtime(store, settings, coordination, events)
    finally:
        if events is not None and publishing is not None:
            events.stop()
            await asyncio.wait_for(publishing, WAIT)
        await store.close()
