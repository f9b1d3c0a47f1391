"""Ports: what the scheduler services need from the outside world, cut at Rota's own operations.

Every port is an ABC whose docstrings are its contract. Each adapter (in-memory, SQLite,
PostgreSQL, Redis, RabbitMQ) must pass the contract suite of its port in ``tests/contract``.
Every datetime crossing a port is timezone-aware UTC.

The store and the coordination are cut into slices, one per use case (``store.py``,
``coordination.py``); a service takes the slice it uses, so the type checker proves what it
touches. No port has more than 15 abstract methods; ``Store`` and ``Coordination`` are the
composites their adapters implement.
"""

from rota.core.ports.apikeys import ApiKeyStore
from rota.core.ports.broker import Broker, Delivery
from rota.core.ports.coordination import (
    BucketLeases,
    ClaimMemory,
    Coordination,
    EventFeed,
    Signals,
    WorkerRegistry,
)
from rota.core.ports.dependencies import DependencyAwareStore, DependencyStore
from rota.core.ports.idempotency import IdempotencyStore
from rota.core.ports.index import ScheduleIndex
from rota.core.ports.jobtypes import JobTypeSchemas
from rota.core.ports.pausing import PauseStore
from rota.core.ports.routing import RoutedDispatchStore, RoutingStore
from rota.core.ports.sessions import AccountStore, SessionStore
from rota.core.ports.store import (
    AheadStore,
    AuditStore,
    ControlStore,
    DeadLetterStore,
    DispatchStore,
    FailedStore,
    JobAdminStore,
    JobStore,
    JobTypeHistory,
    MaintenanceStore,
    NotificationStore,
    OccurrenceReader,
    OccurrenceStore,
    RecoveryStore,
    RetentionStore,
    SecurityStore,
    SilenceReader,
    StatsReader,
    StatusStore,
    Store,
    SupersedeStore,
    UserStore,
)

__all__ = [
    "AccountStore",
    "AheadStore",
    "ApiKeyStore",
    "AuditStore",
    "Broker",
    "BucketLeases",
    "ClaimMemory",
    "ControlStore",
    "Coordination",
    "DeadLetterStore",
    "Delivery",
    "DependencyAwareStore",
    "DependencyStore",
    "DispatchStore",
    "EventFeed",
    "FailedStore",
    "IdempotencyStore",
    "JobAdminStore",
    "JobStore",
    "JobTypeHistory",
    "JobTypeSchemas",
    "MaintenanceStore",
    "NotificationStore",
    "OccurrenceReader",
    "OccurrenceStore",
    "PauseStore",
    "RecoveryStore",
    "RetentionStore",
    "RoutedDispatchStore",
    "RoutingStore",
    "ScheduleIndex",
    "SecurityStore",
    "SessionStore",
    "Signals",
    "SilenceReader",
    "StatsReader",
    "StatusStore",
    "Store",
    "SupersedeStore",
    "UserStore",
    "WorkerRegistry",
]
