"""Adapter selection by URL (DESIGN.md §1): nothing set means embedded. Imported only by the
composition root (:mod:`rota.app`) and the operator commands of :mod:`rota.cli`, which
reach the store through :func:`make_store` and :func:`upgrade_schema`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rota.app.settings import Settings
from rota.core.autodisable import AutoDisableDefaults
from rota.core.errors import ConfigurationError
from rota.core.ports import Broker, Coordination, DependencyAwareStore, ScheduleIndex
from rota.core.sealing import DataSeal
from rota.stores.files import StoreOwnerLock


def check_mode(settings: Settings) -> None:
    """The distributed mode needs both Redis and RabbitMQ; say what is missing."""
    if bool(settings.redis_url) != bool(settings.amqp_url):
        missing = "ROTA_AMQP_URL" if settings.redis_url else "ROTA_REDIS_URL"
        raise ConfigurationError(
            f"the distributed mode needs both ROTA_REDIS_URL and ROTA_AMQP_URL: set {missing} "
            "(or unset both to run embedded)"
        )


def make_index(settings: Settings) -> ScheduleIndex:
    check_mode(settings)
    if settings.redis_url:
        from rota.indexes.redis import RedisScheduleIndex

        return RedisScheduleIndex.from_url(settings.redis_url, prefix=settings.name_prefix)
    from rota.indexes.memory import MemoryScheduleIndex

    return MemoryScheduleIndex()


def make_coordination(settings: Settings) -> Coordination:
    check_mode(settings)
    if settings.redis_url:
        from rota.coordination.redis import RedisCoordination

        return RedisCoordination.from_url(settings.redis_url, prefix=settings.name_prefix)
    from rota.coordination.memory import MemoryCoordination

    return MemoryCoordination()


def make_broker(settings: Settings) -> Broker:
    check_mode(settings)
    if settings.amqp_url:
        from rota.brokers.rabbitmq import RabbitMQBroker

        return RabbitMQBroker(settings.amqp_url, prefix=settings.name_prefix)
    from rota.brokers.inprocess import InProcessBroker

    return InProcessBroker(prefix=settings.name_prefix)


def make_store(
    url: str, *, auto_disable: AutoDisableDefaults | None = None, seal: DataSeal | None = None
) -> DependencyAwareStore:
    """The SQL store (SQLite or PostgreSQL) at ``url``; not opened yet. ``seal``: the keys
    job data and results are encrypted with at rest."""
    from rota.stores.sql import SqlStore

    return SqlStore(url, auto_disable=auto_disable, seal=seal)


def store_owner_lock(url: str) -> StoreOwnerLock | None:
    """The lock that makes one process the owner of the SQLite store at ``url`` (not taken
    yet); ``None`` for PostgreSQL, which many servers share by design."""
    from rota.stores.urls import sqlite_path

    path = sqlite_path(url)
    if path is None or str(path) == ":memory:":  # refused when the store opens
        return None
    return StoreOwnerLock(Path(path).absolute())


async def upgrade_schema(url: str) -> None:
    """Bring the store's schema at ``url`` up to date (creates a SQLite file, 0600)."""
    from rota.stores.migrate import upgrade

    await upgrade(url)


async def rebuild_statistics(url: str, *, pad_since: datetime | None = None) -> None:
    """Recompute the maintained statistics of the store at ``url`` from its occurrences
    (``rota bench capacity --history-fill sql``; not on a live store)."""
    from rota.stores.sql import SqlStore

    store = SqlStore(url)
    await store.open()
    try:
        await store.rebuild_aggregates(pad_since=pad_since)
    finally:
        await store.close()


async def reencrypt_store(
    url: str,
    seal: DataSeal,
    *,
    batch: int,
    tables: Sequence[str],
    after: str | None = None,
    progress: Callable[[ReencryptProgress], None],
) -> None:
    """``rota maintenance reencrypt``: every sealed value of ``tables`` moved to the current
    key in batches of ``batch`` rows (``after``: resume the first table after this key);
    ``progress`` is told after each batch."""
    from rota.stores.sql import SqlStore

    store = SqlStore(url)
    await store.open()
    try:
        for table in tables:
            total = rewritten = unopened = 0
            while True:
                done = await store.reencrypt_batch(seal, table, after, batch)
                total += done.read
                rewritten += done.rewritten
                unopened += done.unopened
                after = done.last
                progress(ReencryptProgress(table, total, rewritten, unopened, after))
                if after is None:
                    break
    finally:
        await store.close()


@dataclass(frozen=True, slots=True)
class ReencryptProgress:
    """After a batch: the table, its rows read and rewritten so far, the values that did not
    open (left as they are), the last key read (``None``: the table is done)."""

    table: str
    read: int
    rewritten: int
    unopened: int
    last: str | None
